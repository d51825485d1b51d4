#!/bin/bash
# Drafting trade-off: what MTP drafting (--draft N) costs in expert reads,
# and what it gains when the drafts are accepted.
#
#   bench/drafting.sh
#
# Models (DeepSeek-V3 with one MTP layer, random weights), each converted
# with colibri convert --quant int4 into bench/work/drafting/:
#   tiny-random  tools/gen_model.py --arch deepseek_v3 --seed 1 (the test
#                fixture: hidden 128, 16 experts, 16 KiB records)
#   mid-random   bench/gen_deepseek_mid.py --seed 1 (hidden 1024, 64 experts
#                of width 512, top-8, 3 MoE layers + the MTP layer)
#   *-agree      the same rewritten by bench/mtp_agree.py --alpha 0.05 so
#                that the MTP head predicts what the model will (the random
#                head is never accepted)
# For each model, RAM budget (min: every expert streamed, one step's frames;
# full: every expert fits) and --draft (0, 1, 2, 4, auto), BENCH_DRAFT_PROMPTS
# prompts are decoded greedily for BENCH_DRAFT_TOKENS tokens (one process
# each, --stats-json), BENCH_DRAFT_REPEATS times. The runs of one prompt and
# repeat take every --draft in turn, so that a slow patch of a shared machine
# hits them alike. BENCH_DRAFT_BEFORE names a second colibri binary (an
# older build) whose --draft auto runs as one more row, "before", in the
# same turn. Expert reads are O_DIRECT from the container's disk.
# bench/drafting_report.py writes bench/results/drafting-<date>.md and .json.
#
# Environment (defaults in brackets):
#   COLIBRI [./colibri]  BENCH_RESULTS [bench/results]  BENCH_DIR [bench/work]
#   BENCH_DRAFT_MODELS [tiny-random,tiny-agree,mid-random,mid-agree]
#   BENCH_DRAFT_DRAFTS [0,1,2,4,auto]   BENCH_DRAFT_BUDGETS [min,full]
#   BENCH_DRAFT_TOKENS [128]  BENCH_DRAFT_PROMPTS ["2,3,4 100,200,300 400,401,402"]
#   BENCH_DRAFT_ALPHA [0.05]  BENCH_DRAFT_THREADS [0: default]
#   BENCH_DRAFT_REPEATS [1]  BENCH_DRAFT_BEFORE [none]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init drafting
models=${BENCH_DRAFT_MODELS:-tiny-random,tiny-agree,mid-random,mid-agree}
drafts=${BENCH_DRAFT_DRAFTS:-0,1,2,4,auto}
budgets=${BENCH_DRAFT_BUDGETS:-min,full}
tokens=${BENCH_DRAFT_TOKENS:-128}
prompts=${BENCH_DRAFT_PROMPTS:-2,3,4 100,200,300 400,401,402}
alpha=${BENCH_DRAFT_ALPHA:-0.05}
threads=${BENCH_DRAFT_THREADS:-0}
repeats=${BENCH_DRAFT_REPEATS:-1}
before=${BENCH_DRAFT_BEFORE:-}

say() { echo "drafting: $*" >&2; }
[ -x "$colibri" ] || { say "$colibri is missing: run make"; exit 1; }
if [ -n "$before" ]; then
  [ -x "$before" ] || { say "BENCH_DRAFT_BEFORE=$before is not executable"; exit 1; }
  drafts="$drafts,before"
fi
mkdir -p "$work" "$results"
runs=$work/runs-$date
rm -rf "$runs"; mkdir -p "$runs"
: > "$runs/models.txt"

# model NAME -> container folder (generated and converted once).
model() {
  name=$1; size=${name%%-*}; kind=${name#*-}
  hf=$work/hf-$size-random ctr=$work/$name-int4
  if [ ! -f "$hf/.complete" ]; then
    rm -rf "$hf"
    if [ "$size" = tiny ]; then
      gen="$py $root/tools/gen_model.py --arch deepseek_v3 --seed 1 --out $hf"
    else
      gen="$py $here/gen_deepseek_mid.py --seed 1 --out $hf"
    fi
    say "generating: $gen"
    $gen >&2
    echo "$gen" > "$hf/.command"; touch "$hf/.complete"
  fi
  src=$hf
  if [ "$kind" = agree ]; then
    src=$work/hf-$size-agree
    if [ ! -f "$src/.complete" ] || [ "$(cat "$src/.alpha")" != "$alpha" ]; then
      rm -rf "$src"
      $py "$here/mtp_agree.py" --src "$hf" --out "$src" --alpha "$alpha" >&2
      echo "$alpha" > "$src/.alpha"; touch "$src/.complete"
      rm -rf "$ctr"
    fi
  fi
  if [ ! -f "$ctr/manifest.json" ]; then
    "$colibri" convert "$src" "$ctr" --quant int4 --force >&2
  fi
  { echo "$name: $(cat "$hf/.command")"
    [ "$kind" = agree ] && echo "  then: $py bench/mtp_agree.py --src $hf --out $src --alpha $alpha"
    echo "  then: colibri convert $src $ctr --quant int4"
    $py - "$ctr" <<'PYEOF'
import json, os, sys
m = json.load(open(os.path.join(sys.argv[1], "manifest.json")))
e = m["experts"]
recs = sorted({l["record_bytes"] for l in e["layers"]})
total = sum(l["record_bytes"] for l in e["layers"]) * e["n_experts"]
frame = max(recs)
print("  %d expert layers x %d experts = %d experts, records of %s bytes (the last layer is the MTP "
      "layer), %.1f MB in all; frames are %d bytes, so caching every expert takes %d frames, and "
      "the experts' total bytes make %d" % (len(e["layers"]), e["n_experts"], len(e["layers"]) * e["n_experts"],
      " / ".join(str(r) for r in recs), total / 1e6, frame, len(e["layers"]) * e["n_experts"], total // frame))
PYEOF
  } >> "$runs/models.txt"
  echo "$ctr"
}

# --ram for "full": resident weights, every expert in a frame, KV and scratch.
ram_full() {
  $py - "$1" <<'EOF'
import json, os, sys
m = json.load(open(os.path.join(sys.argv[1], "manifest.json")))
e = m["experts"]
frame = max(l["record_bytes"] for l in e["layers"])
total = m["resident"]["bytes"] + frame * e["n_experts"] * len(e["layers"]) + (160 << 20)
print("%dM" % -(-total // (1 << 20)))
EOF
}

IFS=, read -r -a model_list <<< "$models"
IFS=, read -r -a draft_list <<< "$drafts"
IFS=, read -r -a budget_list <<< "$budgets"
for name in "${model_list[@]}"; do
  ctr=$(model "$name")
  for b in "${budget_list[@]}"; do
    ram=min
    [ "$b" = full ] && ram=$(ram_full "$ctr")
    for r in $(seq 1 "$repeats"); do
      i=0
      for p in $prompts; do
        i=$((i + 1))
        for d in "${draft_list[@]}"; do
          tag=$name-$b-d$d-p$i-r$r
          bin=$colibri flag=$d
          [ "$d" = before ] && bin=$before flag=auto
          set -- "$bin" run --model "$ctr" --tokens "$p" -n "$tokens" --temp 0 --ram "$ram" \
              --draft "$flag" --no-pin --stats-json "$runs/$tag.stats.json"
          [ "$threads" != 0 ] && set -- "$@" --threads "$threads"
          rm -f "$ctr/usage.json"
          $py "$here/sampled_run.py" --out "$runs/$tag.json" --label "$tag" -- "$@" || say "run $tag failed"
        done
      done
    done
    say "$name, --ram $ram: done"
  done
done

$py - "$runs/info.json" <<EOF
import json, sys
json.dump({"date": "$(date -Iseconds)", "colibri_rev": "$(colibri_rev)", "colibri": "$colibri",
           "host": "$(uname -srm)", "cpus": $(nproc), "models": open("$runs/models.txt").read(),
           "tokens": $tokens, "prompts": "$prompts".split(), "alpha": $alpha, "repeats": $repeats,
           "before": "$before",
           "env": "BENCH_DRAFT_MODELS=$models BENCH_DRAFT_DRAFTS=${BENCH_DRAFT_DRAFTS:-0,1,2,4,auto} BENCH_DRAFT_BUDGETS=$budgets BENCH_DRAFT_TOKENS=$tokens BENCH_DRAFT_ALPHA=$alpha BENCH_DRAFT_REPEATS=$repeats BENCH_DRAFT_BEFORE=$before"},
          open(sys.argv[1], "w"), indent=1)
EOF
$py "$here/drafting_report.py" "$runs" --json "$results/drafting-$date.json" --out "$results/drafting-$date.md"
say "results: $results/drafting-$date.md"
