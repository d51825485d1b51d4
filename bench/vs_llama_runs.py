#!/usr/bin/python3
"""colibri and llama.cpp side by side on the same weights: the measured runs.

    vs_llama_runs.py --llama-bin DIR --colibri BIN --out RAW.json
                     --pair NAME:GGUF:CONTAINER [--pair ...]
                     [--tokens N] [--repeat R] [--fio-seconds S]
                     [--threads T] [--pp 512] [--only ram,2G,1G,pp]

A pair names one llama.cpp GGUF and the colibri container made from the
same bf16 values (bench/vs_llama.sh makes them). Every measurement is a
pair of runs, llama.cpp then colibri, repeated R times (A B A B), with fio
reading the pair's files just before (the disk drifts; ratios stay in one
run):

  ram    every pair, greedy, no memory cap: both engines' files read whole
         into the page cache, then a warm-up run of each (colibri's as long
         as the measured ones, so its usage sidecar knows their experts),
         colibri with --no-direct so its reads come from the page cache as
         llama.cpp's mmap does;
  2G     the first pair, greedy and sampled (temperature 0.8, seed 1),
         inside a cgroup v1 memory group of 2 GiB, page cache dropped before
         each run; colibri with --ram 1536M (the rest is the cgroup's page
         cache and the process), llama.cpp from its mmap with --no-repack
         (repacking copies the whole model into anonymous memory, which the
         cap kills);
  1G     the same at 1 GiB (--ram 900M), greedy;
  pp     prompt processing of --pp random tokens: llama-bench -p N -n 0
         (under the cap, where llama-bench cannot turn repacking off,
         llama-completion --no-repack with an N-token prompt) against
         colibri run with an N-token prompt and -n 1, in RAM and under the
         2 GiB cap.

Bytes per token are what the block layer read for the process (rusage
inblock: O_DIRECT reads and page-cache misses, hits excluded) over the whole
run, divided by the generated tokens. colibri's own --stats-json is kept
(decode tok/s, bytes of the decode window, missed-expert bytes).
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_lib  # noqa: E402
import decode_runs  # noqa: E402

CGROUP_DIR = "/sys/fs/cgroup/memory/colibri-vs-llama"
CAPS = {"2G": (2 << 30, "1536M"), "1G": (1 << 30, "900M")}


def cgroup(limit):
    """decode_runs' cgroup v1 memory group, under this benchmark's own name."""
    cg = decode_runs.Cgroups(limit)
    cg.dir = CGROUP_DIR
    return cg


def fio(files, bs, seconds):
    """decode_runs' fio (random O_DIRECT reads through io_uring at depth 32)
    over any files at block size bs."""
    size = sum(os.path.getsize(f) for f in files)
    return decode_runs.fio(types.SimpleNamespace(files=files, record_bytes=bs, expert_bytes=size // bs * bs),
                           32, seconds)


def run(argv, cap=None, cwd=None):
    """Runs argv (inside the cap's cgroup when given); wall seconds, block
    bytes read, exit code, stdout + stderr text."""
    pre = cap.join if cap else None
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre, cwd=cwd)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    return {"wall_s": time.monotonic() - t0, "read_bytes": ru.ru_inblock * 512,
            "rc": os.waitstatus_to_exitcode(status), "cpu_s": ru.ru_utime + ru.ru_stime,
            "max_rss_bytes": ru.ru_maxrss * 1024, "out": out.decode(errors="replace")}


# "common_perf_print:        eval time =    2002.65 ms /    31 runs   (...)":
# the decode steps after the first token (the prompt's line says "prompt eval").
EVAL_RE = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")


def llama_tok_s(text):
    """(decode tok/s, decode steps) from llama.cpp's timing lines."""
    m = EVAL_RE.search(text)
    if not m:
        return None, 0
    ms, n = float(m.group(1)), int(m.group(2))
    return (n / (ms / 1000.0) if ms > 0 else 0.0), n


def llama_decode(args, gguf, sampled, cap, tokens):
    argv = [os.path.join(args.llama_bin, "llama-completion"), "-m", gguf, "-p", "Hello", "-n", str(tokens),
            "-t", str(args.threads), "-c", "512", "--ignore-eos", "-no-cnv", "--no-warmup", "-s", "1",
            "--temp", "0.8" if sampled else "0"]
    if cap:
        # Repacking copies the weights into anonymous memory (the whole
        # model), which a capped cgroup kills; without it llama.cpp runs
        # from its mmap, as a user on such a machine would have to.
        argv.append("--no-repack")
    r = run(argv, cap)
    tok_s, n = llama_tok_s(r["out"])
    tail = r["out"][-2000:]
    r.pop("out")
    r.update(engine="llama.cpp", argv=argv, tok_s=tok_s, tokens=n)
    if r["rc"] != 0 or tok_s is None:
        r["error"] = tail
    return r


def colibri_run(args, ctr, cap, ram, scratch, extra, rate, shown=None):
    """colibri run on ctr with the arguments extra, from the page cache
    (--no-direct) without a budget, else with --ram; rate: the --stats-json
    field that is the result's tok/s. shown: argv as reported (a long
    prompt elided)."""
    js = os.path.join(scratch, "colibri-stats.json")
    argv = [args.colibri, "run", "--model", ctr, "--threads", str(args.threads), "--stats-json", js] + extra
    argv += ["--ram", ram] if ram else ["--no-direct"]
    r = run(argv, cap)
    tail = r.pop("out")[-2000:]
    r.update(engine="colibri", argv=shown(argv) if shown else argv)
    if r["rc"] != 0:
        r["error"] = tail
        return r
    r["stats"] = bench_lib.read_json(js)
    r["tok_s"] = r["stats"].get(rate)
    return r


def colibri_decode(args, ctr, sampled, cap, ram, tokens, scratch):
    r = colibri_run(args, ctr, cap, ram, scratch, ["--tokens", "1000", "-n", str(tokens), "--seed", "1",
                                                   "--temp", "0.8" if sampled else "0"], "decode_tok_s")
    r["tokens"] = tokens
    return r


def colibri_prefill(args, ctr, cap, ram, n, scratch):
    rng = random.Random(7)
    ids = ",".join(str(rng.randrange(1000, 40000)) for _ in range(n))
    return colibri_run(args, ctr, cap, ram, scratch,
                       ["--tokens", ids, "-n", "1", "--temp", "0", "--ctx", str(n + 8)], "prompt_tok_s",
                       lambda argv: ["(%d prompt ids)" % n if a == ids else a for a in argv])


PROMPT_RE = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def llama_prefill(args, gguf, cap, n):
    """llama-bench -p n in RAM; under a cap llama-bench cannot turn repacking
    off (the cap kills it), so llama-completion --no-repack with an n-token
    prompt (the synthetic vocabulary gives one token per letter)."""
    if cap:
        rng = random.Random(7)
        text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n - 1))
        argv = [os.path.join(args.llama_bin, "llama-completion"), "-m", gguf, "-p", text, "-n", "1", "-t",
                str(args.threads), "-c", str(n + 16), "-b", str(n), "-ub", str(n), "-no-cnv", "--no-warmup",
                "--temp", "0", "--no-repack"]
        r = run(argv, cap)
        out = r.pop("out")
        r.update(engine="llama.cpp", argv=["(%d letters)" % (n - 1) if a == text else a for a in argv])
        m = PROMPT_RE.search(out)
        if m and float(m.group(1)) > 0:
            r["tok_s"] = int(m.group(2)) / (float(m.group(1)) / 1000.0)
            r["prompt_tokens"] = int(m.group(2))
        else:
            r["error"] = out[-2000:]
        return r
    argv = [os.path.join(args.llama_bin, "llama-bench"), "-m", gguf, "-p", str(n), "-n", "0", "-t",
            str(args.threads), "-r", "1", "-o", "jsonl"]
    r = run(argv, cap)
    out = r.pop("out")
    r.update(engine="llama.cpp", argv=argv)
    try:
        line = next(l for l in out.splitlines() if l.startswith("{") and '"avg_ts"' in l)
        r["tok_s"] = json.loads(line)["avg_ts"]
    except (StopIteration, ValueError, KeyError):
        r["error"] = out[-2000:]
    return r


def expert_files(ctr):
    man = bench_lib.read_json(os.path.join(ctr, "manifest.json"))
    files = sorted({os.path.join(ctr, l["file"]) for l in man["experts"]["layers"]})
    return files, max(l["record_bytes"] for l in man["experts"]["layers"])


def say(msg):
    sys.stderr.write("vs_llama: %s\n" % msg)
    sys.stderr.flush()


def host_cpu():
    """The CPU's model name and the SIMD flags that matter here (the host
    changes from day to day, so each results file names its own)."""
    model, flags = "unknown", []
    want = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
            "avx512_bf16", "avx512vbmi", "amx_tile", "amx_int8")
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                have = set(line.split(":", 1)[1].split())
                flags = [f for f in want if f in have]
    except OSError:
        pass
    return model, " ".join(flags)


def colibri_simd(colibri, ctr):
    """The kernels colibri picks here (its --stats line "kernels: LEVEL,
    activations A"), from one token of the container ctr; or unknown."""
    try:
        out = subprocess.run([colibri, "run", "--model", ctr, "--tokens", "1", "-n", "1", "--stats"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in out.splitlines():
        if line.startswith("kernels:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--colibri", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pair", action="append", required=True, help="NAME:GGUF:CONTAINER")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fio-seconds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--only", default="ram,2G,1G,pp")
    ap.add_argument("--llama-flags", default="unknown", help="the GGML_* switches llama.cpp was built with")
    args = ap.parse_args()
    only = set(args.only.split(","))
    pairs = []
    for p in args.pair:
        name, gguf, ctr = p.split(":")
        for f in (gguf, os.path.join(ctr, "manifest.json")):
            if not os.path.isfile(f):
                raise SystemExit("vs_llama_runs: %s: no such file" % f)
        pairs.append({"name": name, "gguf": gguf, "ctr": ctr})
    root = os.geteuid() == 0
    scratch = tempfile.mkdtemp(prefix="vs-llama-")
    raw = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": os.uname().release,
           "cpus": os.cpu_count(), "threads": args.threads, "tokens": args.tokens, "repeat": args.repeat,
           "cpu_model": host_cpu()[0], "cpu_flags": host_cpu()[1], "llama_flags": args.llama_flags,
           "colibri_simd": colibri_simd(args.colibri, pairs[0]["ctr"]),
           "pairs": pairs, "measurements": []}

    def measure(kind, pair, sampled, cap_name):
        files, rec = expert_files(pair["ctr"])
        m = {"kind": kind, "pair": pair["name"], "sampled": sampled, "cap": cap_name, "runs": [],
             "fio_colibri": fio(files, rec, args.fio_seconds),
             "fio_gguf": fio([pair["gguf"]], rec, args.fio_seconds)}
        limit, ram = CAPS[cap_name] if cap_name else (None, None)
        for rep in range(args.repeat):
            for engine in ("llama.cpp", "colibri"):
                if cap_name:
                    bench_lib.drop_caches()
                    if os.path.exists(os.path.join(pair["ctr"], "usage.json")):
                        os.unlink(os.path.join(pair["ctr"], "usage.json"))
                    with cgroup(limit) as cg:
                        r = (llama_decode(args, pair["gguf"], sampled, cg, args.tokens) if engine == "llama.cpp"
                             else colibri_decode(args, pair["ctr"], sampled, cg, ram, args.tokens, scratch))
                else:
                    r = (llama_decode(args, pair["gguf"], sampled, None, args.tokens) if engine == "llama.cpp"
                         else colibri_decode(args, pair["ctr"], sampled, None, None, args.tokens, scratch))
                r["repeat"] = rep
                m["runs"].append(r)
                say("%s %s %s%s #%d %s: %s tok/s%s" % (kind, pair["name"], cap_name or "in RAM",
                                                      " sampled" if sampled else "", rep, engine,
                                                      "%.2f" % r["tok_s"] if r.get("tok_s") else "-",
                                                      " ERROR" if "error" in r else ""))
        raw["measurements"].append(m)
        with open(args.out, "w") as f:
            json.dump(raw, f, indent=1)

    if "ram" in only:
        for pair in pairs:
            # Warm-up: both engines' files read whole into the page cache (a
            # few decode steps touch a fraction of them), one run of each,
            # colibri's run of the measured length so it learns (and the next
            # runs pin) the experts the measured runs use.
            files, _ = expert_files(pair["ctr"])
            for f in files + [pair["gguf"], os.path.join(pair["ctr"], "resident.bin")]:
                with open(f, "rb") as fh:
                    while fh.read(1 << 24):
                        pass
            llama_decode(args, pair["gguf"], False, None, 4)
            colibri_decode(args, pair["ctr"], False, None, None, args.tokens, scratch)
            measure("decode", pair, False, None)
    for cap_name in ("2G", "1G"):
        if cap_name not in only:
            continue
        if not root or not os.path.isdir("/sys/fs/cgroup/memory"):
            say("%s: skipped (needs root and the cgroup v1 memory controller)" % cap_name)
            continue
        measure("decode", pairs[0], False, cap_name)
        if cap_name == "2G":
            measure("decode", pairs[0], True, cap_name)
    if "pp" in only:
        for cap_name in (None, "2G"):
            if cap_name and not root:
                continue
            pair = pairs[0]
            m = {"kind": "prefill", "pair": pair["name"], "cap": cap_name, "n": args.pp, "runs": []}
            limit, ram = CAPS[cap_name] if cap_name else (None, None)
            for rep in range(args.repeat):
                for engine in ("llama.cpp", "colibri"):
                    if cap_name:
                        bench_lib.drop_caches()
                        with cgroup(limit) as cg:
                            r = (llama_prefill(args, pair["gguf"], cg, args.pp) if engine == "llama.cpp"
                                 else colibri_prefill(args, pair["ctr"], cg, ram, args.pp, scratch))
                    else:
                        r = (llama_prefill(args, pair["gguf"], None, args.pp) if engine == "llama.cpp"
                             else colibri_prefill(args, pair["ctr"], None, None, args.pp, scratch))
                    r["repeat"] = rep
                    m["runs"].append(r)
                    say("pp%d %s #%d %s: %s tok/s%s" % (args.pp, cap_name or "in RAM", rep, engine,
                                                       "%.1f" % r["tok_s"] if r.get("tok_s") else "-",
                                                       " ERROR" if "error" in r else ""))
            raw["measurements"].append(m)
            with open(args.out, "w") as f:
                json.dump(raw, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(raw, f, indent=1)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
