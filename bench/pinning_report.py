#!/usr/bin/python3
"""bench/pinning.sh's runs folder -> markdown tables and one raw JSON.

    pinning_report.py RUNS_DIR --json OUT.json --out OUT.md
"""

import os

from bench_lib import read_json, report_args, sampled_runs, write_report

DESC = {
    "lru": "`COLIBRI_EVICT=lru --no-pin`: plain LRU, nothing pinned",
    "freq": "`--no-pin`: frequency-aware eviction (the default), nothing pinned",
    "pin": "defaults: frequency-aware eviction and learned pinning (usage.json from the runs before)",
    "repin": "as pin, plus `--repin 8`",
}


def load(runs_dir):
    info = read_json(os.path.join(runs_dir, "info.json"))
    per = []
    for r, (c, run, prompt) in sampled_runs(runs_dir, "*-r*-p*.json", r"(\w+)-r(\d+)-p(\d+)$"):
        st = r["stats"] or {}
        per.append({"config": c, "run": int(run), "prompt": int(prompt), "rc": r["rc"],
                    "argv": r["argv"], "output": r["output"],
                    "requests": st.get("expert_requests", 0), "hits": st.get("expert_hits", 0),
                    "pinned_hits": st.get("expert_pinned_hits", 0), "joins": st.get("expert_joins", 0),
                    "misses": st.get("expert_misses", 0), "pinned_experts": st.get("pinned_experts", 0),
                    "bytes_read": st.get("bytes_read", 0), "generated": st.get("generated_tokens", 0),
                    "decode_s": st.get("decode_s", 0), "prefill_s": st.get("prefill_s", 0),
                    "wall_s": st.get("wall_s", 0), "disk_wait_s": st.get("disk_wait_s", 0),
                    "frames": st.get("frames"), "frame_bytes": st.get("frame_bytes"),
                    "eviction": st.get("eviction"), "decode_tok_s": st.get("decode_tok_s"),
                    "prefetch_reads": st.get("prefetch_reads", 0),
                    "prefetch_reads_used": st.get("prefetch_reads_used", 0)})
    return info, per


def aggregate(per):
    out = {}
    for x in per:
        k = (x["config"], x["run"])
        a = out.setdefault(k, {"config": x["config"], "run": x["run"], "prompts": 0, "requests": 0,
                               "hits": 0, "pinned_hits": 0, "joins": 0, "misses": 0, "bytes_read": 0,
                               "generated": 0, "decode_s": 0.0, "wall_s": 0.0, "disk_wait_s": 0.0,
                               "prefetch_reads": 0, "prefetch_reads_used": 0,
                               "pinned_experts": [], "frames": x["frames"],
                               "frame_bytes": x["frame_bytes"], "failed": 0})
        a["prompts"] += 1
        a["failed"] += x["rc"] != 0
        for f in ("requests", "hits", "pinned_hits", "joins", "misses", "bytes_read", "generated",
                  "decode_s", "wall_s", "disk_wait_s", "prefetch_reads", "prefetch_reads_used"):
            a[f] += x[f]
        a["pinned_experts"].append(x["pinned_experts"])
    for a in out.values():
        a["hit_rate"] = (a["hits"] + a["pinned_hits"]) / a["requests"] if a["requests"] else None
        a["pinned_share"] = a["pinned_hits"] / a["requests"] if a["requests"] else None
        a["tok_s"] = a["generated"] / a["decode_s"] if a["decode_s"] else None
        a["gb_read"] = a["bytes_read"] / 1e9
        # Requests that cost no disk read at all: every read is a demand miss
        # or a prefetch (a prefetched expert found resident counts as a hit).
        # Reads counted from the bytes (every record of this model has the
        # same size), so the pinned set's preload at start-up counts too.
        reads = a["bytes_read"] / a["frame_bytes"] if a["frame_bytes"] else a["misses"] + a["prefetch_reads"]
        a["records_read"] = reads
        a["no_read_rate"] = 1 - reads / a["requests"] if a["requests"] else None
    return out


def pct(x):
    return "-" if x is None else "%.1f%%" % (100 * x)


def per_run_table(w, configs, runs, agg, show, last_head, last):
    """One row per run, one column per configuration: show(aggregate), or -
    where that configuration lacks the run; then last(run) under last_head."""
    w("| run | " + " | ".join(configs) + " | %s |" % last_head)
    w("| ---: | " + " | ".join("---:" for _ in configs) + " | ---: |")
    for r in runs:
        cells = (show(agg[(c, r)]) if (c, r) in agg else "-" for c in configs)
        w("| %d | %s | %s |" % (r, " | ".join(cells), last(r)))


def report(info, per, agg):
    L = []
    w = L.append
    configs = [c for c in info["configs"] if any(k[0] == c for k in agg)]
    runs = sorted({k[1] for k in agg})
    w("# colibri learned pinning vs LRU")
    w("")
    w("- date: %s; colibri %s (`git rev-parse --short HEAD`)" % (info["date"], info["colibri_rev"]))
    w("- host: %s, %d CPUs (shared: tok/s is noisy, hit rates are not)" % (info["host"], info["cpus"]))
    w("- model: `%s`" % info["container"])
    for line in info["provenance"].strip().splitlines():
        w("  - %s" % line)
    x = next(iter(agg.values()))
    total = info.get("experts_total")
    w("- `--ram %s`: an expert cache of %s frames of %s bytes (%s of the %s experts); learned pinning "
      "takes up to half of the frames beyond one step's top-k" % (
          info["ram"], x["frames"], x["frame_bytes"],
          "%.0f%%" % (100.0 * x["frames"] / total) if total and x["frames"] else "?", total or "?"))
    w("- workload (one run): %d prompts of 8 token ids, each decoded greedily for %d tokens, one "
      "process per prompt: %s" % (len(info["prompts"]), info["tokens"],
                                  "; ".join("`%s`" % p for p in info["prompts"])))
    w("- `%s`" % info["env"])
    w("")
    w("Configurations:")
    w("")
    for c in configs:
        w("- **%s**: %s" % (c, DESC.get(c, c)))
    w("")
    w("Command (one prompt; pin adds nothing, lru prefixes `env COLIBRI_EVICT=lru` and adds `--no-pin`):")
    w("")
    ex = next((p for p in per if p["config"] == "pin"), per[0])
    w("    " + " ".join(ex["argv"]))
    w("")
    w("Hit rate = (expert_hits + expert_pinned_hits) / expert_requests of `--stats-json`, summed over "
      "the run's prompts (prefill included); tok/s = generated tokens / decode seconds, summed.")
    w("")
    w("## Hit rate per run")
    w("")

    def pin_minus_lru(r):
        if ("pin", r) in agg and ("lru", r) in agg:
            return "%+.1f pts" % (100 * (agg[("pin", r)]["hit_rate"] - agg[("lru", r)]["hit_rate"]))
        return ""
    per_run_table(w, configs, runs, agg, lambda a: pct(a["hit_rate"]), "pin - lru", pin_minus_lru)
    w("")
    w("## Requests served without any disk read, per run")
    w("")
    w("1 - records read / expert_requests, records read = `bytes_read` / record size (demand misses, "
      "prefetch reads and the pinned set's preload at start-up). The hit rate above counts a prefetched "
      "expert that a request finds resident as a hit, although it was read from disk moments before; "
      "this share is what the cache and the pinned set save the disk.")
    w("")
    per_run_table(w, configs, runs, agg, lambda a: pct(a["no_read_rate"]),
                  "GB read: " + " / ".join(configs),
                  lambda r: " / ".join("%.1f" % agg[(c, r)]["gb_read"] if (c, r) in agg else "-"
                                       for c in configs))
    w("")
    w("## tok/s per run")
    w("")

    def pin_over_lru(r):
        if ("pin", r) in agg and ("lru", r) in agg and agg[("lru", r)]["tok_s"]:
            return "%.2f" % (agg[("pin", r)]["tok_s"] / agg[("lru", r)]["tok_s"])
        return ""
    per_run_table(w, configs, runs, agg, lambda a: "%.2f" % a["tok_s"] if a["tok_s"] else "-",
                  "pin / lru", pin_over_lru)
    w("")
    w("## Details")
    w("")
    w("| config | run | requests | pinned hits | cache hits | joined | misses | prefetch reads (used) | "
      "hit rate | pinned experts (per prompt) | GB read | decode s | disk wait s | tok/s |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for c in configs:
        for r in runs:
            a = agg.get((c, r))
            if not a:
                continue
            w("| %s | %d | %d | %d | %d | %d | %d | %d (%d) | %.1f%% | %s | %.2f | %.1f | %.1f | %.2f |" % (
                c, r, a["requests"], a["pinned_hits"], a["hits"], a["joins"], a["misses"],
                a["prefetch_reads"], a["prefetch_reads_used"],
                100 * (a["hit_rate"] or 0), ", ".join(str(p) for p in a["pinned_experts"]),
                a["gb_read"], a["decode_s"], a["disk_wait_s"], a["tok_s"] or 0))
    fails = sum(a["failed"] for a in agg.values())
    w("")
    same = all(len({p["output"] for p in per if p["prompt"] == i and p["rc"] == 0}) == 1
               for i in {p["prompt"] for p in per})
    w("Failed runs: %d. Each prompt generated the same tokens in every run and configuration: %s." % (
        fails, "yes" if same else "NO"))
    return "\n".join(L) + "\n"


def main():
    a = report_args()
    info, per = load(a.runs)
    agg = aggregate(per)
    write_report(a, report(info, per, agg), {
        "info": info, "per_prompt": per,
        "per_run": sorted(agg.values(), key=lambda a: (a["config"], a["run"]))})


if __name__ == "__main__":
    main()
