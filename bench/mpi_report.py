#!/usr/bin/python3
"""bench/mpi.sh's runs folder to bench/results/mpi-<date>.md and its raw .json.

    mpi_report.py RUNS_DIR --json OUT.json --out OUT.md

RUNS_DIR holds setup.json (mpi.sh), fio-rankR.json and run-NN.json
(mpi_runs.py). The report gives the setup, every run in the order it ran,
tok/s at each rank count with the ratios to one rank taken within the same
repeat (the rank counts alternate, so a ratio compares neighbouring runs),
and the split of each rank's time between disk, compute and network from
rank 0's --stats-json ("ranks" and "dist"). Fields the stats do not have
are listed as missing, not guessed.
"""

import glob
import os

from bench_lib import median, read_json, report_args, write_report

TOP_FIELDS = ["decode_tok_s", "bytes_read", "disk_wait_s", "wall_s", "compute_s"]
RANK_FIELDS = ["rank", "host", "experts", "experts_served", "bytes_read", "disk_wait_s",
               "compute_s", "net_s"]
DIST_FIELDS = ["ranks", "placement", "net_s", "net_bytes"]
TARGET = 1.7


def num(v, fmt="%.2f"):
    return fmt % v if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"


def gb(v):
    return num(v / 1e9 if isinstance(v, (int, float)) else None)


def fio_bps(path):
    try:
        j = read_json(path)
        return sum(job["read"]["bw_bytes"] for job in j["jobs"])
    except (OSError, ValueError, KeyError):
        return None


def missing_fields(run):
    """The fields of the brief's stats contract that this run's stats lack."""
    s = run["stats"]
    if s is None:
        return ["--stats-json (no file)"]
    miss = ["%s" % k for k in TOP_FIELDS if k not in s]
    ranks = s.get("ranks")
    if not isinstance(ranks, list):
        miss.append("ranks")
    else:
        if len(ranks) != run["ranks"]:
            miss.append("ranks (%d entries for %d ranks)" % (len(ranks), run["ranks"]))
        for r in ranks:
            miss += ["ranks[].%s" % k for k in RANK_FIELDS if k not in r]
    dist = s.get("dist")
    if not isinstance(dist, dict):
        miss.append("dist")
    else:
        miss += ["dist.%s" % k for k in DIST_FIELDS if k not in dist]
    return sorted(set(miss), key=miss.index)


def main():
    args = report_args(__doc__.split("\n")[0])
    setup = read_json(os.path.join(args.runs, "setup.json"))
    runs = [read_json(p) for p in sorted(glob.glob(os.path.join(args.runs, "run-[0-9]*.json")))
            if not p.endswith(".stats.json")]
    for r in setup["ranks"]:
        r["fio_bps"] = fio_bps(r["fio"])
    counts = sorted({r["ranks"] for r in runs})

    def tok_s(run):
        s = run["stats"]
        return s.get("decode_tok_s") if s and run["rc"] == 0 else None

    # Ratios within each repeat: n ranks / 1 rank of the same repeat.
    repeats = sorted({r["repeat"] for r in runs})
    by = {(r["repeat"], r["ranks"]): r for r in runs}
    scaling = []
    for rep in repeats:
        row = {"repeat": rep}
        base = tok_s(by[(rep, 1)]) if (rep, 1) in by else None
        for n in counts:
            t = tok_s(by[(rep, n)]) if (rep, n) in by else None
            row["tok_s_%d" % n] = t
            row["ratio_%d" % n] = t / base if t is not None and base else None
        scaling.append(row)
    med = {"repeat": "median"}
    for n in counts:
        med["tok_s_%d" % n] = median(row["tok_s_%d" % n] for row in scaling)
        med["ratio_%d" % n] = median(row["ratio_%d" % n] for row in scaling)

    # Greedy output at every rank count against the first one-rank run.
    ref = next((r["output"] for r in runs if r["ranks"] == 1 and r["rc"] == 0), None)

    w = []
    p = w.append
    layers = setup["layers"]
    p("# colibri MPI benchmark: the OLMoE-1B-7B shape over %s ranks\n" %
      ", ".join(str(n) for n in counts))
    p("- Date: %s. Machine: %s, %d CPUs, %.1f GiB RAM. %s." %
      (setup["date"], setup["host"], setup["cpus"], setup["mem_total_kb"] / 2**20, setup["mpirun"]))
    p("- colibri: `%s`, revision %s." % (setup["colibri"], setup["colibri_rev"]))
    p("- Model: `%s`, %s layers, int4 experts; expert record %d bytes, %.2f GB of experts. "
      "Provenance: %s" % (setup["container"], "all (16)" if layers == "all" else layers,
                          setup["record_bytes"], setup["expert_bytes"] / 1e9,
                          "; ".join(l for l in setup["provenance"].splitlines() if l)))
    p("- Each rank: memory cap %s (cgroup v1 `memory.limit_in_bytes`), `--ram %s`, "
      "`--threads %d`, `--io-depth %d`, its own disk: an ext4 image on local %s attached with "
      "`losetup --direct-io=on`, holding the rank's own copy of the container, reads throttled to "
      "%d MB/s (cgroup v1 `blkio.throttle.read_bps_device` of that loop device, in the rank's own "
      "blkio group). Page cache dropped and `usage.json` removed before every run." %
      (setup["mem_limit"], setup["ram"], setup["threads"], setup["io_depth"], setup["image_fs"],
       setup["read_mbps"]))
    p("- Transport: %s." % ("`--mca btl %s`" % setup["btl"] if setup["btl"] else
                            "Open MPI's default, shared memory (vader) between these same-host "
                            "ranks: the network term is a memory copy, no TCP"))
    if setup["cpus"] < max(counts):
        p("- CPUs: %d cores for up to %d ranks of one thread each (plus mpirun): at %d ranks "
          "the ranks compete for the cores, so compute and network times there include waiting "
          "for a core." % (setup["cpus"], max(counts), max(counts)))
    if not setup.get("placement_passed", True):
        p("- `--placement %s` was not passed: this binary's `colibri run --help` does not list "
          "it." % setup["placement"])
    p("- Run order: %s, alternating rank counts; ratios are taken within one repeat." %
      ", ".join("%d" % r["ranks"] for r in runs))
    p("- Settings: `%s bench/mpi.sh`." % setup["env"])
    p("")
    p("Disks (fio random reads of whole records over the rank's expert files, O_DIRECT, "
      "io_uring, depth %d, inside the rank's blkio group, page cache dropped):\n" % setup["io_depth"])
    p("| rank | device | image | throttle MB/s | fio MB/s |")
    p("| ---: | --- | --- | ---: | ---: |")
    for r in setup["ranks"]:
        p("| %d | %s (%s) | `%s` | %d | %s |" %
          (r["rank"], r["dev"], r["majmin"], r["image"], setup["read_mbps"],
           num(r["fio_bps"] / 1e6 if r["fio_bps"] else None, "%.0f")))
    p("\n`%s`\n" % setup["fio_cmd"])
    p("Commands (one per rank count, as run the first time):\n")
    seen = set()
    for r in runs:
        if r["ranks"] in seen:
            continue
        seen.add(r["ranks"])
        p("    %s\n" % " ".join("'%s'" % a if (" " in a or "$" in a) else a for a in r["argv"]))

    p("## tok/s\n")
    head = "| repeat |" + "".join(" %d rank%s tok/s |" % (n, "s" if n > 1 else "") for n in counts) + \
        "".join(" %d / 1 |" % n for n in counts if n > 1)
    p(head)
    p("| --- |" + " ---: |" * (len(counts) + len([n for n in counts if n > 1])))
    for row in scaling + [med]:
        p("| %s |" % row["repeat"] + "".join(" %s |" % num(row["tok_s_%d" % n]) for n in counts) +
          "".join(" %s |" % num(row["ratio_%d" % n]) for n in counts if n > 1))
    p("")
    if 2 in counts and 1 in counts:
        r2 = med["ratio_2"]
        p("Target: 2 ranks >= %.1fx one rank when disk-bound: %s (median %s; per repeat %s).\n" %
          (TARGET, "met" if r2 is not None and r2 >= TARGET else "not met" if r2 is not None
           else "no ratio (runs failed)", num(r2),
           ", ".join(num(row["ratio_2"]) for row in scaling)))

    p("## Runs\n")
    p("| # | ranks | repeat | rc | tok/s | stats wall s | process s | GB read (blkio, all ranks) "
      "| rank 0 hit rate | dist net s | dist net MB | output = 1 rank's |")
    p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for i, r in enumerate(runs, 1):
        s = r["stats"] or {}
        d = s.get("dist") if isinstance(s.get("dist"), dict) else {}
        same = "–" if ref is None or r["rc"] != 0 else "yes" if r["output"] == ref else "**no**"
        p("| %d | %d | %d | %s%s | %s | %s | %s | %s | %s | %s | %s | %s |" %
          (i, r["ranks"], r["repeat"], r["rc"], " (timeout)" if r["timed_out"] else "",
           num(tok_s(r)), num(s.get("wall_s")), num(r["wall_s"]),
           gb(sum(g["blkio_read_bytes"] for g in r["cgroups"])),
           num(s.get("hit_rate") * 100 if isinstance(s.get("hit_rate"), (int, float)) else None,
               "%.0f%%"),
           num(d.get("net_s")), num(d.get("net_bytes") / 1e6
                                    if isinstance(d.get("net_bytes"), (int, float)) else None, "%.1f"),
           same))
    p("")

    p("## Split per rank (rank 0's --stats-json `ranks`, and each rank's cgroups)\n")
    p("disk, compute, serve, net: seconds, and % of rank 0's stats `wall_s` (serve: a serving rank's time computing its experts for rank 0, which its stats keep apart from `compute_s`). GB read (stats): the "
      "rank's store; GB read (blkio): what the block layer read from the rank's own disk in the "
      "rank's group, its container's resident part included. GB / disk s: stats bytes / "
      "disk-wait seconds, in MB/s (time the rank waited on reads, not the disk's busy time: with "
      "prefetch overlapping compute it exceeds the throttle). cgroup peak: memory.max_usage_in_bytes, page cache included (it reaches the cap "
      "when reclaim keeps the group under it).\n")
    notes = sorted({r["blkio_note"] for r in runs if r.get("blkio_note")})
    for n in notes:
        p("GB read (blkio) of these runs: %s.\n" % n)
    p("| run | rank | experts | served | GB read (stats) | disk s | compute s | serve s | net s "
      "| GB / disk s | GB read (blkio) | peak RSS MiB | cgroup peak / cap MiB | OOM kills |")
    p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(runs, 1):
        s = r["stats"] or {}
        wall = s.get("wall_s")
        ranks = s.get("ranks") if isinstance(s.get("ranks"), list) else []
        by_rank = {x.get("rank"): x for x in ranks}

        def part(v):
            if not isinstance(v, (int, float)):
                return "–"
            return "%.2f (%.0f%%)" % (v, 100 * v / wall) if isinstance(wall, (int, float)) and wall \
                else "%.2f" % v

        for g in r["cgroups"]:
            x = by_rank.get(g["rank"], {})
            if not x and g["rank"] == 0 and r["ranks"] == 1 and not ranks:
                # One rank without a "ranks" list: the top-level fields are rank 0's.
                x = {"bytes_read": s.get("bytes_read"), "disk_wait_s": s.get("disk_wait_s"),
                     "compute_s": s.get("compute_s")}
            bps = x.get("bytes_read") / x["disk_wait_s"] / 1e6 \
                if isinstance(x.get("bytes_read"), (int, float)) and \
                isinstance(x.get("disk_wait_s"), (int, float)) and x["disk_wait_s"] > 0 else None
            rss = x.get("peak_rss_bytes", s.get("peak_rss_bytes") if g["rank"] == 0 else None)
            p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f / %.0f | %s |" %
              ("%d (%d ranks, #%d)" % (i, r["ranks"], r["repeat"]), g["rank"],
               x.get("experts", "–"), x.get("experts_served", "–"), gb(x.get("bytes_read")),
               part(x.get("disk_wait_s")), part(x.get("compute_s")), part(x.get("serve_s")),
               part(x.get("net_s")), num(bps, "%.0f"), gb(g["blkio_read_bytes"]),
               num(rss / 2**20 if isinstance(rss, (int, float)) else None, "%.0f"),
               g["mem_peak_bytes"] / 2**20,
               g["mem_limit_bytes"] / 2**20, num(g["oom_kills"], "%d")))
    p("")

    miss = {}
    for r in runs:
        for f in missing_fields(r):
            miss.setdefault(f, set()).add(r["ranks"])
    p("## Missing\n")
    if miss:
        p("Fields of the stats contract (issue 23 benchmark brief) that rank 0's --stats-json did "
          "not have:\n")
        for f, ns in miss.items():
            p("- `%s` (runs at %s rank%s)" % (f, ", ".join(str(n) for n in sorted(ns)),
                                              "s" if max(ns) > 1 else ""))
    else:
        p("Nothing: every run's stats had every field.")
    failed = [r for r in runs if r["rc"] != 0 or r["stats"] is None]
    if failed:
        p("\nFailed runs:\n")
        for r in failed:
            tail = r["stderr_tail"].strip().splitlines()[-6:]
            p("- %s: rc %s%s. stderr ends:\n\n%s\n" %
              (r["label"], r["rc"], " (timed out)" if r["timed_out"] else "",
               "\n".join("      " + l for l in tail)))
    md = "\n".join(w) + "\n"
    raw = {"setup": setup, "scaling": scaling + [med], "missing": {k: sorted(v) for k, v in miss.items()},
           "runs": runs}
    write_report(args, md, raw)


if __name__ == "__main__":
    main()
