#!/usr/bin/python3
"""bench/mirror.sh's runs folder -> markdown tables and one raw JSON.

    mirror_report.py RUNS_DIR --json OUT.json --out OUT.md
"""

import glob
import os
import re

from bench_lib import median, read_json, report_args, sampled_runs, write_report


def fio_bw(path):
    return sum(job["read"]["bw_bytes"] for job in read_json(path)["jobs"]) / 1e6


def load(runs_dir):
    info = read_json(os.path.join(runs_dir, "info.json"))
    fio = {}
    for p in sorted(glob.glob(os.path.join(runs_dir, "fio-*.json"))):
        m = re.match(r"fio-(\d+)-(\d+)-(A|B|AB)\.json$", os.path.basename(p))
        if m:
            fio.setdefault("%s:%s" % (m.group(1), m.group(2)), {})[m.group(3)] = fio_bw(p)
    runs = []
    for r, (kind, ta, tb, budget, rep) in sampled_runs(
            runs_dir, "*-r*.json", r"(mirror-eq|mirror-prof|single)-(\d+)-?(\d+)?-(\w+)-r(\d+)$"):
        st, dec = r["stats"] or {}, r["decode"] or {}
        da, db = info["dev_a"], info["dev_b"]
        secs = dec.get("seconds") or 0
        a_bytes = dec.get("dev", {}).get(da, {}).get("read_bytes", 0)
        b_bytes = dec.get("dev", {}).get(db, {}).get("read_bytes", 0)
        copies = st.get("copies", [])
        ua = info.get("under_a")
        under = dec.get("dev", {}).get(ua, {}).get("read_bytes") if ua else None
        runs.append({
            "label": r["label"], "kind": kind, "throttle_a": int(ta),
            "throttle_b": int(tb) if tb else None, "budget": budget, "repeat": int(rep),
            "rc": r["rc"], "argv": r["argv"], "output": r["output"],
            "tok_s": st.get("decode_tok_s"), "hit_rate": st.get("hit_rate"),
            "frames": st.get("frames"), "frame_bytes": st.get("frame_bytes"),
            "bytes_read": st.get("bytes_read"), "wall_s": st.get("wall_s"),
            "disk_busy_s": st.get("disk_busy_s"), "disk_gbps": st.get("disk_gbps"),
            "disk_wait_s": st.get("disk_wait_s"),
            "copy_bytes": [c["bytes_read"] for c in copies],
            "copy_weight": [c["weight"] for c in copies],
            "decode_s": secs, "decode_steps": dec.get("tokens"),
            "decode_dev_a_bytes": a_bytes, "decode_dev_b_bytes": b_bytes,
            "decode_dev_a_busy_s": dec.get("dev", {}).get(da, {}).get("busy_s"),
            "decode_dev_b_busy_s": dec.get("dev", {}).get(db, {}).get("busy_s"),
            "decode_mbps": (a_bytes + b_bytes) / secs / 1e6 if secs else None,
            "decode_a_mbps": a_bytes / secs / 1e6 if secs else None,
            "decode_b_mbps": b_bytes / secs / 1e6 if secs else None,
            "stats_wall_mbps": st["bytes_read"] / st["wall_s"] / 1e6 if st.get("wall_s") else None,
            "cgroup_read_bytes": r["cgroup_read_bytes"],
            # Reads of the disk under A's image by anything else than A.
            "decode_others_mbps": (under - a_bytes) / secs / 1e6 if secs and under is not None else None,
        })
    return info, fio, runs


def f(x, fmt="%.0f"):
    return "-" if x is None else fmt % x


def iobench_gbps(path):
    j = read_json(path)
    return j["devices"][0]["points"][0]["gbps"] * 1e3, j["devices"][0]["key"]


def report(info, fio, runs, runs_dir):
    L = []
    w = L.append
    w("# colibri mirrors: expert reads striped over two throttled disks")
    w("")
    w("- date: %s; colibri %s (`git rev-parse --short HEAD`)" % (info["date"], info["colibri_rev"]))
    w("- host: %s, %d CPUs; %s" % (info["host"], info["cpus"], info["fio"]))
    w("- model: `%s`, experts %.2f GB in records of %d bytes" % (
        info["container"], info["expert_bytes"] / 1e9, info["record_bytes"]))
    for line in info["provenance"].strip().splitlines():
        w("  - %s" % line)
    w("- disk A: %s" % info["disk_a"])
    w("- disk B: %s" % info["disk_b"])
    w("- read throttles: cgroup v1 `%s/blkio.throttle.read_bps_device` (\"MAJ:MIN BYTES/s\"); fio, "
      "colibri iobench and colibri run inside the group; MB = 1e6 bytes" % info["cgroup"])
    w("- mirror: `%s` (%.1f s for the copy and its read-back verification)" % (
        info["mirror_cmd"], info["mirror_add_s"]))
    w("- one-copy runs: `colibri mirror --model A/model --to B/model --remove`, re-added with the "
      "command above")
    w("- `%s`" % info["env"])
    w("")
    w("Commands:")
    w("")
    w("    " + info["fio_cmd"])
    w("    (A+B at once: the same options with two jobs, --name=A --filename=<A files> --name=B "
      "--filename=<B files>)")
    for c in info.get("iobench_cmds", []):
        w("    COLIBRI_CACHE_DIR=<pair's profiles> " + c)
    w("    sync; echo 3 > /proc/sys/vm/drop_caches; rm -f A/model/usage.json")
    ex = next((r for r in runs if r["kind"] == "mirror-prof"), runs[0] if runs else None)
    if ex:
        w("    " + " ".join(ex["argv"]))
    w("")
    w("`mirror-eq` runs with `COLIBRI_CACHE_DIR` pointing to an empty folder (no disk profile: "
      "equal stripe weights); `mirror-prof` with the pair's profiles written by `colibri iobench` "
      "above (weights by measured bandwidth, as `colibri run` does after `colibri iobench` or "
      "`colibri plan --probe`).")
    w("")
    w("## Reference: fio and colibri iobench at each pair of throttles")
    w("")
    w("Random reads of whole expert records (%d bytes), O_DIRECT, io_uring, depth %s." % (
        info["record_bytes"], re.search(r"--iodepth=(\d+)", info["fio_cmd"]).group(1)))
    w("")
    w("| throttles A / B MB/s | fio A alone | fio B alone | sum of alone | fio A+B at once | "
      "iobench A | iobench B | profiled weight of A |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, v in fio.items():
        a, b, ab = v.get("A"), v.get("B"), v.get("AB")
        tag = k.replace(":", "-")
        try:
            ia, _ = iobench_gbps(os.path.join(runs_dir, "iobench-%s-A.json" % tag))
            ib, _ = iobench_gbps(os.path.join(runs_dir, "iobench-%s-B.json" % tag))
        except (OSError, KeyError, IndexError, ValueError):
            ia = ib = None
        w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k.replace(":", " / "), f(a), f(b), f(a + b if a and b else None), f(ab), f(ia), f(ib),
            f(ia / (ia + ib) if ia and ib else None, "%.2f")))
    w("")
    w("## Decode runs")
    w("")
    w("Cold: page cache dropped, no usage.json, `--no-pin`. *decode MB/s* = bytes the two loop "
      "devices read between the first and the last token (`/sys/class/block/loopN/stat`) / that "
      "time; *A share* = copy 0's part of the bytes the engine read (stats `copies[].bytes_read`); "
      "*stats busy* = stats `disk_gbps` (bytes / time with one of the engine's reads in flight); "
      "*others* = what the real disk under A's image read meanwhile beyond A (other processes "
      "competing with disk A).")
    w("")
    w("| run | throttle A / B | --ram | frames | tok/s | decode MB/s | A MB/s | B MB/s | weights A, B | "
      "A share | stats busy MB/s | others MB/s | waited / wall s |")
    w("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |")
    for r in runs:
        ram = r["argv"][r["argv"].index("--ram") + 1]
        cb = r["copy_bytes"]
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["label"],
            "%d / %d" % (r["throttle_a"], r["throttle_b"]) if r["kind"] != "single"
            else "%d / -" % r["throttle_a"], ram, f(r["frames"], "%d"), f(r["tok_s"], "%.2f"),
            f(r["decode_mbps"]), f(r["decode_a_mbps"]), f(r["decode_b_mbps"]),
            ", ".join("%.2f" % x for x in r["copy_weight"]),
            f(cb[0] / sum(cb) if len(cb) > 1 and sum(cb) else None, "%.2f"),
            f(r["disk_gbps"] * 1e3 if r["disk_gbps"] else None), f(r.get("decode_others_mbps")),
            "%.1f / %.1f" % (r["disk_wait_s"] or 0, r["wall_s"] or 0)))
    w("")
    w("## Ratios (medians over repeats)")
    w("")
    w("| --ram | pair A + B | weights | mirror decode MB/s | reference | reference MB/s | ratio | target | "
      "tok/s ratio |")
    w("| --- | --- | --- | ---: | --- | ---: | ---: | --- | ---: |")
    ratios = []
    budgets = sorted({r["budget"] for r in runs}, key=lambda b: (b != "min", b))
    for b in budgets:

        def single(rate):
            s = [r for r in runs if r["kind"] == "single" and r["budget"] == b and r["throttle_a"] == rate]
            return median(x["decode_mbps"] for x in s), median(x["tok_s"] for x in s)
        for k, v in fio.items():
            ta, tb = (int(x) for x in k.split(":"))
            for kind, wname in (("mirror-eq", "equal"), ("mirror-prof", "profiled")):
                mir = [r for r in runs if r["kind"] == kind and r["budget"] == b and
                       r["throttle_a"] == ta and r["throttle_b"] == tb]
                if not mir:
                    continue
                m_mbps, m_tok = median(x["decode_mbps"] for x in mir), median(x["tok_s"] for x in mir)
                sa, sa_tok = single(ta)
                sb, sb_tok = single(tb)
                rows = []
                if ta == tb:
                    rows.append(("one copy at %d (colibri)" % ta, sa, ">= 1.7", sa_tok))
                else:
                    fsum = (v.get("A") or 0) + (v.get("B") or 0)
                    rows.append(("fio A + fio B, each alone", fsum, ">= 0.85", None))
                    rows.append(("colibri one copy at %d + one at %d" % (ta, tb),
                                 (sa or 0) + (sb or 0), ">= 0.85", None))
                    hi, hi_tok = (sa, sa_tok) if ta > tb else (sb, sb_tok)
                    rows.append(("one copy at %d (the faster disk alone)" % max(ta, tb), hi, "", hi_tok))
                for ref, refv, target, ref_tok in rows:
                    ratio = m_mbps / refv if m_mbps and refv else None
                    tokr = m_tok / ref_tok if m_tok and ref_tok else None
                    ok = ""
                    if ratio is not None and target:
                        ok = " ✓" if ratio >= float(target[3:]) else " ✗"
                    w("| %s | %d + %d | %s | %s | %s | %s | %s%s | %s | %s |" % (
                        b, ta, tb, wname, f(m_mbps), ref, f(refv), f(ratio, "%.2f"), ok, target or "-",
                        f(tokr, "%.2f")))
                    ratios.append({"budget": b, "pair": k, "weights": wname, "mirror_mbps": m_mbps,
                                   "reference": ref, "reference_mbps": refv, "ratio": ratio,
                                   "target": target, "tok_s_ratio": tokr})
    outs = {tuple(r["output"].split(",")) for r in runs if r["rc"] == 0}
    w("")
    w("Failed runs: %d. Generated tokens identical in every run: %s." % (
        sum(r["rc"] != 0 for r in runs), "yes" if len(outs) == 1 else "NO (%d variants)" % len(outs)))
    return "\n".join(L) + "\n", ratios


def main():
    a = report_args()
    info, fio, runs = load(a.runs)
    md, ratios = report(info, fio, runs, a.runs)
    write_report(a, md, {"info": info, "fio_mbps": fio, "runs": runs, "ratios": ratios})


if __name__ == "__main__":
    main()
