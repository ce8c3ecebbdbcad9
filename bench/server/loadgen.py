#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (gem serve, llama-server): N concurrent clients,
each sending streamed chat requests back to back (fixed prompt size, fixed generation length:
max_tokens with ignore_eos, temperature 0, or with --sampled temperature 0.8 and top_k 40),
for each N in --clients. Prints, per N: requests,
aggregate generated tokens per second (all clients' completion tokens / the wall time of the
run), p50/p99 time to first token and p50/p99 per-token latency (the gaps between streamed
chunks of text after the first, what a client sees; a token that completes no character yet
arrives with the next). A run whose replies carry no text at all prints nan for both.

  python3 bench/server/loadgen.py --url http://127.0.0.1:8080 --clients 1,4,8,16,32 \
      [--prompt 512] [--gen 128] [--requests 2] [--label gem] [--json OUT]

The agent scenario (--agent): a main conversation of --main tokens, --turns follow-up turns;
first alone, then (a fresh conversation of the same size) with --subagents unrelated requests
running at once between its turns. For each main turn: prompt tokens, tokens the server
evaluated (timings.prompt_n, or prompt - usage.prompt_tokens_details.cached_tokens), time to
first token. A server that keeps the main conversation cached evaluates only each turn's new
tokens in both runs.

  python3 bench/server/loadgen.py --url ... --agent [--main 30000] [--turns 4] [--subagents 4]

The equality check (--check N): N fixed greedy requests, first one at a time, then all at once;
exits 1 unless every concurrent answer equals the same request's answer alone (issue 24's
correctness rule, for a server on a backend the CPU tests cannot reach, such as CUDA).

  python3 bench/server/loadgen.py --url ... --check 8 [--prompt 512] [--gen 128]

Every prompt starts with its own request number, so clients never share a cached prefix.
Thinking is off (chat_template_kwargs), so every streamed token is answer text. stdlib only.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conversation import text_of  # noqa: E402  (the synthetic text, ~tokens requested)


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


class Client:
    def __init__(self, url, key, model, timeout, sampling=None):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        self.key, self.model, self.timeout = key, model, timeout
        self.sampling = sampling or {"temperature": 0}

    def chat(self, messages, max_tokens, ignore_eos=True):
        """One streamed request: {ttft, gaps, n_gen, usage, timings, content, seconds}."""
        body = {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
                "seed": 1, "ignore_eos": ignore_eos,
                "chat_template_kwargs": {"enable_thinking": False}, **self.sampling}
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            err = resp.read()[:300]
            conn.close()
            raise RuntimeError(f"HTTP {resp.status}: {err!r}")
        out = {"ttft": None, "gaps": [], "n_chunks": 0, "usage": {}, "timings": {}, "content": []}
        last = None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                break
            ev = json.loads(line[6:])
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            if ev.get("timings"):
                out["timings"] = ev["timings"]
            for c in ev.get("choices", []):
                d = c.get("delta", {})
                text = (d.get("content") or "") + (d.get("reasoning_content") or "")
                if not text:
                    continue
                now = time.monotonic()
                if out["ttft"] is None:
                    out["ttft"] = now - t0
                else:
                    out["gaps"].append(now - last)
                last = now
                out["n_chunks"] += 1
                out["content"].append(d.get("content") or "")
        conn.close()
        out["seconds"] = time.monotonic() - t0
        out["content"] = "".join(out["content"])
        out["n_gen"] = out["usage"].get("completion_tokens", out["n_chunks"])
        return out


def evaluated(r):
    t, u = r["timings"], r["usage"]
    if "prompt_n" in t:
        return t["prompt_n"]
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return u.get("prompt_tokens", 0) - cached


def run_clients(client, n_clients, n_requests, prompt_tokens, gen, first_id):
    results, errors = [], []
    lock = threading.Lock()

    def worker(c):
        for j in range(n_requests):
            rid = first_id + c * n_requests + j
            msgs = [{"role": "user", "content": f"Request {rid}. " + text_of(prompt_tokens, rid) +
                     "\nContinue the list."}]
            try:
                r = client.chat(msgs, gen)
            except Exception as e:  # noqa: BLE001 (reported, the run goes on)
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                results.append(r)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    gen_tokens = sum(r["n_gen"] for r in results)
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    gaps = [g for r in results for g in r["gaps"]]
    return {"clients": n_clients, "requests": len(results), "errors": len(errors),
            "first_error": errors[0] if errors else None, "wall_s": wall,
            "gen_tokens": gen_tokens, "agg_tok_s": gen_tokens / wall if wall > 0 else 0.0,
            "ttft_p50_ms": percentile(ttft, 50) * 1e3, "ttft_p99_ms": percentile(ttft, 99) * 1e3,
            "tpot_p50_ms": percentile(gaps, 50) * 1e3, "tpot_p99_ms": percentile(gaps, 99) * 1e3,
            "prompt_tokens": statistics.mean([r["usage"].get("prompt_tokens", 0) for r in results])
            if results else 0}


def check(client, args):
    """N requests alone, then at once: the same text each, or exit status 1."""
    msgs = [[{"role": "user", "content": f"Request {i}. " + text_of(args.prompt, i) +
              "\nContinue the list."}] for i in range(args.check)]
    alone = [client.chat(m, args.gen)["content"] for m in msgs]
    together = [None] * args.check

    def run(i):
        together[i] = client.chat(msgs[i], args.gen)["content"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.check)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [i for i in range(args.check) if together[i] != alone[i]]
    print(f"{args.label}  check: {args.check - len(bad)} of {args.check} concurrent answers equal "
          f"the same request alone" + (f"; differ: {bad}" if bad else ""), flush=True)
    return {"label": args.label, "check": args.check, "differ": bad}


def agent(client, args, label):
    """The main conversation's turns alone, then with subagent traffic between them."""
    rows = []
    for phase, salt in (("alone", 1000), ("with subagents", 2000)):
        msgs = [{"role": "user", "content": f"Conversation {salt}. " + text_of(args.main, salt) +
                 "\nSummarise the list in one line."}]
        for turn in range(args.turns + 1):
            if phase == "with subagents" and turn > 0:
                subs = [threading.Thread(target=lambda k=k: client.chat(
                    [{"role": "user", "content": f"Subagent {salt + 10 * turn + k}. " +
                      text_of(args.sub, salt + 10 * turn + k) + "\nContinue the list."}], args.sub_gen))
                    for k in range(args.subagents)]
                for t in subs:
                    t.start()
                for t in subs:
                    t.join()
            r = client.chat(msgs, args.turn_gen, ignore_eos=False)
            rows.append({"phase": phase, "turn": turn, "prompt": r["usage"].get("prompt_tokens", 0),
                         "evaluated": evaluated(r), "ttft_ms": (r["ttft"] or r["seconds"]) * 1e3})
            print(f"{label}  agent {phase:15s} turn {turn}: prompt {rows[-1]['prompt']:6d}  "
                  f"evaluated {rows[-1]['evaluated']:6d}  ttft {rows[-1]['ttft_ms']:9.1f} ms",
                  flush=True)
            msgs.append({"role": "assistant", "content": r["content"] or "ok"})
            msgs.append({"role": "user", "content": f"Turn {turn + 1}: and the next item?"})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--api-key", default=os.environ.get("GEM_API_KEY", ""))
    ap.add_argument("--model", default="gemma-4")
    ap.add_argument("--clients", default="1,4,8,16,32", help="comma-separated client counts")
    ap.add_argument("--requests", type=int, default=2, help="requests per client per count")
    ap.add_argument("--prompt", type=int, default=512, help="~prompt tokens per request")
    ap.add_argument("--gen", type=int, default=128, help="generated tokens per request")
    ap.add_argument("--agent", action="store_true", help="run the agent scenario instead")
    ap.add_argument("--check", type=int, default=0,
                    help="N: check that N concurrent greedy answers equal the same requests alone")
    ap.add_argument("--main", type=int, default=30000, help="agent: ~tokens of the main conversation")
    ap.add_argument("--turns", type=int, default=4, help="agent: follow-up turns")
    ap.add_argument("--turn-gen", type=int, default=64, help="agent: max tokens of a main turn")
    ap.add_argument("--subagents", type=int, default=4)
    ap.add_argument("--sub", type=int, default=2000, help="agent: ~prompt tokens of a subagent")
    ap.add_argument("--sub-gen", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--label", default="server")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--sampled", action="store_true",
                    help="sampled requests (temperature 0.8, top_k 40) instead of greedy ones")
    args = ap.parse_args()
    sampling = {"temperature": 0.8, "top_k": 40} if args.sampled else None
    if args.sampled and args.check:
        ap.error("--check compares greedy outputs; it cannot be combined with --sampled")
    client = Client(args.url, args.api_key, args.model, args.timeout, sampling)
    if args.check > 0:
        out = check(client, args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        return 1 if out["differ"] else 0
    if args.agent:
        out = {"label": args.label, "agent": agent(client, args, args.label)}
    else:
        rows = []
        print(f"{'label':16s} {'clients':>7s} {'reqs':>5s} {'err':>4s} {'prompt':>7s} {'agg tok/s':>10s} "
              f"{'ttft p50':>9s} {'ttft p99':>9s} {'tpot p50':>9s} {'tpot p99':>9s}  (ms)")
        first_id = 0
        for n in [int(x) for x in args.clients.split(",") if x]:
            r = run_clients(client, n, args.requests, args.prompt, args.gen, first_id)
            first_id += n * args.requests
            rows.append(r)
            print(f"{args.label:16s} {n:7d} {r['requests']:5d} {r['errors']:4d} {r['prompt_tokens']:7.0f} "
                  f"{r['agg_tok_s']:10.1f} {r['ttft_p50_ms']:9.1f} {r['ttft_p99_ms']:9.1f} "
                  f"{r['tpot_p50_ms']:9.2f} {r['tpot_p99_ms']:9.2f}", flush=True)
            if r["first_error"]:
                print(f"  first error: {r['first_error']}", flush=True)
        out = {"label": args.label, "prompt": args.prompt, "gen": args.gen, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
