#!/usr/bin/env python3
"""Renders chat cases with the official Gemma 4 template through python3 jinja2, the way Hugging
Face's apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
raise_exception / strftime_now globals, HF's tojson filter), for gem's differential test.

usage: render_jinja.py TEMPLATE CASE.json...   -> one JSON object {case path: rendered text}

Each case is {messages, tools?, enable_thinking? (false), add_generation_prompt? (true)}.
Four conversions mirror what gem's request validator defines (chat/validate.h), which gem serve
and gem template share:
  * JSON objects are loaded with their keys sorted by code point, as nlohmann::json holds them
    (only the relative order of keys that differ just in case can depend on it: dictsort is
    case-insensitive and stable);
  * a tool call's `arguments` string is parsed into an object, as transformers passes it (an
    empty/blank string becomes {}; the template renders both as "{}");
  * a content array's text parts are joined with "\n" into one string, for every role
    (llama.cpp's concat_content_parts);
  * the role `developer` is `system`.
"""
import datetime
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def sorted_object(pairs):
    return dict(sorted(pairs, key=lambda kv: kv[0]))


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' chat-template tojson (no HTML escaping, unlike Jinja's default).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def load_case(path):
    with open(path, encoding="utf-8") as f:
        case = json.load(f, object_pairs_hook=sorted_object)
    for msg in case.get("messages", []):
        if isinstance(msg, dict) and isinstance(msg.get("content"), list):
            msg["content"] = "\n".join(part["text"] for part in msg["content"])
        if isinstance(msg, dict) and msg.get("role") == "developer":
            msg["role"] = "system"
        for call in (msg.get("tool_calls") or []) if isinstance(msg, dict) else []:
            fn = call.get("function", {})
            args = fn.get("arguments")
            if isinstance(args, str):
                fn["arguments"] = {} if not args.strip() else json.loads(
                    args, object_pairs_hook=sorted_object)
    return case


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        template = env.from_string(f.read())
    out = {}
    for path in sys.argv[2:]:
        case = load_case(path)
        variables = {
            "messages": case["messages"],
            "bos_token": "<bos>",
            "eos_token": "<eos>",
            "add_generation_prompt": case.get("add_generation_prompt", True),
            "enable_thinking": case.get("enable_thinking", False),
        }
        if case.get("tools") is not None:
            variables["tools"] = case["tools"]
        out[path] = template.render(**variables)
    json.dump(out, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
