#!/bin/bash
# DSA sparse attention vs dense MLA: decode speed as the context grows.
#
#   bench/dsa.sh
#
# One DeepSeek-V3.2 (deepseek_v32) checkpoint with random weights and a
# mid-size attention (bench/gen_deepseek_dsa.py: 16 heads, kv_lora_rank 512,
# qk_nope/rope/v 128/64/128, an indexer of 16 heads of 128 dims keeping
# index_topk = BENCH_DSA_TOPK positions; 2 layers, 8 tiny experts), converted
# with colibri convert --quant int4 into bench/work/dsa/. Two model folders
# share its weights (symbolic links):
#   sparse  the container as converted: the indexer keeps index_topk positions
#   dense   config.json with index_topk = 1048576 (>= any --ctx): MLA attends
#           to every position. The indexer's projections still run and fill
#           its key cache; its scoring and top-k do not (engine/forward/dsa_indexer.c
#           scores only when some position would be dropped)
# For each context C (--ctx C) a prompt of C - N - 17 token ids (colibri run
# reserves 17 positions to verify drafts) is followed by N greedily decoded
# tokens (--temp 0 --no-pin --stats-json), so the last decode steps see
# about C - 17 positions. The ids are prefixes of one seeded sequence. Runs
# take turns: each repeat visits every context, sparse and dense back to
# back, the first of the pair alternating between repeats, so that a slow
# patch of this shared machine hits both alike. The experts (8 records of
# 432 KiB) stay cached after their first read: decode is bound by the CPU.
# bench/dsa_report.py writes bench/results/dsa-<date>.md and .json: decode
# tok/s sparse vs dense and their ratio (median over repeats of each turn's
# ratio), the time per token the context adds, the attention and indexer
# arithmetic per token from the shape, and whether greedy output agrees.
#
# Runtime on the 2-vCPU VM this was written on: about 9 minutes with the
# defaults, nearly all of it prefill (about 3.5 ms per prompt token, and the
# dense prefill's O(T^2) attention on top: about 75 s for one 8192 prompt).
# BENCH_DSA_CONTEXTS=256,512,1024,2048,4096 takes about 4 minutes.
#
# Environment (defaults in brackets):
#   COLIBRI [./colibri, else build/colibri]  BENCH_RESULTS [bench/results]
#   BENCH_DIR [bench/work]  BENCH_DSA_CONTEXTS [256,512,1024,2048,4096,8192]
#   BENCH_DSA_TOPK [256]  BENCH_DSA_TOKENS [128]  BENCH_DSA_REPEATS [3]
#   BENCH_DSA_THREADS [0: default]  BENCH_DSA_SEED [7: prompt ids]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init dsa build/colibri
contexts=${BENCH_DSA_CONTEXTS:-256,512,1024,2048,4096,8192}
topk=${BENCH_DSA_TOPK:-256}
tokens=${BENCH_DSA_TOKENS:-128}
repeats=${BENCH_DSA_REPEATS:-3}
threads=${BENCH_DSA_THREADS:-0}
seed=${BENCH_DSA_SEED:-7}

say() { echo "dsa: $*" >&2; }
[ -x "$colibri" ] || { say "$colibri is missing: run make build/colibri"; exit 1; }
IFS=, read -r -a ctx_list <<< "$contexts"
for c in "${ctx_list[@]}"; do
  [ "$c" -gt $((tokens + 17)) ] || { say "context $c leaves no prompt for $tokens tokens"; exit 1; }
done
mkdir -p "$work" "$results"
runs=$work/runs-$date
rm -rf "$runs"; mkdir -p "$runs"
t_start=$(date +%s)

# The container, generated and converted once per generator command (the
# source is deleted afterwards: it takes a second to write again).
rel() { case $1 in "$root"/*) echo "${1#"$root"/}" ;; *) echo "$1" ;; esac; }
gen="$py bench/gen_deepseek_dsa.py --seed 1 --index-topk $topk --out $(rel "$work/hf")"
gen_sum=$(sha256sum "$here/gen_deepseek_dsa.py" "$root/tools/arch_deepseek.py" "$root/tools/gen_model.py" | sha256sum | cut -c1-16)
sparse=$work/sparse-top$topk
if [ ! -f "$sparse/manifest.json" ] || [ "$(head -1 "$sparse/bench-provenance.txt" 2>/dev/null)" != "$gen $gen_sum" ]; then
  rm -rf "$work/hf" "$sparse"
  say "generating: $gen"
  (cd "$root" && $py bench/gen_deepseek_dsa.py --seed 1 --index-topk "$topk" --out "$work/hf" >&2)
  conv="$colibri convert $work/hf $sparse --quant int4 --force"
  say "converting: $conv"
  $conv >&2
  { echo "$gen $gen_sum"; echo "convert: colibri convert $work/hf $sparse --quant int4"; } > "$sparse/bench-provenance.txt"
  rm -rf "$work/hf"
fi

# The dense twin: the same files, index_topk raised past every context.
dense=$work/dense
cleanup() { rm -rf "$dense"; }
trap cleanup EXIT
rm -rf "$dense"; mkdir -p "$dense"
for f in "$sparse"/*; do
  [ "$(basename "$f")" = config.json ] || [ "$(basename "$f")" = usage.json ] || ln -s "$f" "$dense/"
done
$py - "$sparse/config.json" "$dense/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["index_topk"] = 1 << 20
json.dump(c, open(sys.argv[2], "w"), indent=2, sort_keys=True)
EOF
cp "$sparse/config.json" "$runs/config.json"

# Prompt ids: one seeded sequence in [2, vocab) (0 and 1 are BOS and EOS);
# context C takes its first C - N - 17.
max_ctx=$(printf '%s\n' "${ctx_list[@]}" | sort -n | tail -1)
$py - "$runs/ids.txt" "$seed" "$max_ctx" "$sparse/config.json" <<'EOF'
import json, random, sys
vocab = json.load(open(sys.argv[4]))["vocab_size"]
r = random.Random(int(sys.argv[2]))
open(sys.argv[1], "w").write(",".join(str(r.randrange(2, vocab)) for _ in range(int(sys.argv[3]))))
EOF

n_runs=0
for r in $(seq 1 "$repeats"); do
  order="sparse dense"
  [ $((r % 2)) = 0 ] && order="dense sparse"
  for c in "${ctx_list[@]}"; do
    p=$((c - tokens - 17))
    ids=$(cut -d, -f1-"$p" "$runs/ids.txt")
    for kind in $order; do
      tag=$kind-c$c-r$r
      dir=$sparse
      [ "$kind" = dense ] && dir=$dense
      set -- "$colibri" run --model "$dir" --tokens "$ids" -n "$tokens" --temp 0 --ctx "$c" \
          --no-pin --stats-json "$runs/$tag.stats.json"
      [ "$threads" != 0 ] && set -- "$@" --threads "$threads"
      rm -f "$dir/usage.json"
      $py "$here/sampled_run.py" --out "$runs/$tag.json" --label "$tag" -- "$@" || say "run $tag failed"
      n_runs=$((n_runs + 1))
    done
    say "repeat $r, context $c: done ($(( $(date +%s) - t_start )) s)"
  done
done

$py - "$runs/info.json" <<EOF
import json, sys
json.dump({"date": "$(date -Iseconds)", "colibri_rev": "$(colibri_rev)", "colibri": "$colibri",
           "host": "$(uname -srm)", "cpus": $(nproc),
           "cpu": "$(lscpu | sed -n 's/^Model name: *//p' | head -1)",
           "caches": "$(lscpu | sed -n 's/^\(L[23]\) cache: *\(.*\)/\1 \2/p' | paste -sd, -)",
           "generate": "$gen", "convert": "colibri convert $(rel "$work/hf") $(rel "$sparse") --quant int4",
           "contexts": [int(x) for x in "$contexts".split(",")], "index_topk": $topk,
           "tokens": $tokens, "repeats": $repeats, "threads": $threads, "seed": $seed,
           "runs": $n_runs, "runtime_s": $(( $(date +%s) - t_start )),
           "command": "bench/dsa.sh",
           "env": "BENCH_DSA_CONTEXTS=$contexts BENCH_DSA_TOPK=$topk BENCH_DSA_TOKENS=$tokens BENCH_DSA_REPEATS=$repeats BENCH_DSA_THREADS=$threads BENCH_DSA_SEED=$seed"},
          open(sys.argv[1], "w"), indent=1)
EOF
$py "$here/dsa_report.py" "$runs" --json "$results/dsa-$date.json" --out "$results/dsa-$date.md"
say "results: $results/dsa-$date.md ($(( $(date +%s) - t_start )) s)"
