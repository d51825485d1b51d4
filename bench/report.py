#!/usr/bin/python3
"""Markdown tables from bench/decode_runs.py raw results.

    report.py RAW.json [RAW2.json ...] [--out FILE.md] [--raw-name NAME]

One section per raw file: the decode table (speed, hit rate, disk
throughput from the engine's statistics and from the process's own read
counters, each next to fio measured right before the run, as ratios), the
cross-checks (bytes by three independent counts, memory against the budget,
fio drift), and the exact commands. Column meanings: bench/README.md.
"""

import argparse
import json
import os
import sys

from bench_lib import median

TARGET = 0.85   # cold decode should keep the disk this busy, relative to fio
DRIFT = 0.25    # fio after vs before: beyond this the disk drifted during the run
BUSY_CPU = 0.25  # other processes' share of the CPU beyond which a run is contended
BUSY_IO = 0.10   # other processes' disk bytes in the decode window, relative to ours


def gb(x):
    return "%.2f" % (x / 1e9) if x is not None else "–"


def pct(x):
    return "%.0f%%" % (100 * x) if x is not None else "–"


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt_ratio(x):
    return "%.2f" % x if x is not None else "–"


def run_name(r, repeats):
    return r["name"] + (" #%d" % r.get("repeat", 1) if repeats else "")


def run_numbers(r, meta):
    """The derived numbers of one run (None where unknown)."""
    s = r.get("stats") or {}
    fio = r["fio"][0]["gbps"] if r.get("fio") else None
    w = r.get("decode_window") or {}
    n = {"fio": fio, "tok_s": s.get("decode_tok_s"), "hit": s.get("hit_rate"),
         "bytes": s.get("bytes_read")}
    n["busy_gbps"] = (s["bytes_read"] / s["disk_busy_s"] / 1e9
                      if s.get("disk_busy_s") else None)
    n["wall_gbps"] = s["bytes_read"] / s["wall_s"] / 1e9 if s.get("wall_s") else None
    n["busy_share"] = s["disk_busy_s"] / s["wall_s"] if s.get("wall_s") else None
    if w and w.get("seconds"):
        n["win_gbps"] = w["process_read_bytes"] / w["seconds"] / 1e9
        n["win_dev_busy"] = w["device_busy_s"] / w["seconds"]
        n["win_tok_s"] = w["steps"] / w["seconds"]
    else:
        n["win_gbps"] = n["win_dev_busy"] = n["win_tok_s"] = None
    n["cache_bytes"] = s.get("cache_bytes") or (s["frames"] * s["frame_bytes"] if s.get("frames") else None)
    # Other processes on the machine during the run: CPU share, and disk
    # bytes (reads not ours, plus writes) in the decode window.
    n["others_cpu"] = r.get("others_cpu_share")
    n["others_io"] = (max(0, w["device_read_bytes"] - w["process_read_bytes"]) + w["device_write_bytes"]
                      if w else None)
    n["contended"] = ((n["others_cpu"] or 0) > BUSY_CPU or
                      (n["others_io"] is not None and w.get("process_read_bytes") and
                       n["others_io"] > BUSY_IO * max(w["process_read_bytes"], 1)) or
                      (n["others_io"] is not None and not w.get("process_read_bytes") and
                       n["others_io"] > 100e6))
    # The start-up's pinned-set load; colibri reports it apart from
    # bytes_read (the run's window) since the statistics got a window.
    n["pin_preload"] = s.get("startup_pin_bytes", (s.get("pinned_experts") or 0) * meta["record_bytes"])
    return n


def section(raw, raw_name):
    meta, runs = raw["meta"], raw["runs"]
    st = meta["store"]
    mc = meta["machine"]
    out = []
    q = meta.get("quant") or {}
    out.append("## %s, %s experts — %s\n" % (meta["label"], q.get("experts", "?"), meta["date"][:10]))
    out.append("- Date: %s. Machine: %s, %d cores, %.1f GiB RAM, kernel %s; disk `%s`."
               % (meta["date"], mc.get("cpu", "?"), mc.get("cores", 0),
                  mc.get("ram_bytes", 0) / 2 ** 30, mc.get("kernel", "?"), meta["device"]))
    out.append("- Store measured: commit %s%s; last commit touching storage/: %s; "
               "storage/expert_store.c: \"%s\"."
               % (st["commit"], " with uncommitted changes in storage/" if st["storage_dirty"] else
                  (" (storage/ clean" + (", engine/compute uncommitted changes)" if st["engine_dirty"]
                                         else ")")),
                  st["storage_last_commit"], st["expert_store_c"]))
    out.append("- Model: `%s` (%s), %d layers x %d experts, top-%d; expert record %d bytes "
               "(%.3f MiB); experts %.2f GB, resident %.2f GB, container %.2f GB on disk."
               % (meta["model_dir"], meta["model_type"], meta["n_layers"], meta["n_experts"],
                  meta["top_k"], meta["record_bytes"], meta["record_bytes"] / 2 ** 20,
                  meta["expert_bytes"] / 1e9, meta["resident_bytes"] / 1e9,
                  meta["container_bytes"] / 1e9))
    out.append("- Each run: prompt = 1 token (%d), %d tokens generated greedily, `--io-depth %d`; "
               "fio before each run: %d s at the record size, depth %d and %d."
               % (meta["prompt"], meta["tokens"], meta["io_depth"], meta["fio_seconds"],
                  meta["io_depth"], meta["top_k"]))
    out.append("- Command: `%s`; raw results: `%s`.\n" % (meta["command"], raw_name))

    sweep = meta.get("fio_sweep") or []
    if sweep:
        out.append("Reference: fio random reads of whole expert records (%d bytes) over the expert "
                   "files, O_DIRECT, io_uring, %d s per depth, at the start:\n"
                   % (meta["record_bytes"], meta["fio_seconds"]))
        out.append("| io depth | " + " | ".join(str(f["iodepth"]) for f in sweep) + " |")
        out.append("| --- |" + " ---: |" * len(sweep))
        out.append("| GB/s | " + " | ".join("%.2f" % f["gbps"] for f in sweep) + " |")
        out.append("| mean latency, ms | " + " | ".join("%.1f" % f["lat_ms_mean"] for f in sweep) + " |")
        out.append("")
    out.append("| run | expert cache | tok/s | hit rate | GB read | stats GB/s busy | "
               "stats GB/s wall | fio GB/s | busy / fio | wall / fio | decode GB/s (process) | "
               "decode / fio | disk busy in decode | others: CPU, disk GB |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    repeats = any(r.get("repeat", 1) > 1 for r in runs)
    for r in runs:
        n = run_numbers(r, meta)
        if r["exit"] != 0:
            out.append("| %s | failed (exit %d) | | | | | | %.2f | | | | | | |"
                       % (r["name"], r["exit"], n["fio"] or 0))
            continue
        cache = ("%s GB (%s)" % (gb(n["cache_bytes"]), pct(n["cache_bytes"] / meta["expert_bytes"]))
                 if n["cache_bytes"] else "–")
        win_ratio = ratio(n["win_gbps"], n["fio"])
        mark = ""
        if r["mode"] == "cold" and win_ratio is not None:
            mark = " ✓" if win_ratio >= TARGET else ""
        drift = ""
        if r.get("fio_after") and n["fio"] and abs(r["fio_after"]["gbps"] / n["fio"] - 1) > DRIFT:
            drift = " †"
        name = run_name(r, repeats)
        others = "%s, %s%s" % (pct(n["others_cpu"]), gb(n["others_io"]), " ‡" if n["contended"] else "")
        out.append("| %s | %s | %.2f | %s | %s | %.2f | %.2f | %.2f%s | %s | %s | %s | %s%s | %s | %s |"
                   % (name, cache, n["tok_s"], pct(n["hit"]), gb(n["bytes"]),
                      n["busy_gbps"] or 0, n["wall_gbps"] or 0, n["fio"], drift,
                      fmt_ratio(ratio(n["busy_gbps"], n["fio"])),
                      fmt_ratio(ratio(n["wall_gbps"], n["fio"])),
                      "%.2f" % n["win_gbps"] if n["win_gbps"] is not None else "–",
                      fmt_ratio(win_ratio), mark, pct(n["win_dev_busy"]), others))
    out.append("")
    out.append("✓: a cold run whose decode kept the disk at least %.0f%% as busy as fio "
               "(decode / fio). †: fio after the run differs by more than %.0f%% from fio "
               "before it (the disk drifted; the ratios are uncertain). ‡: other processes "
               "used more than %.0f%% of the CPU, or moved more than %.0f%% as many disk bytes "
               "as the engine during its decode (tok/s and ratios are then unreliable). See "
               "bench/README.md for each column.\n" % (100 * TARGET, 100 * DRIFT, 100 * BUSY_CPU,
                                                         100 * BUSY_IO))
    if repeats:
        out.append("Medians over the %d repeats, of the runs without ‡ when there are any "
                   "(n: how many runs):\n" % max(r.get("repeat", 1) for r in runs))
        out.append("| run | n | tok/s | hit rate | busy / fio | wall / fio | decode / fio "
                   "| decode / fio, all runs (min-max) |")
        out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        names = []
        for r in runs:
            if r["name"] not in names:
                names.append(r["name"])
        for name in names:
            ns = [run_numbers(r, meta) for r in runs if r["name"] == name and r["exit"] == 0]
            if not ns:
                continue
            every = sorted(x for x in (ratio(n["win_gbps"], n["fio"]) for n in ns) if x is not None)
            clean = [n for n in ns if not n["contended"]]
            tag = "" if clean else " (all ‡)"
            ns = clean or ns

            def med(f):
                return median(f(n) for n in ns)
            all_med = median(every)
            out.append("| %s%s | %d | %.2f | %s | %s | %s | %s | %s (%s-%s) |"
                       % (name, tag, len(ns), med(lambda n: n["tok_s"]), pct(med(lambda n: n["hit"])),
                          fmt_ratio(med(lambda n: ratio(n["busy_gbps"], n["fio"]))),
                          fmt_ratio(med(lambda n: ratio(n["wall_gbps"], n["fio"]))),
                          fmt_ratio(med(lambda n: ratio(n["win_gbps"], n["fio"]))),
                          fmt_ratio(all_med), fmt_ratio(every[0] if every else None),
                          fmt_ratio(every[-1] if every else None)))
        out.append("")

    out.append("Cross-checks:\n")
    out.append("| run | engine bytes_read | process read bytes (whole run) | device read bytes "
               "(whole run) | pin preload (start-up) | peak RSS / --ram | cgroup peak / limit | "
               "fio depth %d | fio after | others' CPU | engine CPU s |" % meta["top_k"])
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        s = r.get("stats") or {}
        n = run_numbers(r, meta)
        rss = s.get("peak_rss_bytes")
        budget = s.get("ram_budget_bytes")
        mem = ("%s / %s GB" % (gb(rss), gb(budget)) if rss and budget else
               ("%s GB / min" % gb(rss) if rss else "–"))
        cg = ("%s / %s GB, %d failures" % (gb(r["memcg_max_usage_in_bytes"]),
                                          gb(r["memcg_limit_in_bytes"]), r["memcg_failcnt"])
              if r.get("memcg_limit_in_bytes") else "–")
        fio2 = "%.2f" % r["fio"][1]["gbps"] if len(r.get("fio", [])) > 1 else "–"
        out.append("| %s | %s GB | %s GB | %s GB | %s GB | %s | %s | %s | %.2f | %s | %.1f |"
                   % (run_name(r, repeats), gb(s.get("bytes_read")), gb(r.get("process_read_bytes")),
                      gb(r["device"]["read_bytes"]), gb(n["pin_preload"]), mem, cg, fio2,
                      r["fio_after"]["gbps"], pct(r.get("others_cpu_share")),
                      r.get("engine_cpu_s", 0)))
    out.append("")
    toks = {r["tokens_out"] for r in runs if r["exit"] == 0}
    out.append("Generated tokens identical in all %d runs: %s.\n"
               % (sum(1 for r in runs if r["exit"] == 0),
                  "yes" if len(toks) == 1 else "NO (%d different outputs)" % len(toks)))
    out.append("<details><summary>Commands</summary>\n")
    first = next((r for r in runs if r.get("fio")), None)
    if first:
        out.append("fio, before each run at `--iodepth=%d` and `%d`, and after it at %d "
                   "(the reference sweep varies `--iodepth` only):\n"
                   % (meta["io_depth"], meta["top_k"], meta["io_depth"]))
        out.append("```\n%s\n```\n" % first["fio"][0]["cmd"])
    out.append("Each run (`cold`: caches dropped and the learned usage removed first):\n")
    out.append("```")
    for r in runs:
        prep = ""
        if r["mode"] == "cold" and r.get("caches_dropped"):
            prep = "rm -f %s/usage.json; sync; echo 3 > /proc/sys/vm/drop_caches; " % meta["model_dir"]
        if r.get("cgroup_limit_bytes"):
            prep += "[in memory cgroup colibri-bench, limit %d] " % r["cgroup_limit_bytes"]
        out.append("# %s (%s)\n%s%s" % (run_name(r, repeats), r["started"], prep, r["cmd"]))
    out.append("```")
    out.append("</details>\n")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", nargs="+")
    ap.add_argument("--out", help="write the markdown here (default: stdout)")
    ap.add_argument("--title", default="colibri decode benchmark")
    args = ap.parse_args(argv)
    parts = ["# %s\n" % args.title]
    for path in args.raw:
        with open(path) as f:
            raw = json.load(f)
        name = os.path.basename(path)
        parts.append(section(raw, name))
    text = "\n".join(parts)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
