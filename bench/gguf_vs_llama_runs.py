#!/usr/bin/python3
"""colibri and llama.cpp on the same GGUF file: the measured runs.

    gguf_vs_llama_runs.py --llama-bin DIR --llama-logits BIN --colibri BIN
                          --out RAW.json --pair NAME:GGUF:CONTAINER [--pair ...]
                          [--agree-tokens 256] [--seed 1] [--tokens N]
                          [--repeat R] [--fio-seconds S] [--threads T]
                          [--only agree,ram,2G] [--note TEXT ...]

A pair names a GGUF and the colibri container `colibri convert GGUF
CONTAINER` made from it (bench/gguf_vs_llama.sh makes both), so both engines
hold the same weight blocks. For each pair:

  agree  teacher-forced logits of one fixed token sequence through both:
         bench/llama_logits.c (libllama, one batch, every position) and
         `colibri logits`, each f32 [n, vocab]. The sequence is --agree-tokens
         ids drawn uniformly (random.Random(seed)) from the vocabulary less
         its special ids (bos, eos, pad of the container's config): the
         models are random weights with no natural text, and a greedy
         continuation of such a model falls into a short cycle, so most of
         its positions would repeat one context; independent random ids give
         n distinct contexts, spread the routing over the experts, and come
         from neither engine. Reported: the fraction of positions whose
         argmax agrees, mean and max KL(llama.cpp || colibri) of the
         softmaxes, max |logit difference|, and how many disagreeing
         positions had a llama.cpp top-2 margin under 0.01 (near ties).
  ram    decode tok/s, greedy, no memory cap: both engines' files read whole
         into the page cache (again before every run), a warm-up run of
         each (colibri's of the measured length, so its usage sidecar knows
         the experts), then llama.cpp and colibri alternately (A B A B,
         --repeat pairs), fio on both engines' files before each pair;
         colibri with --no-direct (its reads from the page cache, as
         llama.cpp's mmap).
  2G     the same inside a cgroup v1 memory group of 2 GiB, page cache
         dropped before every run (and colibri's usage sidecar removed):
         colibri with --ram 1536M, llama.cpp from its mmap with --no-repack
         (repacking copies the weights into anonymous memory, which the cap
         kills).

The decode runs are vs_llama_runs.py's (the same command lines and
parsing); raw JSON is written after every measurement, so a run cut short
keeps what it measured. Progress goes to stderr.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_lib  # noqa: E402
import decode_runs  # noqa: E402
import vs_llama_runs as vl  # noqa: E402

CGROUP_DIR = "/sys/fs/cgroup/memory/colibri-gguf-vs-llama"
CAPS = {"2G": (2 << 30, "1536M")}


def say(msg):
    sys.stderr.write("gguf_vs_llama: %s\n" % msg)
    sys.stderr.flush()


def cgroup(limit):
    cg = decode_runs.Cgroups(limit)
    cg.dir = CGROUP_DIR
    return cg


def damon_pageout():
    """The running DAMON pageout schemes ({kdamond, min_age_s, quota
    bytes/s}): they evict page cache that has been idle a while, which
    makes "in RAM" runs read the disk after all."""
    base = "/sys/kernel/mm/damon/admin/kdamonds"
    out = []

    def rd(*p):
        with open(os.path.join(*p)) as f:
            return f.read().strip()
    try:
        for k in sorted(os.listdir(base)):
            kd = os.path.join(base, k)
            if not os.path.isdir(kd) or rd(kd, "state") != "on":
                continue
            for c in sorted(os.listdir(os.path.join(kd, "contexts"))):
                ctx = os.path.join(kd, "contexts", c)
                if not os.path.isdir(ctx):
                    continue
                aggr_us = int(rd(ctx, "monitoring_attrs", "intervals", "aggr_us"))
                for sc in sorted(os.listdir(os.path.join(ctx, "schemes"))):
                    sd = os.path.join(ctx, "schemes", sc)
                    if os.path.isdir(sd) and rd(sd, "action") == "pageout":
                        q = int(rd(sd, "quotas", "bytes")) * 1000 // max(1, int(rd(sd, "quotas", "reset_interval_ms")))
                        out.append({"kdamond": k, "min_age_s": int(rd(sd, "access_pattern", "age", "min")) * aggr_us / 1e6,
                                    "quota_bytes_per_s": q})
    except (OSError, ValueError):
        pass
    return out


def agree_tokens(ctr, n, seed):
    """n ids uniform over [0, vocab) less the config's special ids."""
    cfg = bench_lib.read_json(os.path.join(ctr, "config.json"))
    vocab = cfg["vocab_size"]
    special = set()
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = cfg.get(k)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, int):
                special.add(x)
    rng = random.Random(seed)
    ids = []
    while len(ids) < n:
        t = rng.randrange(vocab)
        if t not in special:
            ids.append(t)
    return ids, vocab


def logits_file(path, n, vocab, who):
    size = os.path.getsize(path) if os.path.exists(path) else -1
    if size != n * vocab * 4:
        raise RuntimeError("%s: %s holds %d bytes, [%d, %d] f32 is %d" % (who, path, size, n, vocab, n * vocab * 4))
    return np.fromfile(path, dtype="<f4").reshape(n, vocab)


def compare(a, b):
    """a: llama.cpp's logits, b: colibri's, both [n, vocab] float32."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    top_a, top_b = a.argmax(1), b.argmax(1)
    same = top_a == top_b
    la = a - a.max(1, keepdims=True)
    la -= np.log(np.exp(la).sum(1, keepdims=True))
    lb = b - b.max(1, keepdims=True)
    lb -= np.log(np.exp(lb).sum(1, keepdims=True))
    kl = (np.exp(la) * (la - lb)).sum(1)
    srt = np.sort(a, 1)
    margin = srt[:, -1] - srt[:, -2]
    diff = np.abs(a - b)
    return {"positions": int(a.shape[0]), "top1_agree": int(same.sum()),
            "top1_agree_frac": float(same.mean()), "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "logit_std_llama": float(a.std()),
            "disagree_near_tie": int(((~same) & (margin < 0.01)).sum()),
            "llama_top2_margin_median": float(np.median(margin))}


def agreement(args, pair, scratch):
    ids, vocab = agree_tokens(pair["ctr"], args.agree_tokens, args.seed)
    toks = ",".join(map(str, ids))
    lf = os.path.join(scratch, "llama.logits")
    cf = os.path.join(scratch, "colibri.logits")
    for f in (lf, cf):
        if os.path.exists(f):
            os.unlink(f)
    out = {"tokens": "uniform random ids, random.Random(%d), %d of vocab %d less bos/eos/pad"
           % (args.seed, len(ids), vocab), "n": len(ids)}
    la = [args.llama_logits, "--model", pair["gguf"], "--tokens", toks, "--out", lf, "--threads", str(args.threads)]
    ca = [args.colibri, "logits", "--model", pair["ctr"], "--tokens", toks, "--out", cf,
          "--threads", str(args.threads), "--ctx", str(len(ids) + 8)]
    shown = lambda argv: ["(%d ids)" % len(ids) if a == toks else a for a in argv]  # noqa: E731
    out["argv_llama"], out["argv_colibri"] = shown(la), shown(ca)
    for who, argv in (("llama.cpp", la), ("colibri", ca)):
        say("agree %s: %s logits of %d positions" % (pair["name"], who, len(ids)))
        t0 = time.monotonic()
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out["wall_s_" + ("llama" if who == "llama.cpp" else "colibri")] = time.monotonic() - t0
        if p.returncode != 0:
            out["error"] = "%s exited %d: %s" % (who, p.returncode, p.stdout.decode(errors="replace")[-2000:])
            say("agree %s: %s FAILED (%d)" % (pair["name"], who, p.returncode))
            return out
    try:
        out.update(compare(logits_file(lf, len(ids), vocab, "llama.cpp"), logits_file(cf, len(ids), vocab, "colibri")))
    except RuntimeError as e:
        out["error"] = str(e)
        return out
    say("agree %s: top-1 %d/%d (%.1f%%), mean KL %.3g, max |diff| %.3g" % (
        pair["name"], out["top1_agree"], out["positions"], 100 * out["top1_agree_frac"], out["kl_mean"],
        out["max_abs_diff"]))
    return out


def read_through(pair):
    """Both engines' files read whole into the page cache (seconds when they
    are there already)."""
    files, _ = vl.expert_files(pair["ctr"])
    for f in files + [pair["gguf"], os.path.join(pair["ctr"], "resident.bin")]:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def warm(args, pair, scratch):
    read_through(pair)
    vl.llama_decode(args, pair["gguf"], False, None, 4)
    vl.colibri_decode(args, pair["ctr"], False, None, None, args.tokens, scratch)


def decode(args, pair, cap_name, scratch):
    files, rec = vl.expert_files(pair["ctr"])
    m = {"kind": "decode", "pair": pair["name"], "sampled": False, "cap": cap_name, "runs": []}
    limit, ram = CAPS[cap_name] if cap_name else (None, None)
    for rep in range(args.repeat):
        # fio before each pair of runs: the disk drifts, the ratio is taken
        # within one pair.
        m.setdefault("fio", []).append({"colibri": vl.fio(files, rec, args.fio_seconds),
                                        "gguf": vl.fio([pair["gguf"]], rec, args.fio_seconds)})
        for engine in ("llama.cpp", "colibri"):
            load = os.getloadavg()[0]
            if not cap_name:
                # Again before every run: other work on the machine evicts
                # the page cache between runs, and an in-RAM run that reads
                # the disk measures the neighbours.
                read_through(pair)
            else:
                bench_lib.drop_caches()
                usage = os.path.join(pair["ctr"], "usage.json")
                if os.path.exists(usage):
                    os.unlink(usage)
            busy0 = decode_runs.read_cpu_busy_s()
            if cap_name:
                with cgroup(limit) as cg:
                    r = (vl.llama_decode(args, pair["gguf"], False, cg, args.tokens) if engine == "llama.cpp"
                         else vl.colibri_decode(args, pair["ctr"], False, cg, ram, args.tokens, scratch))
            else:
                r = (vl.llama_decode(args, pair["gguf"], False, None, args.tokens) if engine == "llama.cpp"
                     else vl.colibri_decode(args, pair["ctr"], False, None, None, args.tokens, scratch))
            # What the rest of the machine ran meanwhile: its CPU seconds
            # (all busy time less the engine's own) over all the CPU
            # seconds the run's wall time offered.
            others = decode_runs.read_cpu_busy_s() - busy0 - r["cpu_s"]
            r["others_cpu_share"] = max(0.0, others) / (r["wall_s"] * os.cpu_count())
            r["repeat"] = rep
            r["loadavg_before"] = load
            m["runs"].append(r)
            say("decode %s %s #%d %s: %s tok/s%s (others took %.0f%% of the CPU)" % (
                pair["name"], cap_name or "in RAM", rep, engine,
                "%.2f" % r["tok_s"] if r.get("tok_s") else "-", " ERROR" if "error" in r else "",
                100 * r["others_cpu_share"]))
    # The first fio of the pair under the vs_llama_report names, for readers
    # of either report.
    m["fio_colibri"], m["fio_gguf"] = m["fio"][0]["colibri"], m["fio"][0]["gguf"]
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--llama-logits", required=True)
    ap.add_argument("--colibri", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pair", action="append", required=True, help="NAME:GGUF:CONTAINER")
    ap.add_argument("--agree-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fio-seconds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--only", default="agree,ram,2G")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--standin", action="store_true",
                    help="the containers were converted from the HF directory, not from the GGUFs")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if args.standin:
        args.note.append("STAND-IN: the colibri containers were converted from the HF directory (Q8_0 against "
                         "--quant int8, Q4_0 and Q4_K_M against --quant int4 --dense-quant int4, F32 against "
                         "--quant f32), not from the GGUF: except for F32, different weights, so those agreement "
                         "rows compare two quantizations of the same bf16 values, not one file read by two "
                         "engines.")
    bad = only - {"agree", "ram", "2G"}
    if bad:
        raise SystemExit("gguf_vs_llama_runs: --only: unknown %s (agree, ram, 2G)" % ",".join(sorted(bad)))
    pairs = []
    for p in args.pair:
        name, gguf, ctr = p.split(":")
        for f in (gguf, os.path.join(ctr, "manifest.json"), os.path.join(ctr, "config.json")):
            if not os.path.isfile(f):
                raise SystemExit("gguf_vs_llama_runs: %s: no such file" % f)
        pairs.append({"name": name, "gguf": gguf, "ctr": ctr, "gguf_bytes": os.path.getsize(gguf)})
    for b in (args.llama_logits, os.path.join(args.llama_bin, "llama-completion")):
        if not os.access(b, os.X_OK):
            raise SystemExit("gguf_vs_llama_runs: %s: not an executable" % b)
    root = os.geteuid() == 0
    damon = damon_pageout()
    for d in damon:
        args.note.append("This host runs a DAMON pageout scheme (kdamond %s: page cache idle for %.0f s paged out, "
                         "up to %d MB/s): the files are read through again before every in-RAM run; MB read / "
                         "token shows what came from the disk anyway." % (d["kdamond"], d["min_age_s"],
                                                                            d["quota_bytes_per_s"] >> 20))
    scratch = tempfile.mkdtemp(prefix="gguf-vs-llama-")
    raw = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": os.uname().release,
           "cpus": os.cpu_count(), "threads": args.threads, "tokens": args.tokens, "repeat": args.repeat,
           "agree_tokens": args.agree_tokens, "seed": args.seed, "standin": args.standin, "damon_pageout": damon, "notes": args.note,
           "pairs": pairs,
           "agreement": [], "measurements": []}

    def save():
        with open(args.out, "w") as f:
            json.dump(raw, f, indent=1)

    try:
        if "agree" in only:
            for pair in pairs:
                a = agreement(args, pair, scratch)
                a["pair"] = pair["name"]
                raw["agreement"].append(a)
                save()
        if "ram" in only:
            for pair in pairs:
                say("decode %s in RAM: warming the page cache and both engines" % pair["name"])
                warm(args, pair, scratch)
                raw["measurements"].append(decode(args, pair, None, scratch))
                save()
        if "2G" in only:
            if not root or not os.path.isdir("/sys/fs/cgroup/memory"):
                say("2G: skipped (needs root and the cgroup v1 memory controller)")
                raw["notes"].append("The 2 GiB runs were skipped: not root, or no cgroup v1 memory controller.")
            else:
                for pair in pairs:
                    raw["measurements"].append(decode(args, pair, "2G", scratch))
                    save()
    finally:
        save()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
