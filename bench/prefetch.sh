#!/bin/sh
# Prefetch against its cost: bytes read per token against the bytes of the
# experts a run needed and did not hold, and tok/s, with prefetch on (the
# default policy) and off, alternately, under memory caps.
#
#   bench/prefetch.sh            (root: drop_caches and cgroup v1 memory groups)
#
# The model is the OLMoE-1B-7B shape at int4 (bench/model_lib.sh,
# BENCH_PREFETCH_LAYERS layers, 16 by default: 4.0 GB of experts). Each run:
# page cache dropped, usage.json removed (no pinned set), one-token prompt,
# BENCH_TOKENS (32) greedy tokens, --draft 0, inside a memory cgroup of the
# cap with --ram of the cap's budget. "needed" bytes = (misses + prefetched
# reads a request then used) x record bytes: what a perfect prefetch would
# still have read. COLIBRI_OLD adds a third engine (another build) to the
# rotation. Writes bench/results/prefetch-<date>.md.
#
# Environment: COLIBRI, COLIBRI_OLD, BENCH_TOKENS [32], BENCH_REPEAT [2],
#   BENCH_PREFETCH_CAPS ["1G:900M 2G:1536M 8G:6G"] (cgroup limit:--ram),
#   BENCH_PREFETCH_LAYERS [16], BENCH_RESULTS.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init prefetch build/colibri
tokens=${BENCH_TOKENS:-32}
repeat=${BENCH_REPEAT:-2}
caps=${BENCH_PREFETCH_CAPS:-"1G:900M 2G:1536M 8G:6G"}
layers=${BENCH_PREFETCH_LAYERS:-16}
old=${COLIBRI_OLD:-}

[ "$(id -u)" = 0 ] || { model_say "needs root (drop_caches, cgroups)"; exit 1; }
cgroot=/sys/fs/cgroup/memory
[ -d "$cgroot" ] || { model_say "no cgroup v1 memory controller at $cgroot; skipping"; exit 0; }
cg=$cgroot/colibri-prefetch-bench
cleanup() { [ -d "$cg" ] && { cat "$cg/cgroup.procs" 2>/dev/null | while read -r p; do echo "$p" > "$cgroot/cgroup.procs"; done; rmdir "$cg"; } 2>/dev/null || true; }
trap cleanup EXIT INT TERM

ctr=$(prepare_olmoe "$layers" int4)
mkdir -p "$work" "$results"
runs="$work/runs.txt"
: > "$runs"
for cap in $caps; do
  lim=${cap%%:*}; ram=${cap#*:}
  mkdir -p "$cg"
  echo "$lim" > "$cg/memory.limit_in_bytes"
  for r in $(seq "$repeat"); do
    for v in on off ${old:+old}; do
      bin=$colibri; extra=""
      [ "$v" = off ] && extra="--no-prefetch"
      [ "$v" = old ] && bin=$old
      rm -f "$ctr/usage.json"
      sync; echo 3 > /proc/sys/vm/drop_caches
      js="$work/$lim-$v-$r.json"
      sh -c "echo \$\$ > $cg/cgroup.procs; exec $bin run --model $ctr --tokens 1000 -n $tokens --temp 0 --ram $ram \
             --draft 0 $extra --stats-json $js >/dev/null 2>$work/last.err" ||
        { model_say "run failed: $(tail -1 "$work/last.err")"; continue; }
      echo "$lim $ram $v $r $js" >> "$runs"
      model_say "$lim $v #$r done"
    done
  done
  cleanup
done

out="$results/prefetch-$date.md"
"$py" - "$ctr" "$runs" "$tokens" "$repeat" > "$out" <<'EOF'
import json, statistics, sys
ctr, runs, tokens, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
man = json.load(open(ctr + "/manifest.json"))
rec = max(l["record_bytes"] for l in man["experts"]["layers"])
rows = {}
for line in open(runs):
    lim, ram, v, r, js = line.split()
    j = json.load(open(js))
    needed = (j["expert_misses"] + j.get("prefetch_reads_used", 0)) * rec
    rows.setdefault((lim, ram, v), []).append(dict(
        tok=j["decode_tok_s"], gb=j["bytes_read"] / 1e9, per_needed=j["bytes_read"] / max(needed, 1),
        per_missed=j["bytes_read"] / max(j["expert_misses"] * rec, 1), hit=j["hit_rate"],
        issued=j.get("prefetch_issued_share"), prec=j.get("prefetch_precision")))
print("# Prefetch against its cost\n")
print("`bench/prefetch.sh` on %s (%d MoE layers, records of %d bytes), %d greedy tokens, %d repeat(s), "
      "medians. *needed*: misses + used prefetches, in records.\n" % (ctr, len(man["experts"]["layers"]), rec,
                                                                      tokens, repeat))
print("| cap, --ram | prefetch | tok/s | GB read | read / needed | read / missed | hit rate | precision | predictions read |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (lim, ram, v), xs in rows.items():
    m = lambda k: statistics.median(x[k] for x in xs)
    ev = xs[0]["issued"]
    print("| %s, %s | %s | %.2f | %.2f | %.2f | %.2f | %.0f%% | %s | %s |" % (
        lim, ram, v, m("tok"), m("gb"), m("per_needed"), m("per_missed"), 100 * m("hit"),
        "%.2f" % xs[0]["prec"] if xs[0]["prec"] else "-", "%.0f%%" % (100 * ev) if ev is not None else "-"))
EOF
model_say "results: $out"
cat "$out"
