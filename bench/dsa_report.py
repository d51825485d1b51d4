#!/usr/bin/python3
"""bench/dsa.sh's runs folder -> markdown tables and one raw JSON.

    dsa_report.py RUNS_DIR --json OUT.json --out OUT.md

Per context: decode tok/s of the sparse (index_topk) and dense (index_topk
>= ctx) runs, medians over the repeats, and the median of each turn's
sparse/dense ratio; what the context adds to a decode step over the smallest
context; the arithmetic per decode step from the shape in config.json; the
prefill times; whether greedy output agrees.
"""

import os

from bench_lib import median, read_json, report_args, sampled_runs, write_report


def load(runs_dir):
    info = read_json(os.path.join(runs_dir, "info.json"))
    cfg = read_json(os.path.join(runs_dir, "config.json"))
    per = []
    for r, (kind, ctx, rep) in sampled_runs(runs_dir, "*-c*-r*.json", r"(sparse|dense)-c(\d+)-r(\d+)$"):
        st = r["stats"] or {}
        out = [int(x) for x in r["output"].replace(" ", "").split(",") if x.strip().isdigit()]
        per.append({"label": r["label"], "kind": kind, "ctx": int(ctx), "rep": int(rep),
                    "started": r.get("started"), "rc": r["rc"], "wall_s": r["wall_s"],
                    "prompt_tokens": st.get("prompt_tokens"), "generated": st.get("generated_tokens"),
                    "prefill_s": st.get("prefill_s"), "decode_s": st.get("decode_s"),
                    "decode_tok_s": st.get("decode_tok_s") if r["rc"] == 0 else None,
                    "disk_wait_s": st.get("disk_wait_s"), "bytes_read": st.get("bytes_read"),
                    "hit_rate": st.get("hit_rate"), "expert_misses": st.get("expert_misses"),
                    "peak_rss_bytes": st.get("peak_rss_bytes"), "output": out})
    per.sort(key=lambda x: (x["rep"], x["ctx"], x["started"] or ""))
    return info, cfg, per


# ---------------------------------------------------------------- arithmetic


def step_macs(cfg, visible, keep):
    """Multiply-adds of one decode step that sees `visible` positions, with
    an indexer keeping `keep` (keep >= visible: no scoring), by part."""
    hd, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    L, R = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    NP, V, QL = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["q_lora_rank"]
    IH, ID = cfg["index_n_heads"], cfg["index_head_dim"]
    layers = cfg["num_hidden_layers"]
    types = cfg.get("indexer_types") or ["full"] * layers
    k = min(keep, visible)
    m = {"mla_keys": 0, "mla_heads": 0, "ix_scoring": 0, "ix_proj": 0, "proj": 0, "ffn": 0}
    for layer in range(layers):
        m["mla_keys"] += nh * k * (L + R + L)        # q.[c,k_rot] and sum p c, per head
        m["mla_heads"] += nh * (NP * L + V * L)      # absorb q_nope through kv_b, project out
        m["proj"] += hd * QL + QL * nh * (NP + R) + hd * (L + R) + nh * V * hd
        if types[layer] == "full":
            m["ix_proj"] += IH * ID * QL + ID * hd + IH * hd
            if visible > keep:
                m["ix_scoring"] += IH * ID * visible
        if layer < cfg["first_k_dense_replace"]:
            m["ffn"] += 3 * hd * cfg["intermediate_size"]
        else:
            e = cfg["num_experts_per_tok"] + cfg["n_shared_experts"]
            m["ffn"] += cfg["n_routed_experts"] * hd + 3 * hd * cfg["moe_intermediate_size"] * e
    m["ffn"] += cfg["vocab_size"] * hd                # lm_head
    m["total"] = sum(m.values())
    return m


def decode_macs(cfg, ctx, tokens, keep):
    """Mean step_macs over the decode steps of a run at context ctx: the
    prompt is ctx - tokens - 17 ids; steps 1..tokens-1 see P+1..P+tokens-1."""
    p = ctx - tokens - 17
    steps = [step_macs(cfg, p + j, keep) for j in range(1, tokens)]
    return {k: sum(s[k] for s in steps) / len(steps) for k in steps[0]}, p + tokens / 2


# ---------------------------------------------------------------- aggregation


def aggregate(info, cfg, per):
    topk, tokens = cfg["index_topk"], info["tokens"]
    rows = []
    for ctx in sorted({x["ctx"] for x in per}):
        runs = {k: [x for x in per if x["ctx"] == ctx and x["kind"] == k] for k in ("sparse", "dense")}
        turns = {}
        for x in runs["sparse"] + runs["dense"]:
            turns.setdefault(x["rep"], {})[x["kind"]] = x
        ratios = [t["sparse"]["decode_tok_s"] / t["dense"]["decode_tok_s"] for t in turns.values()
                  if "sparse" in t and "dense" in t and t["sparse"]["decode_tok_s"] and t["dense"]["decode_tok_s"]]
        ms, vis = decode_macs(cfg, ctx, tokens, topk)
        md, _ = decode_macs(cfg, ctx, tokens, 1 << 62)
        row = {"ctx": ctx, "prompt_tokens": ctx - tokens - 17, "mean_visible": vis,
               "keys_sparse": min(topk, vis), "keys_dense": vis}
        for k in ("sparse", "dense"):
            tps = median(x["decode_tok_s"] for x in runs[k])
            row[k] = {"tok_s": tps, "ms_per_token": 1e3 / tps if tps else None,
                      "tok_s_all": [x["decode_tok_s"] for x in runs[k]],
                      "prefill_s": median(x["prefill_s"] for x in runs[k]),
                      "failed": sum(x["rc"] != 0 for x in runs[k]), "runs": len(runs[k]),
                      "disk_wait_s": median(x["disk_wait_s"] for x in runs[k]),
                      "bytes_read": median(x["bytes_read"] for x in runs[k])}
        row["ratio"] = median(ratios)
        row["ratio_range"] = [min(ratios), max(ratios)] if ratios else None
        row["ratio_of_medians"] = (row["sparse"]["tok_s"] / row["dense"]["tok_s"]
                                   if row["sparse"]["tok_s"] and row["dense"]["tok_s"] else None)
        row["macs_sparse"], row["macs_dense"] = ms, md
        row["macs_ratio"] = md["total"] / ms["total"]
        # Greedy output.
        outs = {k: [x["output"] for x in runs[k] if x["rc"] == 0] for k in ("sparse", "dense")}
        row["sparse_repeatable"] = len({tuple(o) for o in outs["sparse"]}) <= 1
        row["dense_repeatable"] = len({tuple(o) for o in outs["dense"]}) <= 1
        if outs["sparse"] and outs["dense"]:
            a, b = outs["sparse"][0], outs["dense"][0]
            row["same_output"] = a == b
            row["first_difference"] = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]),
                                           None if len(a) == len(b) else min(len(a), len(b)))
            row["generated"] = [len(a), len(b)]
            row["last_position"] = ctx - tokens - 17 + max(len(a), len(b)) - 1
        rows.append(row)
    # What the context adds to a step over the smallest context, when that
    # one is dense in both (no position dropped, no scoring).
    base = rows[0] if rows and rows[0]["ctx"] - 17 <= topk else None
    for row in rows:
        if not base:
            break
        for k in ("sparse", "dense"):
            b, x = base[k]["ms_per_token"], row[k]["ms_per_token"]
            row[k]["added_ms"] = x - b if b and x else None
        extra = row["mean_visible"] - base["mean_visible"]
        for k in ("sparse", "dense"):
            a = row[k]["added_ms"]
            row[k]["us_per_added_position"] = a * 1e3 / extra if a is not None and extra > 0 else None
        s = row["sparse"]
        s["added_share"] = s["added_ms"] / s["ms_per_token"] if s.get("added_ms") is not None else None
    return rows, base


# ---------------------------------------------------------------- report


def f(x, fmt="%.1f", none="-"):
    return none if x is None else fmt % x


def mmac(x):
    return "%.1f" % (x / 1e6)


def report(info, cfg, per, rows, base):
    topk, tokens = cfg["index_topk"], info["tokens"]
    hd, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    L, R, NP, V = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    IH, ID, layers = cfg["index_n_heads"], cfg["index_head_dim"], cfg["num_hidden_layers"]
    o = []
    w = o.append
    w("# DSA sparse attention vs dense MLA, %s" % info["date"][:10])
    w("")
    w("- command: `%s` (%s)" % (info["command"], info["env"]))
    w("- date: %s; colibri %s" % (info["date"], info["colibri_rev"]))
    w("- host: %s, %d CPUs (%s; %s), threads %s" % (info["host"], info["cpus"], info["cpu"],
                                                   info["caches"].replace("),", "), "),
                                                   info["threads"] or "default"))
    w("- runtime: %d s for %d runs (%d repeats x %d contexts x sparse, dense)"
      % (info["runtime_s"], info["runs"], info["repeats"], len(info["contexts"])))
    w("- model: `%s`, then `%s` (random weights, deepseek_v32): hidden %d, %d layers (first dense, "
      "then MoE: %d experts of width %d, top-%d, 1 shared), %d heads, q_lora_rank %d, kv_lora_rank %d, "
      "qk_nope %d, qk_rope %d, v_head %d; indexer %d heads of %d dims, index_topk %d; vocab %d"
      % (info["generate"], info["convert"], hd, layers, cfg["n_routed_experts"], cfg["moe_intermediate_size"],
         cfg["num_experts_per_tok"], nh, cfg["q_lora_rank"], L, NP, R, V, IH, ID, topk, cfg["vocab_size"]))
    w("- sparse: the container as converted; dense: the same files with index_topk = %d in config.json "
      "(>= every --ctx), so MLA attends to every position. The dense runs still run the indexer's "
      "projections and fill its key cache, but not its scoring or top-k: engine/forward/dsa_indexer.c scores only "
      "when a position would be dropped" % (1 << 20))
    w("- each run: `colibri run --model DIR --tokens <C-%d-17 ids> -n %d --temp 0 --ctx C --no-pin "
      "--stats-json F`; tok/s is the stats' `decode_tok_s` (%d decode steps after the token the prompt's "
      "forward gives), which see positions C-%d-16 .. C-18" % (tokens, tokens, tokens - 1, tokens))
    w("- turns: each repeat visits every context, sparse and dense back to back, the first of the pair "
      "alternating between repeats; ratio = median over repeats of the turn's sparse tok/s / dense tok/s "
      "(range in brackets)")
    waits = [x["disk_wait_s"] for x in per if x["disk_wait_s"] is not None]
    reads = [x["bytes_read"] for x in per if x["bytes_read"] is not None]
    w("- CPU-bound: the 8 expert records (int4) are read once and stay cached (--ram default); disk "
      "wait per run at most %.3f s, %.1f MB read per run" % (max(waits or [0]), max(reads or [0]) / 1e6))
    w("")
    w("## Decode speed")
    w("")
    w("| context | positions seen (mean) | keys attended sparse / dense | sparse tok/s | dense tok/s | "
      "sparse / dense | sparse ms/token | dense ms/token |")
    w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        rr = r["ratio_range"]
        w("| %d | %.0f | %.0f / %.0f | %s | %s | **%s** (%s) | %s | %s |"
          % (r["ctx"], r["mean_visible"], r["keys_sparse"], r["keys_dense"], f(r["sparse"]["tok_s"]),
             f(r["dense"]["tok_s"]), f(r["ratio"], "%.2f"),
             "%.2f-%.2f" % tuple(rr) if rr else "-", f(r["sparse"]["ms_per_token"], "%.2f"),
             f(r["dense"]["ms_per_token"], "%.2f")))
    w("")
    if base:
        w("## What the context adds to a decode step")
        w("")
        w("Over the %d context (where both configurations attend to every position and the indexer "
          "scores nothing): in the sparse runs MLA still attends to %d keys, so what grows is the "
          "indexer's scoring and top-k over every position; in the dense runs it is MLA over the "
          "extra keys. Measured, from the medians above; arithmetic per decode step, in millions "
          "of multiply-adds (MMAC), from the shape (all %d layers):" % (base["ctx"], topk, layers))
        w("")
        w("- MLA per key and head: %d (q . [c, k_rot]) + %d (p c) = %d; per key, %d heads: %d"
          % (L + R, L, 2 * L + R, nh, nh * (2 * L + R)))
        w("- indexer per position: %d heads x %d = %d (%.1fx less than MLA per key), plus the top-%d "
          "selection" % (IH, ID, IH * ID, nh * (2 * L + R) / (IH * ID), topk))
        w("- per step whatever the context: MLA query absorption and output through kv_b (%s), "
          "projections (%s), indexer projections (%s), FFN, experts and lm_head (%s): %s MMAC"
          % tuple(mmac(sum(rows[0]["macs_dense"][k] for k in ks))
                  for ks in (("mla_heads",), ("proj",), ("ix_proj",), ("ffn",),
                             ("mla_heads", "proj", "ix_proj", "ffn"))))
        w("- latent cache per layer: %d floats per position (%.1f KiB); at 4096 positions %.1f MiB, "
          "re-read by each of the %d heads; the indexer's key cache %d floats per position"
          % (L + R, (L + R) * 4 / 1024, 4096 * (L + R) * 4 / 2 ** 20, nh, ID))
        w("")
        w("Added ms/token are over the %d context's median; µs per position divide them by the "
          "positions seen beyond its mean (%.0f): the indexer's cost per position in the sparse "
          "runs, MLA's per key in the dense ones." % (base["ctx"], base["mean_visible"]))
        w("")
        w("| context | sparse: added ms/token | its share of a sparse step | µs per position | "
          "dense: added ms/token | µs per key | "
          "MMAC sparse: MLA keys + indexer scoring | MMAC dense: MLA keys | MMAC per step sparse / dense "
          "| arithmetic dense / sparse | measured sparse / dense tok/s |")
        w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            ms, md = r["macs_sparse"], r["macs_dense"]
            w("| %d | %s | %s | %s | %s | %s | %s + %s | %s | %s / %s | %.2f | %s |"
              % (r["ctx"], f(r["sparse"].get("added_ms"), "%+.2f"),
                 f(r["sparse"].get("added_share") and 100 * r["sparse"]["added_share"], "%.0f%%"),
                 f(r["sparse"].get("us_per_added_position"), "%.3f"),
                 f(r["dense"].get("added_ms"), "%+.2f"),
                 f(r["dense"].get("us_per_added_position"), "%.3f"), mmac(ms["mla_keys"]), mmac(ms["ix_scoring"]),
                 mmac(md["mla_keys"]), mmac(ms["total"]), mmac(md["total"]), r["macs_ratio"],
                 f(r["ratio"], "%.2f")))
        w("")
    w("## Prefill (the bulk of the runtime)")
    w("")
    w("| context | prompt tokens | sparse prefill s | dense prefill s | dense / sparse |")
    w("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        a, b = r["sparse"]["prefill_s"], r["dense"]["prefill_s"]
        w("| %d | %d | %s | %s | %s |" % (r["ctx"], r["prompt_tokens"], f(a, "%.2f"), f(b, "%.2f"),
                                          f(a and b and b / a, "%.2f")))
    w("")
    w("## Greedy output, sparse vs dense")
    w("")
    w("While every position a step sees is at most index_topk (%d), the indexer keeps them all and "
      "sparse must equal dense token for token; beyond, MLA attends to different keys and the output "
      "may differ. A run that generated fewer than %d tokens stopped at EOS (id 1, which colibri "
      "does not print); its tok/s covers the steps it ran." % (topk, tokens))
    w("")
    w("| context | last position | tokens (sparse, dense) | sparse = dense | first differing token | "
      "sparse same every repeat | dense same every repeat |")
    w("| ---: | ---: | --- | --- | ---: | --- | --- |")
    for r in rows:
        if "same_output" not in r:
            w("| %d | - | - | no successful pair | - | - | - |" % r["ctx"])
            continue
        must = r["last_position"] < topk
        mark = "" if r["same_output"] or not must else " **(must be equal)**"
        gen = ", ".join("%d%s" % (g, " (EOS)" if g < tokens else "") for g in r["generated"])
        w("| %d | %d | %s | %s%s | %s | %s | %s |"
          % (r["ctx"], r["last_position"], gen,
             "yes" if r["same_output"] else "no", mark, f(r["first_difference"], "%d"),
             "yes" if r["sparse_repeatable"] else "no", "yes" if r["dense_repeatable"] else "no"))
    w("")
    w("## Runs, in the order they ran")
    w("")
    w("| run | started | rc | prompt | generated | prefill s | decode s | tok/s | disk wait s | MB read | "
      "peak RSS MiB |")
    w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for x in per:
        w("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |"
          % (x["label"], (x["started"] or "-")[11:19], x["rc"], f(x["prompt_tokens"], "%d"),
             f(x["generated"], "%d"), f(x["prefill_s"], "%.2f"), f(x["decode_s"], "%.3f"),
             f(x["decode_tok_s"]), f(x["disk_wait_s"], "%.3f"),
             f(x["bytes_read"] and x["bytes_read"] / 1e6, "%.1f"),
             f(x["peak_rss_bytes"] and x["peak_rss_bytes"] / 2 ** 20, "%.0f")))
    w("")
    return "\n".join(o)


def main():
    a = report_args(__doc__.split("\n")[0])
    info, cfg, per = load(a.runs)
    rows, base = aggregate(info, cfg, per)
    write_report(a, report(info, cfg, per, rows, base),
                 {"info": info, "config": cfg, "contexts": rows, "runs": per}, echo=False)


if __name__ == "__main__":
    main()
