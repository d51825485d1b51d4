#!/bin/bash
# Learned pinning vs LRU: the same workload run again and again.
#
#   bench/pinning.sh
#
# The model: the OLMoE-1B-7B shape cut to BENCH_PIN_LAYERS layers, int4
# (bench/model_lib.sh; skewed, token-dependent routing). The workload: a
# fixed set of BENCH_PIN_PROMPTS prompts of 8 token ids each (seeded), each
# decoded greedily for BENCH_PIN_TOKENS tokens, one colibri process per
# prompt, at a RAM budget whose expert cache holds BENCH_PIN_CACHE percent
# of all experts. A "run" is one pass over the prompts; BENCH_PIN_RUNS runs
# per configuration:
#   lru   COLIBRI_EVICT=lru, --no-pin        (the baseline)
#   freq  default frequency-aware eviction, --no-pin
#   pin   default eviction and learned pinning (usage.json accumulates over
#         the runs; deleted before the first)
#   repin as pin, plus --repin 8 (swaps of the pinned set during a run)
# Each configuration has its own model folder (symbolic links to the
# container's files), so its usage.json is its own. Runs are interleaved
# (run 1 of every configuration, then run 2, ...) so that disk and CPU drift
# hits all of them alike. Expert reads are O_DIRECT: the page cache holds
# only resident.bin, the same for every configuration.
# bench/pinning_report.py writes bench/results/pinning-<date>.md and .json.
#
# Environment (defaults in brackets):
#   COLIBRI [./colibri]  BENCH_RESULTS [bench/results]  BENCH_DIR [bench/work]
#   BENCH_PIN_LAYERS [12]  BENCH_PIN_QUANT [int4]  BENCH_PIN_PROMPTS [4]
#   BENCH_PIN_TOKENS [64]  BENCH_PIN_RUNS [5]      BENCH_PIN_CACHE [30]
#   BENCH_PIN_CONFIGS [lru,freq,pin,repin]  BENCH_PIN_THREADS [0: default]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init pinning
layers=${BENCH_PIN_LAYERS:-12}
quant=${BENCH_PIN_QUANT:-int4}
n_prompts=${BENCH_PIN_PROMPTS:-4}
tokens=${BENCH_PIN_TOKENS:-64}
n_runs=${BENCH_PIN_RUNS:-5}
cache=${BENCH_PIN_CACHE:-30}
configs=${BENCH_PIN_CONFIGS:-lru,freq,pin,repin}
threads=${BENCH_PIN_THREADS:-0}

say() { echo "pinning: $*" >&2; }
[ -x "$colibri" ] || { say "$colibri is missing: run make"; exit 1; }

src=$(prepare_olmoe "$layers" "$quant")
runs=$work/runs-$date
rm -rf "$runs"; mkdir -p "$runs"

# The prompts: n_prompts x 8 token ids, fixed by the seed.
prompts=$($py - "$src" "$n_prompts" <<'EOF'
import json, os, sys
import numpy as np
cfg = json.load(open(os.path.join(sys.argv[1], "config.json")))
rng = np.random.default_rng(1234)
for _ in range(int(sys.argv[2])):
    print(",".join(str(int(x)) for x in rng.integers(2, cfg["vocab_size"] - 1, 8)))
EOF
)
ram=$(ram_for_cache "$src" "$cache" $((8 + tokens + 17)))  # context: prompt, tokens, 17
say "model $src, --ram $ram (expert cache about $cache% of the experts)"

IFS=, read -r -a config_list <<< "$configs"
for c in "${config_list[@]}"; do
  d=$work/model-$c
  rm -rf "$d"; mkdir -p "$d"
  for f in "$src"/*; do
    case $(basename "$f") in usage.json) ;; *) ln -s "$f" "$d/" ;; esac
  done
done

one() { # config run prompt_index prompt
  c=$1; r=$2; i=$3; p=$4
  tag=$c-r$r-p$i
  set -- "$colibri" run --model "$work/model-$c" --tokens "$p" -n "$tokens" --temp 0 --ram "$ram" \
      --stats-json "$runs/$tag.stats.json"
  [ "$threads" != 0 ] && set -- "$@" --threads "$threads"
  case $c in
    lru) set -- env COLIBRI_EVICT=lru "$@" --no-pin ;;
    freq) set -- "$@" --no-pin ;;
    repin) set -- "$@" --repin 8 ;;
  esac
  $py "$here/sampled_run.py" --out "$runs/$tag.json" --label "$tag" -- "$@" || say "run $tag failed"
}

for r in $(seq 1 "$n_runs"); do
  for c in "${config_list[@]}"; do
    say "run $r, $c"
    i=0
    while read -r p; do
      i=$((i + 1))
      one "$c" "$r" "$i" "$p"
    done <<< "$prompts"
    [ -f "$work/model-$c/usage.json" ] && cp "$work/model-$c/usage.json" "$runs/$c-r$r.usage.json"
  done
done

$py - "$runs/info.json" <<EOF
import json, sys
json.dump({"date": "$(date -Iseconds)", "colibri_rev": "$(colibri_rev)", "colibri": "$colibri",
           "host": "$(uname -srm)", "cpus": $(nproc), "container": "$src",
           "provenance": open("$src/bench-provenance.txt").read(), "ram": "$ram", "cache_pct": $cache,
           "prompts": """$prompts""".split(), "tokens": $tokens, "runs": $n_runs,
           "configs": "$configs".split(","),
           "experts_total": $($py -c 'import json,sys; e=json.load(open(sys.argv[1]))["experts"]; print(len(e["layers"]) * e["n_experts"])' "$src/manifest.json"),
           "env": "BENCH_PIN_LAYERS=$layers BENCH_PIN_PROMPTS=$n_prompts BENCH_PIN_TOKENS=$tokens BENCH_PIN_RUNS=$n_runs BENCH_PIN_CACHE=$cache BENCH_PIN_CONFIGS=$configs"},
          open(sys.argv[1], "w"), indent=1)
EOF
$py "$here/pinning_report.py" "$runs" --json "$results/pinning-$date.json" --out "$results/pinning-$date.md"
say "results: $results/pinning-$date.md"
