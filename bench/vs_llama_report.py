#!/usr/bin/python3
"""The side-by-side table of vs_llama_runs.py's raw JSON.

    vs_llama_report.py RAW.json --out OUT.md

One row per measurement: the medians of each engine's tok/s over the
repeats, the median of the paired ratios (colibri / llama.cpp of the same
repeat: the disk and the machine drift between repeats, less within one),
block-layer bytes read per generated token of each engine, and for colibri
bytes read in the decode window against the bytes of the experts it missed
(misses plus prefetched reads a request used, times the record size: what a
perfect prefetch would still have read).
"""

import argparse
import json
import os
import statistics
import sys



def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec="%.2f"):
    return spec % x if x is not None else "-"


def label(m):
    where = "in RAM" if not m["cap"] else "%s memory cap" % m["cap"].replace("G", " GiB")
    if m["kind"] == "prefill":
        return "pp%d, %s" % (m["n"], where)
    return "%s, %s, %s" % (where, m["pair"], "sampled" if m["sampled"] else "greedy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    raw = json.load(open(args.raw))
    rec = {}
    for p in raw["pairs"]:
        man = json.load(open(os.path.join(p["ctr"], "manifest.json")))
        rec[p["name"]] = max(l["record_bytes"] for l in man["experts"]["layers"])
    lines = ["# colibri and llama.cpp side by side\n",
             "`bench/vs_llama.sh` on %s: %d CPUs, %d threads each, %d generated tokens per decode run, "
             "%d repeat(s), engines alternating (llama.cpp, colibri), page cache dropped before every "
             "capped run. Ratios are medians of the per-repeat colibri / llama.cpp ratios.\n"
             % (raw["date"], raw["cpus"], raw["threads"], raw["tokens"], raw["repeat"]),
             "Host: %s; flags: %s (AMX, where listed, is never used). colibri: %s. llama.cpp built with: %s.\n"
             % (raw.get("cpu_model", "unknown"), raw.get("cpu_flags", "unknown"), raw.get("colibri_simd", "unknown"),
                raw.get("llama_flags", "unknown")),
             "Pairs (same bf16 values): " + "; ".join("%s = `%s` vs `%s`" % (
                 p["name"], os.path.basename(p["gguf"]), os.path.basename(p["ctr"])) for p in raw["pairs"]) + "\n",
             "".join("%s\n" % n for n in raw.get("notes", [])),
             "| config | llama.cpp tok/s | colibri tok/s | colibri / llama.cpp | llama.cpp MB read / token "
             "| colibri MB read / token | colibri bytes / missed-expert bytes | fio GB/s (colibri files, gguf) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in raw["measurements"]:
        by = {"llama.cpp": {}, "colibri": {}}
        for r in m["runs"]:
            by[r["engine"]][r["repeat"]] = r
        ratios, per_tok, per_missed = [], {"llama.cpp": [], "colibri": []}, []
        for rep, c in by["colibri"].items():
            l = by["llama.cpp"].get(rep)
            if l and l.get("tok_s") and c.get("tok_s"):
                ratios.append(c["tok_s"] / l["tok_s"])
        if m["kind"] == "decode":
            for e in by:
                for r in by[e].values():
                    if r.get("tokens"):
                        per_tok[e].append(r["read_bytes"] / r["tokens"] / 1e6)
            for r in by["colibri"].values():
                s = r.get("stats")
                if s:
                    needed = (s["expert_misses"] + s.get("prefetch_reads_used", 0)) * rec[m["pair"]]
                    per_missed.append(s["bytes_read"] / needed if needed else None)
        fio_s = ("%.2f, %.2f" % (m["fio_colibri"]["gbps"], m["fio_gguf"]["gbps"])) if "fio_colibri" in m else "-"
        errors = sum(1 for e in by for r in by[e].values() if "error" in r)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label(m) + (" (%d failed runs)" % errors if errors else ""),
            fmt(med([r.get("tok_s") for r in by["llama.cpp"].values()])),
            fmt(med([r.get("tok_s") for r in by["colibri"].values()])),
            fmt(med(ratios), "%.2fx"),
            fmt(med(per_tok["llama.cpp"]), "%.0f") if m["kind"] == "decode" else "-",
            fmt(med(per_tok["colibri"]), "%.0f") if m["kind"] == "decode" else "-",
            fmt(med(per_missed)) if m["kind"] == "decode" and m["cap"] else "-",
            fio_s))
    lines.append("")
    lines.append("Commands (one repeat of each):\n")
    seen = set()
    for m in raw["measurements"]:
        for r in m["runs"]:
            key = (label(m), r["engine"])
            if key in seen:
                continue
            seen.add(key)
            lines.append("- %s, %s: `%s`" % (label(m), r["engine"], " ".join(r["argv"])))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines[:7 + len(raw["measurements"])]) + "\n")


if __name__ == "__main__":
    main()
