#!/usr/bin/env python3
"""serve_runs.py's raw JSON to bench/results/serve-<date>.md.

    serve_report.py RAW.json --out REPORT.md [--title TITLE]
"""
import argparse
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from bench_lib import median  # noqa: E402


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="colibri serve: concurrent streams")
    a = ap.parse_args()
    with open(a.raw) as f:
        raw = json.load(f)
    runs = raw["runs"]
    args = raw["args"]
    md = ["# %s" % a.title, ""]
    md.append("Measured %s with `%s`." % (raw["date"], raw["command"] or "bench/serve_runs.py"))
    md.append("")
    md.append("Server (the same for every run): `%s`%s." % (
        runs[0]["command"] if runs else "", "" if all(r["capped"] for r in runs) else
        " (NOT in a memory cgroup: not root)"))
    md.append("Each run: page cache dropped, a fresh server in a cgroup v1 memory group of %s, "
              "N clients at once, each streaming %d greedy tokens of /v1/completions after its own "
              "8-token prompt." % (args["cgroup_limit"], args["tokens"]))
    md.append("")
    md.append("Columns: aggregate tok/s = tokens of all streams / (last token - requests sent); decode tok/s = "
              "tokens after each stream's first / (last token - latest first token); MB read / token = "
              "colibri_expert_read_bytes_total over the run / tokens; experts / layer / step = expert requests "
              "(each expert once per layer and step) / (steps x %d layers): the union the step had to compute; "
              "sharing bound = streams x top-k (%d) / that union: how many times fewer expert matrices "
              "each token costs than alone, the most batching can gain while a step's time goes to the "
              "experts' weights." % (raw["layers"], raw["top_k"]))
    md.append("")
    md.append("| run | streams | tokens | aggregate tok/s | decode tok/s | TTFT s (max) | hit rate | "
              "MB read / token | steps | experts / layer / step | sharing bound | cgroup peak MiB | failcnt |")
    md.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        hit = r["expert_hits"] / r["expert_requests"] if r["expert_requests"] else None
        union = r["expert_requests"] / (r["steps"] * raw["layers"]) if r["steps"] else None
        bound = r["streams"] * raw["top_k"] / union if union else None
        md.append("| #%d | %d | %d | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |" % (
            r["repeat"], r["streams"], r["tokens"], fmt(r["aggregate_tok_s"]), fmt(r["decode_tok_s"]),
            fmt(max(r["ttft_s"]) if r["ttft_s"] else None), fmt(hit * 100 if hit is not None else None, ".0f") + "%",
            fmt(r["bytes_per_token"] / 1e6 if r["bytes_per_token"] else None, ".1f"), r["steps"],
            fmt(union, ".1f"), fmt(bound) + "x" if bound else "-",
            fmt(r.get("memcg_max_usage_in_bytes", 0) / 2**20 if r.get("memcg_max_usage_in_bytes") else None, ".0f"),
            r.get("memcg_failcnt", "-")))
    md.append("")
    counts = sorted({r["streams"] for r in runs})
    med = {n: {k: median([r[k] for r in runs if r["streams"] == n])
               for k in ("aggregate_tok_s", "decode_tok_s", "bytes_per_token")} for n in counts}
    md.append("Medians over the repeats:")
    md.append("")
    md.append("| streams | aggregate tok/s | vs 1 stream | decode tok/s | vs 1 stream | MB read / token |")
    md.append("| ---: | ---: | ---: | ---: | ---: | ---: |")
    one = med.get(1, {})
    for n in counts:
        m = med[n]
        ra = m["aggregate_tok_s"] / one["aggregate_tok_s"] if one.get("aggregate_tok_s") else None
        rd = m["decode_tok_s"] / one["decode_tok_s"] if one.get("decode_tok_s") else None
        md.append("| %d | %s | %s | %s | %s | %s |" % (
            n, fmt(m["aggregate_tok_s"]), fmt(ra) + "x" if ra else "-", fmt(m["decode_tok_s"]),
            fmt(rd) + "x" if rd else "-", fmt(m["bytes_per_token"] / 1e6 if m["bytes_per_token"] else None, ".1f")))
    md.append("")
    target = med.get(4, {}).get("aggregate_tok_s")
    if target and one.get("aggregate_tok_s"):
        ratio = target / one["aggregate_tok_s"]
        md.append("Target (4 streams >= 2.5x the tok/s of one): %.2fx, %s." % (ratio, "met" if ratio >= 2.5 else "NOT met"))
        md.append("")
    # Greedy texts must not depend on what else is in the batch.
    by_stream = {}
    for r in runs:
        for i, t in enumerate(r["texts"]):
            by_stream.setdefault(i, set()).add(t)
    same = all(len(v) == 1 for v in by_stream.values())
    md.append("Greedy text of each stream the same in every run (alone or beside others, every repeat): %s."
              % ("yes" if same else "NO: " + ", ".join("stream %d: %d texts" % (i, len(v))
                                                       for i, v in by_stream.items() if len(v) > 1)))
    bad = [r for r in runs if r["exit"] != 0 or any(s != 200 for s in r["statuses"])]
    if bad:
        md.append("")
        md.append("Runs with a failed request or exit status: %s." % ", ".join(
            "#%d/%d" % (r["repeat"], r["streams"]) for r in bad))
    md.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
