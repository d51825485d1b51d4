#!/usr/bin/python3
"""Constrained decoding on a streamed model: tok/s and forwards per output
token with and without forced-token batching (--no-forced-batch), paired.

    grammar_runs.py --model CTR --schema FILE --out RAW.json --md REPORT.md
                    [--cgroup-limit 2G --ram 1536M] [--tokens N] [--repeat R]
                    [--fio-seconds S] [--io-depth D] [--command TEXT]

For each repeat and prompt the two modes run in turn (A B A B), each with the
page cache dropped, fio on the expert files right before (O_DIRECT, io_uring,
whole records at --io-depth), the engine in a cgroup v1 memory group of
--cgroup-limit (created and removed here, as decode_runs.py does) with
--ram, greedy, --json-schema FILE, --stats-json. The report gives medians
and per-pair ratios (batched / plain), checks that both modes print the same
text and that every output is JSON, and lists the exact commands.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_lib  # noqa: E402
import decode_runs  # noqa: E402

PROMPTS = [
    "Invoice 2291 from Harlan & Sons, dated 2026-11-30: 14 boxes of brass hinges at 3.20 EUR each, "
    "total 44.80 EUR, due in 30 days. Extract the invoice as JSON.",
    "Order confirmation: Mira Okafor bought 2 tickets to Lisbon on 2026-12-19 for 310 USD, seat 14C. "
    "Extract the purchase as JSON.",
    "Receipt from Cafe Nord, 2026-10-02, 3 items (espresso, croissant, water), paid 9.50 GBP by card. "
    "Extract the receipt as JSON.",
]


def run_one(args, ctr, prompt, batched, tag, scratch):
    stats = os.path.join(scratch, tag + ".stats.json")
    out = os.path.join(scratch, tag + ".out")
    argv = [args.colibri, "run", "--model", args.model, "--prompt", prompt, "-n", str(args.tokens),
            "--temp", "0", "--ram", args.ram, "--io-depth", str(args.io_depth), "--json-schema", args.schema,
            "--json-ws", args.json_ws, "--stats-json", stats]
    if not batched:
        argv.append("--no-forced-batch")
    for f in (stats,):
        if os.path.exists(f):
            os.remove(f)
    bench_lib.drop_caches()
    fio = decode_runs.fio(ctr, args.io_depth, args.fio_seconds)
    limit = decode_runs.parse_size(args.cgroup_limit) if args.cgroup_limit else None
    cg = decode_runs.Cgroups(limit) if limit else decode_runs._NoCgroups()
    t0 = time.monotonic()
    with cg, open(out, "wb") as fo, open(out + ".err", "wb") as fe:
        p = subprocess.run(argv, stdout=fo, stderr=fe, preexec_fn=cg.join)
        mem = cg.read() if limit else {}
    wall = time.monotonic() - t0
    text = open(out, "rb").read().decode("utf-8", "replace").rstrip("\n")
    s = json.load(open(stats)) if p.returncode == 0 and os.path.exists(stats) else {}
    try:
        json.loads(text)
        parses = True
    except ValueError:
        parses = False
    gen = s.get("generated_tokens", 0)
    fw = s.get("decode_forwards", 0)
    return {"tag": tag, "batched": batched, "rc": p.returncode, "cmd": decode_runs.quote(argv), "text": text,
            "json": parses, "wall_s": wall, "fio": fio, "memcg": mem, "generated": gen,
            "decode_tok_s": s.get("decode_tok_s", 0), "decode_s": s.get("decode_s", 0),
            "forwards": fw, "forced": s.get("grammar_forced", 0),
            "saved": s.get("grammar_forwards_saved", 0),
            "forwards_per_token": fw / (gen - 1) if gen > 1 else 0,
            "bytes_read": s.get("bytes_read", s.get("disk_bytes_read", 0)),
            "stderr_tail": open(out + ".err", "rb").read().decode("utf-8", "replace")[-400:]}


def report(args, runs, meta):
    def med(xs):
        return statistics.median(xs) if xs else 0
    L = ["# Constrained decoding with forced-token batching — %s" % meta["date"][:10], ""]
    L.append("    %s" % (args.command or "bench/grammar.sh"))
    L.append("")
    L.append("- Model: `%s` (%s). Schema: `%s` (`--json-ws %s`). Greedy, %d tokens at most, `--ram %s`%s, `--io-depth %d`; "
             "fio %d s before each run; page cache dropped before each run; modes A B A B, %d repeat(s) of %d "
             "prompts." % (args.model, meta["model_type"], os.path.basename(args.schema), args.json_ws, args.tokens, args.ram,
                            " in a %s cgroup" % args.cgroup_limit if args.cgroup_limit else "", args.io_depth,
                            args.fio_seconds, args.repeat, len(PROMPTS)))
    L.append("- Machine: %s; colibri %s." % (meta["machine"], meta["rev"]))
    L.append("")
    L.append("| mode | runs | decode tok/s | forwards / output token | forced tokens / output token | "
             "fio GB/s | all JSON |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for batched, name in ((True, "forced tokens batched"), (False, "--no-forced-batch")):
        rs = [r for r in runs if r["batched"] == batched and r["rc"] == 0]
        L.append("| %s | %d | %.2f | %.3f | %.3f | %.2f | %s |" % (
            name, len(rs), med([r["decode_tok_s"] for r in rs]), med([r["forwards_per_token"] for r in rs]),
            med([r["forced"] / max(r["generated"], 1) for r in rs]), med([r["fio"]["gbps"] for r in rs]),
            "yes" if rs and all(r["json"] for r in rs) else "NO"))
    pairs = []
    for r in runs:
        if r["batched"]:
            b = [x for x in runs if not x["batched"] and x["tag"] == r["tag"].replace("-batched", "-plain")]
            if b and r["rc"] == 0 and b[0]["rc"] == 0:
                pairs.append((r, b[0]))
    L.append("")
    same = all(a["text"] == b["text"] for a, b in pairs)
    L.append("Paired (batched / plain, same prompt and repeat, %d pairs): decode tok/s ratio %.2f (min %.2f, max "
             "%.2f); forwards ratio %.2f; the same text in both modes: %s." % (
                 len(pairs), med([a["decode_tok_s"] / b["decode_tok_s"] for a, b in pairs if b["decode_tok_s"]]),
                 min([a["decode_tok_s"] / b["decode_tok_s"] for a, b in pairs if b["decode_tok_s"]] or [0]),
                 max([a["decode_tok_s"] / b["decode_tok_s"] for a, b in pairs if b["decode_tok_s"]] or [0]),
                 med([a["forwards"] / b["forwards"] for a, b in pairs if b["forwards"]]), "yes" if same else "NO"))
    L.append("")
    L.append("| run | tokens | forced | forwards | decode tok/s | fio GB/s | cgroup peak / failures | output |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in runs:
        m = r["memcg"]
        L.append("| %s | %d | %d | %d | %.2f | %.2f | %s | `%s` |" % (
            r["tag"], r["generated"], r["forced"], r["forwards"], r["decode_tok_s"], r["fio"]["gbps"],
            "%.2f GB / %d" % (m.get("memcg_max_usage_in_bytes", 0) / 1e9, m.get("memcg_failcnt", 0)) if m else "–",
            r["text"][:90].replace("|", "\\|").replace("\n", "\\n").replace("\t", "\\t").replace("`", "'")))
    L.append("")
    L.append("<details><summary>Commands</summary>")
    L.append("")
    L.append("```")
    for r in runs:
        L.append("# %s" % r["tag"])
        L.append(r["fio"]["cmd"])
        L.append(r["cmd"])
    L.append("```")
    L.append("</details>")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--colibri", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colibri"))
    ap.add_argument("--cgroup-limit", default="2G")
    ap.add_argument("--ram", default="1536M")
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fio-seconds", type=int, default=2)
    ap.add_argument("--io-depth", type=int, default=32)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--json-ws", default="none", help="--json-ws of the runs (none: compact JSON)")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    ctr = decode_runs.Container(args.model)
    os.makedirs(args.scratch, exist_ok=True)
    runs = []
    for rep in range(args.repeat):
        for i, prompt in enumerate(PROMPTS):
            for batched in (True, False):
                tag = "p%d-r%d-%s" % (i + 1, rep + 1, "batched" if batched else "plain")
                r = run_one(args, ctr, prompt, batched, tag, args.scratch)
                sys.stderr.write("grammar_runs: %s: %.2f tok/s, %d tokens, %d forced, %d forwards, fio %.2f GB/s%s\n"
                                 % (tag, r["decode_tok_s"], r["generated"], r["forced"], r["forwards"],
                                    r["fio"]["gbps"], "" if r["rc"] == 0 else ", FAILED: " + r["stderr_tail"]))
                runs.append(r)
    rev = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    m = decode_runs.machine()
    meta = {"date": decode_runs.now_iso(), "rev": rev, "model_type": ctr.model_type,
            "machine": "%s, %s cores, %.1f GiB RAM" % (m.get("cpu", "?"), m.get("cores"), m.get("ram_bytes", 0) / 2**30)}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "runs": runs}, f, indent=1)
    with open(args.md, "w") as f:
        f.write(report(args, runs, meta))
    sys.stderr.write("grammar_runs: wrote %s and %s\n" % (args.md, args.out))
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
