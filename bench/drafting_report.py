#!/usr/bin/python3
"""bench/drafting.sh's runs folder -> markdown tables and one raw JSON.

    drafting_report.py RUNS_DIR --json OUT.json --out OUT.md
"""

import os

from bench_lib import median, read_json, report_args, sampled_runs, write_report


def load(runs_dir):
    info = read_json(os.path.join(runs_dir, "info.json"))
    per = []
    for r, (model, budget, draft, prompt, rep) in sampled_runs(
            runs_dir, "*-p*.json", r"(\w+-\w+)-(min|full)-d(\w+)-p(\d+)(?:-r(\d+))?$"):
        st = r["stats"] or {}
        gen = st.get("generated_tokens", 0)
        tpf = st.get("tokens_per_forward", 0)
        per.append({"model": model, "budget": budget, "draft": draft, "prompt": int(prompt),
                    "rep": int(rep or 1), "switches": st.get("draft_switches"),
                    "rc": r["rc"], "argv": r["argv"], "output": r["output"], "generated": gen,
                    "forwards": round(gen / tpf) if tpf else 0,
                    "drafted": st.get("drafted", 0), "accepted": st.get("draft_accepted", 0),
                    "requests": st.get("expert_requests", 0), "misses": st.get("expert_misses", 0),
                    "hits": st.get("expert_hits", 0), "joins": st.get("expert_joins", 0),
                    "prefetch_reads": st.get("prefetch_reads", 0), "bytes_read": st.get("bytes_read", 0),
                    "decode_s": st.get("decode_s", 0), "frames": st.get("frames"),
                    "frame_bytes": st.get("frame_bytes"), "ram": r["argv"][r["argv"].index("--ram") + 1]})
    return info, per


def aggregate(per):
    """Sums per (model, budget, draft), and the median over prompts and
    repeats of tok/s against the --draft 0 run of the same prompt and repeat
    (the run just before or after it on the machine)."""
    base = {(x["model"], x["budget"], x["prompt"], x["rep"]): x for x in per if x["draft"] == "0"}
    agg = {}
    for x in per:
        k = (x["model"], x["budget"], x["draft"])
        a = agg.setdefault(k, {"model": x["model"], "budget": x["budget"], "draft": x["draft"],
                               "ram": x["ram"], "frames": x["frames"], "frame_bytes": x["frame_bytes"],
                               "prompts": 0, "failed": 0})
        a["prompts"] += 1
        a["failed"] += x["rc"] != 0
        if x["switches"] is None:
            a["no_switches"] = True  # an older build does not report them
        a["switches"] = a.get("switches", 0) + (x["switches"] or 0)
        b = base.get((x["model"], x["budget"], x["prompt"], x["rep"]))
        if b and b["decode_s"] and x["decode_s"] and x["rc"] == 0 and b["rc"] == 0:
            a.setdefault("paired", []).append((x["generated"] / x["decode_s"]) / (b["generated"] / b["decode_s"]))
        for f in ("generated", "forwards", "drafted", "accepted", "requests", "misses", "hits", "joins",
                  "prefetch_reads", "bytes_read", "decode_s"):
            a[f] = a.get(f, 0) + x[f]
    for a in agg.values():
        g = a["generated"] or 1
        a["tok_s"] = a["generated"] / a["decode_s"] if a["decode_s"] else None
        a["tokens_per_forward"] = a["generated"] / a["forwards"] if a["forwards"] else None
        a["acceptance"] = a["accepted"] / a["drafted"] if a["drafted"] else None
        a["requested_per_token"] = a["requests"] / g
        a["reads_per_token"] = (a["misses"] + a["prefetch_reads"]) / g
        a["mb_per_token"] = a["bytes_read"] / g / 1e6
        p = a.get("paired", [])
        a["paired_median"] = median(p)
        a["paired_range"] = (min(p), max(p)) if p else None
    return agg


def order(d):
    return ({"auto": 1, "before": 2}.get(d, 0), int(d) if d.isdigit() else 99)


def label(d):
    return "auto, before" if d == "before" else d


def report(info, per, agg):
    L = []
    w = L.append
    w("# colibri MTP drafting: what it costs and what it gains")
    w("")
    w("- date: %s; colibri %s (`git rev-parse --short HEAD`)" % (info["date"], info["colibri_rev"]))
    w("- host: %s, %d CPUs (shared; tok/s is noisy, counts are not)" % (info["host"], info["cpus"]))
    w("- models:")
    w("")
    w("```")
    w(info["models"].strip())
    w("```")
    w("")
    reps = info.get("repeats", 1)
    w("- workload per cell: prompts %s, each decoded greedily for %d tokens, one process each, "
      "`--no-pin`%s; sums over the prompts%s" % (
          ", ".join("`%s`" % p for p in info["prompts"]), info["tokens"],
          ", %d repeats; each prompt and repeat runs every --draft in turn" % reps if reps > 1 else "",
          " and repeats" if reps > 1 else ""))
    if info.get("before"):
        w("- `auto, before`: `--draft auto` of `%s`, an older build, run in the same turn" % info["before"])
    w("- `%s`" % info["env"])
    w("")
    ex = per[0]["argv"] if per else []
    w("Command (one cell, one prompt):")
    w("")
    w("    " + " ".join(ex))
    w("")
    w("Columns: requested/token = `expert_requests / generated_tokens` (the union of the experts each "
      "forward needs, per layer, MTP layer included); read/token = `(expert_misses + prefetch_reads) / "
      "generated_tokens`, experts read from disk; MB/token = `bytes_read / generated_tokens`; "
      "tokens/forward and acceptance from `tokens_per_forward`, `drafted`, `draft_accepted`; "
      "drafting forwards = `drafted / N` (auto drafts N = 1) over all decode forwards; switches = "
      "`draft_switches` summed; tok/s vs --draft 0 = summed tokens over summed decode time, against "
      "the same for --draft 0; paired = the median (and range) over prompts and repeats of each run's "
      "tok/s over that of the --draft 0 run of the same prompt and repeat. The prompt's "
      "prefill (3 tokens) is included in the counts.")
    models = []
    for x in per:
        if x["model"] not in models:
            models.append(x["model"])
    for m in models:
        for b in ("min", "full"):
            cells = sorted((a for a in agg.values() if a["model"] == m and a["budget"] == b),
                           key=lambda a: order(a["draft"]))
            if not cells:
                continue
            base = next((a for a in cells if a["draft"] == "0"), None)
            c0 = cells[0]
            w("")
            w("## %s, --ram %s (%s frames of %s KiB)" % (m, c0["ram"], c0["frames"],
                                                         (c0["frame_bytes"] or 0) // 1024))
            w("")
            w("| --draft | tokens | forwards | tokens/forward | acceptance | drafting forwards | switches | "
              "requested/token | read/token | MB/token | tok/s | tok/s vs --draft 0 | paired (range) |")
            w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for a in cells:
                n = 1 if a["draft"] in ("auto", "before") else int(a["draft"])
                dfw = a["drafted"] / n if n else 0
                pr = a["paired_range"]
                w("| %s | %d | %d | %s | %s | %s | %s | %.1f | %.1f | %.2f | %s | %s | %s |" % (
                    label(a["draft"]), a["generated"], a["forwards"],
                    "%.2f" % a["tokens_per_forward"] if a["tokens_per_forward"] else "-",
                    "%.1f%%" % (100 * a["acceptance"]) if a["acceptance"] is not None else "-",
                    "%d of %d" % (dfw, a["forwards"]) if n else "-",
                    "%d" % a["switches"] if a["draft"] in ("auto", "before") and not a.get("no_switches") else "-",
                    a["requested_per_token"], a["reads_per_token"], a["mb_per_token"],
                    "%.1f" % a["tok_s"] if a["tok_s"] else "-",
                    "%.2f" % (a["tok_s"] / base["tok_s"]) if base and base["tok_s"] and a["tok_s"] else "-",
                    "%.2f (%.2f-%.2f)" % (a["paired_median"], pr[0], pr[1]) if pr and a["draft"] != "0" else "-"))
    fails = sum(a["failed"] for a in agg.values())
    same = True
    for m in models:
        for i in {x["prompt"] for x in per}:
            outs = {x["output"] for x in per if x["model"] == m and x["prompt"] == i and x["rc"] == 0}
            same &= len(outs) <= 1
    w("")
    w("Failed runs: %d. Greedy output identical for every --draft and budget (per model and prompt): %s." % (
        fails, "yes" if same else "NO"))
    return "\n".join(L) + "\n"


def main():
    a = report_args()
    info, per = load(a.runs)
    agg = aggregate(per)
    write_report(a, report(info, per, agg), {
        "info": info, "per_prompt": per,
        "cells": sorted(agg.values(), key=lambda a: (a["model"], a["budget"], order(a["draft"])))})


if __name__ == "__main__":
    main()
