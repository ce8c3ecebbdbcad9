#!/usr/bin/env python3
"""The agent conversation of issue 28 through an OpenAI-compatible server (gem serve or
llama-server): a long first message (cold), three follow-up turns of a few new tokens (prefix
reuse), then a long generation at that depth; prints first-turn time, follow-up wall times and
the generation speed the server reports (timings.predicted_per_second) and the client sees.

  python3 bench/server/conversation.py --url http://127.0.0.1:8080 [--first 29208] [--follow 34]
      [--turns 3] [--gen 256] [--stream] [--label gem] [--json OUT]

Text is synthetic (numbered sentences) so that any tokenizer gives roughly --first tokens; the
prompt sizes the server reports (usage.prompt_tokens) are printed, so the depth is exact in the
output. Requests are non-streamed unless --stream; temperature 0. stdlib only.
"""
import argparse
import json
import sys
import time
import urllib.request

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
         "sigma tau upsilon phi chi psi omega").split()


def text_of(n_tokens, salt):
    # ~3.1 tokens per word with Gemma's tokenizer on this text (`gem tokenize`: 2,000 requested,
    # 4,775 made at 1.3); the server's count is printed.
    words, i = [], 0
    while len(words) < int(n_tokens / 3.1):
        words.append(f"{WORDS[(i * 7 + salt) % len(WORDS)]}{i % 97}")
        i += 1
        if i % 12 == 0:
            words[-1] += "."
    return " ".join(words)


def post(url, body, key, stream):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": "Bearer " + key} if key else {})})
    t0 = time.monotonic()
    first = None
    with urllib.request.urlopen(req, timeout=3600) as r:
        if not stream:
            out = json.loads(r.read())
            return out, time.monotonic() - t0, None
        content, last = [], None
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if first is None and ev.get("choices") and ev["choices"][0].get("delta", {}).get("content"):
                first = time.monotonic() - t0
            for c in ev.get("choices", []):
                content.append(c.get("delta", {}).get("content") or "")
            last = ev
        out = {"choices": [{"message": {"role": "assistant", "content": "".join(content)}}],
               "timings": (last or {}).get("timings", {}), "usage": (last or {}).get("usage", {})}
        return out, time.monotonic() - t0, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--first", type=int, default=29208, help="tokens of the first message (approx.)")
    ap.add_argument("--follow", type=int, default=34, help="new tokens per follow-up turn (approx.)")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--gen", type=int, default=256, help="tokens generated at the end")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--sampled", action="store_true",
                    help="send no temperature: the server's default sampling (what hax sends)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--label", default="server")
    ap.add_argument("--json", help="write the figures here as JSON")
    a = ap.parse_args()

    msgs = [{"role": "user", "content": text_of(a.first, 0)}]
    rows = []

    def turn(what, max_tokens):
        # ignore_eos (llama-server's field, gem's too): a synthetic model's greedy output may end
        # at once; the generation turn must run its full length.
        body = {"model": "m", "messages": msgs, "max_tokens": max_tokens, "stream": a.stream,
                "ignore_eos": True}
        if not a.sampled:
            body["temperature"] = 0
        if a.stream:
            body["stream_options"] = {"include_usage": True}
        out, wall, ttft = post(a.url, body, a.api_key, a.stream)
        t = out.get("timings", {})
        u = out.get("usage", {})
        row = {"turn": what, "wall_s": round(wall, 4), "ttft_s": ttft and round(ttft, 4),
               "prompt_tokens": u.get("prompt_tokens", t.get("prompt_n")), "cached": t.get("cache_n"),
               "predicted_n": t.get("predicted_n", u.get("completion_tokens")),
               "predicted_per_second": t.get("predicted_per_second")}
        rows.append(row)
        msgs.append({"role": "assistant", "content": out["choices"][0]["message"].get("content") or ""})
        return row

    turn("first (cold)", 1)
    for k in range(a.turns):
        msgs.append({"role": "user", "content": text_of(a.follow, k + 1)})
        turn(f"follow-up {k + 1}", 1)
    msgs.append({"role": "user", "content": text_of(a.follow, 99)})
    g = turn("generation", a.gen)
    if g["predicted_n"] is not None and g["predicted_n"] < a.gen:
        print(f"note: the model stopped after {g['predicted_n']} of {a.gen} tokens", file=sys.stderr)

    print(f"| {a.label} | turn | prompt tokens | cached | wall s | generated | server tok/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        pps = r["predicted_per_second"]
        print(f"| {a.label} | {r['turn']} | {r['prompt_tokens']} | {r['cached']} | {r['wall_s']:.3f} | "
              f"{r['predicted_n']} | {pps:.2f} |" if pps else
              f"| {a.label} | {r['turn']} | {r['prompt_tokens']} | {r['cached']} | {r['wall_s']:.3f} | "
              f"{r['predicted_n']} | – |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "stream": a.stream, "sampled": a.sampled, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
