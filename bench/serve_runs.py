#!/usr/bin/env python3
"""The measured runs of bench/serve.sh: colibri serve under a memory cap,
driven by 1, 2 and 4 concurrent greedy streams; raw JSON out.

    serve_runs.py --colibri BIN --model DIR --out RAW.json [--streams 1,2,4]
                  [--tokens 32] [--repeat 3] [--cgroup-limit 2G] [--ram 1536M]
                  [--parallel 4] [--ctx 64] [--threads 0] [--server-args ARGS] [--command TEXT]

For each repeat and each stream count N (interleaved, so a slow patch of the
shared machine hits them alike): the page cache is dropped, a fresh server
starts inside a cgroup v1 memory group (memory.limit_in_bytes = the cap) with
the same options every time (--parallel 4 slots whatever N, --no-pin, the
model's usage.json removed first, so every run starts from the same empty
expert cache), N clients post /v1/completions at once, each a stream of
--tokens greedy tokens after its own prompt of 8 token ids (seeded by the
stream's index, the same in every run), and /metrics is read before and after.

Per run: aggregate tok/s = tokens of all streams / (last token - first
request sent); decode tok/s = tokens after each stream's first / (last token
- the latest first token), the steady state with every stream decoding;
expert bytes read per generated token from colibri_expert_read_bytes_total;
the hit rate over the run; the cgroup's peak usage; and whether each stream's
text equals that stream's text when it ran alone (N = 1 gives stream 0 only,
so stream i of the larger runs is compared across repeats).
Needs root for drop_caches and the cgroup (without root: no cap, marked).
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import bench_lib  # noqa: E402
import decode_runs  # noqa: E402

PROMPT_TOKENS = 8


def parse_size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)", s)
    if not m:
        raise SystemExit("bad size %s" % s)
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def prompt_of(i, vocab):
    r = random.Random(1000 + i)
    return [r.randrange(10, vocab) for _ in range(PROMPT_TOKENS)]


def stream(port, prompt, tokens, barrier, out):
    """One client: a streamed completion; times of the request and each token."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    barrier.wait()
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    times, text, usage, buf = [], [], None, b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            data = ev.decode()[6:]
            if data == "[DONE]":
                continue
            j = json.loads(data)
            if j.get("usage"):
                usage = j["usage"]
            for ch in j.get("choices", []):
                if ch.get("text"):
                    times.append(time.monotonic())
                    text.append(ch["text"])
    c.close()
    out.update(t0=t0, times=times, text="".join(text), status=r.status,
               tokens=usage["completion_tokens"] if usage else None)


def start_server(args, cg):
    usage = os.path.join(args.model, "usage.json")
    if os.path.exists(usage):
        os.remove(usage)
    cmd = [args.colibri, "serve", "--model", args.model, "--port", "0", "--no-pin", "--ram", args.ram,
           "--parallel", str(args.parallel), "--ctx", str(args.ctx), "--max-tokens", str(args.tokens), "--stats"]
    cmd += args.server_args.split()
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=cg.join if cg else None)
    line = p.stdout.readline()
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit("serve did not start: %s %s" % (line, p.stderr.read()))
    return p, int(m.group(1)), cmd


def one_run(args, n, rep, vocab):
    root = os.geteuid() == 0
    if root:
        bench_lib.drop_caches()
    cg = decode_runs.Cgroups(parse_size(args.cgroup_limit)) if root and args.cgroup_limit else None
    if cg:
        cg.dir = os.path.join(decode_runs.CGROUP_ROOT, "memory", "colibri-serve-bench")
        cg.__enter__()
    try:
        p, port, cmd = start_server(args, cg)
        m0 = metrics(port)
        barrier = threading.Barrier(n)
        outs = [{} for _ in range(n)]
        th = [threading.Thread(target=stream, args=(port, prompt_of(i, vocab), args.tokens, barrier, outs[i]))
              for i in range(n)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        m1 = metrics(port)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=120)[1]
        memcg = cg.read() if cg else {}
    finally:
        if cg:
            cg.__exit__(None, None, None)
    toks = sum(o["tokens"] or 0 for o in outs)
    t_start = min(o["t0"] for o in outs)
    t_last = max(o["times"][-1] for o in outs if o["times"])
    t_first_max = max(o["times"][0] for o in outs if o["times"])
    after_first = sum(len(o["times"]) - 1 for o in outs)
    d = lambda k: m1.get(k, 0) - m0.get(k, 0)  # noqa: E731
    return {
        "streams": n, "repeat": rep, "capped": bool(cg), "command": " ".join(cmd),
        "tokens": toks, "aggregate_tok_s": toks / (t_last - t_start),
        "decode_tok_s": after_first / (t_last - t_first_max) if t_last > t_first_max else None,
        "ttft_s": [o["times"][0] - o["t0"] for o in outs if o["times"]],
        "bytes_read": d("colibri_expert_read_bytes_total"),
        "bytes_per_token": d("colibri_expert_read_bytes_total") / toks if toks else None,
        "expert_requests": d("colibri_expert_requests_total"), "expert_hits": d("colibri_expert_hits_total"),
        "steps": d("colibri_steps_total"), "texts": [o["text"] for o in outs],
        "statuses": [o["status"] for o in outs], "exit": p.returncode, "stderr_tail": err[-2000:], **memcg,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--colibri", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cgroup-limit", default="2G")
    ap.add_argument("--ram", default="1536M")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--server-args", default="", help="more colibri serve options, e.g. --no-prefetch")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    vocab = cfg["vocab_size"]
    runs = []
    for rep in range(1, args.repeat + 1):
        for n in [int(x) for x in args.streams.split(",")]:
            sys.stderr.write("serve_runs: repeat %d, %d stream(s)\n" % (rep, n))
            r = one_run(args, n, rep, vocab)
            sys.stderr.write("serve_runs:   %.2f tok/s aggregate, %.2f decode, %.1f MB read per token\n"
                             % (r["aggregate_tok_s"], r["decode_tok_s"] or 0, (r["bytes_per_token"] or 0) / 1e6))
            runs.append(r)
    with open(args.out, "w") as f:
        json.dump({"command": args.command, "args": vars(args), "root": os.geteuid() == 0,
                   "top_k": cfg["num_experts_per_tok"], "layers": cfg["num_hidden_layers"],
                   "n_experts": cfg["num_experts"],
                   "date": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
