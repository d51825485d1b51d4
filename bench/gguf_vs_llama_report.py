#!/usr/bin/python3
"""The tables of gguf_vs_llama_runs.py's raw JSON.

    gguf_vs_llama_report.py RAW.json --out OUT.md

Two tables. Agreement: per GGUF, the teacher-forced top-1 agreement of
llama.cpp and colibri on the same token sequence, with mean / max KL and
max |logit difference|. Speed: per GGUF and memory setting, the medians of
each engine's decode tok/s over the repeats, the median of the paired
ratios colibri / llama.cpp (the same repeat: the machine drifts between
repeats, less within one), block-layer MB read per generated token, and the
fio GB/s measured before the first pair (colibri's expert files, the GGUF).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_llama_report import fmt, med  # noqa: E402


def speed_row(m):
    by = {"llama.cpp": {}, "colibri": {}}
    for r in m["runs"]:
        by[r["engine"]][r["repeat"]] = r
    ratios = [c["tok_s"] / by["llama.cpp"][rep]["tok_s"] for rep, c in by["colibri"].items()
              if c.get("tok_s") and by["llama.cpp"].get(rep, {}).get("tok_s")]
    per_tok = {e: [r["read_bytes"] / r["tokens"] / 1e6 for r in by[e].values() if r.get("tokens")] for e in by}
    errors = sum(1 for e in by for r in by[e].values() if "error" in r)
    where = "in RAM" if not m["cap"] else "%s memory cap" % m["cap"].replace("G", " GiB")
    loads = [r.get("loadavg_before") for r in m["runs"] if r.get("loadavg_before") is not None]
    others = {e: [r.get("others_cpu_share") for r in by[e].values()] for e in by}
    return "| %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        m["pair"], where, " (%d failed runs)" % errors if errors else "",
        fmt(med([r.get("tok_s") for r in by["llama.cpp"].values()])),
        fmt(med([r.get("tok_s") for r in by["colibri"].values()])),
        fmt(med(ratios), "%.2fx"),
        fmt(med(per_tok["llama.cpp"]), "%.0f"), fmt(med(per_tok["colibri"]), "%.0f"),
        "%.2f, %.2f" % (m["fio_colibri"]["gbps"], m["fio_gguf"]["gbps"]) if "fio_colibri" in m else "-",
        fmt(max(loads) if loads else None, "%.1f"),
        "%s, %s" % (fmt(med(others["llama.cpp"]) and 100 * med(others["llama.cpp"]), "%.0f%%"),
                    fmt(med(others["colibri"]) and 100 * med(others["colibri"]), "%.0f%%")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.raw) as f:
        raw = json.load(f)
    lines = ["# colibri and llama.cpp on the same GGUF file\n",
             "`bench/gguf_vs_llama.sh` on %s: %d CPUs, %d threads each. Each GGUF is decoded by llama.cpp "
             "directly and by colibri from %s." % (
                 raw["date"], raw["cpus"], raw["threads"],
                 "a stand-in container converted from the HF directory (see below)" if raw.get("standin")
                 else "the container `colibri convert FILE.gguf` made of it (the same weight blocks)"),
             "".join("\n%s\n" % n for n in raw.get("notes", [])),
             "Files: " + "; ".join("%s = `%s` (%.2f GB) -> `%s`" % (
                 p["name"], os.path.basename(p["gguf"]), p["gguf_bytes"] / 1e9, os.path.basename(p["ctr"]))
                 for p in raw["pairs"]) + "\n"]
    if raw.get("agreement"):
        a0 = next((a for a in raw["agreement"] if "tokens" in a), {})
        lines += ["## Teacher-forced agreement\n",
                  "One sequence of %d token ids through `bench/llama_logits` (libllama, one batch, logits at "
                  "every position) and `colibri logits`: %s. Top-1: positions whose argmax is the same; KL is "
                  "KL(llama.cpp || colibri) of the softmaxes per position; top-2 margin: llama.cpp's best logit "
                  "less its second (a difference between the engines larger than it can swap the top-1); near "
                  "ties: disagreeing positions where that margin is under 0.01.\n" % (a0.get("n", 0), a0.get("tokens", "-")),
                  "| GGUF | top-1 agreement | mean KL | max KL | max \\|diff\\| | mean \\|diff\\| "
                  "| logit std (llama.cpp) | median top-2 margin (llama.cpp) | disagreeing near ties |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for a in raw["agreement"]:
            if "error" in a:
                lines.append("| %s | failed: %s | | | | | | | |" % (
                    a["pair"], a["error"].strip().splitlines()[-1][:200].replace("|", "\\|")))
                continue
            lines.append("| %s | %d / %d (%.1f%%) | %.3g | %.3g | %.3g | %.3g | %.3g | %.3g | %d |" % (
                a["pair"], a["top1_agree"], a["positions"], 100 * a["top1_agree_frac"], a["kl_mean"], a["kl_max"],
                a["max_abs_diff"], a["mean_abs_diff"], a["logit_std_llama"], a["llama_top2_margin_median"],
                a["disagree_near_tie"]))
        lines.append("")
    if raw.get("measurements"):
        lines += ["## Decode speed\n",
                  "Greedy, %d generated tokens a run, %d repeat(s) of llama.cpp then colibri, fio on both "
                  "engines' files before each pair. In RAM: files in the page cache, colibri `--no-direct`. "
                  "Under the 2 GiB cgroup: page cache dropped before every run, colibri `--ram 1536M`, "
                  "llama.cpp `--no-repack` (mmap). Ratio: median of the per-repeat colibri / llama.cpp. "
                  "Load: the highest 1-minute load average seen before a run (%d CPUs; above it the runs "
                  "shared the machine); others' CPU: the median share of the machine's CPU time during a run "
                  "that went to other processes (from /proc/stat, less the engine's own).\n" % (raw["tokens"], raw["repeat"], raw["cpus"]),
                  "| GGUF | memory | llama.cpp tok/s | colibri tok/s | colibri / llama.cpp "
                  "| llama.cpp MB read / token | colibri MB read / token | fio GB/s (colibri files, gguf) | load "
                  "| others' CPU (llama.cpp runs, colibri runs) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += [speed_row(m) for m in raw["measurements"]]
        lines.append("")
    lines.append("Commands:\n")
    for a in raw.get("agreement", []):
        for k in ("argv_llama", "argv_colibri"):
            if k in a:
                lines.append("- agreement, %s: `%s`" % (a["pair"], " ".join(a[k])))
    seen = set()
    for m in raw.get("measurements", []):
        for r in m["runs"]:
            key = (m["pair"], m["cap"], r["engine"])
            if key not in seen:
                seen.add(key)
                lines.append("- decode, %s, %s, %s: `%s`" % (m["pair"], m["cap"] or "in RAM", r["engine"],
                                                           " ".join(r["argv"])))
    errs = [(m["pair"], m["cap"], r) for m in raw.get("measurements", []) for r in m["runs"] if "error" in r]
    if errs:
        lines.append("\nFailed runs (last lines of their output):\n")
        for pair, cap, r in errs:
            tail = r["error"].strip().splitlines()[-3:]
            lines.append("- %s, %s, %s #%d (rc %s): %s" % (pair, cap or "in RAM", r["engine"], r["repeat"], r["rc"],
                                                           " / ".join(t.replace("|", "\\|") for t in tail)))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
