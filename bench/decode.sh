#!/bin/sh
# Decode benchmark: a real-shape MoE model whose experts stream from disk,
# measured against fio on the same files right before each run.
#
#   bench/decode.sh            (make bench runs it; root for drop_caches and cgroups)
#
# Steps, each skipped when its output exists:
#   1. generate the OLMoE-1B-7B-shape checkpoint (tools/gen_model.py --shape,
#      random weights with skewed routing) and measure its routing skew
#      (bench/route_stats.py, into bench/results/);
#   2. convert it with the normal converter (--quant int4), then delete the
#      source (BENCH_KEEP_SOURCE=1 keeps it);
#   3. bench/decode_runs.py: a fio depth sweep, then cold and warm decodes at
#      several --ram budgets, then decodes inside a cgroup v1 memory group
#      capped well below the container size (O_DIRECT and buffered);
#   4. bench/report.py: bench/results/decode-<model>-<date>.md next to the raw
#      JSON, with the exact commands.
# With BENCH_QWEN=1 it also does the Qwen3-30B-A3B shape at int8 (about 31 GB,
# larger than the machine's RAM) when the disk has room for the fp8 source and
# the container with a margin. With BENCH_QWEN35=1 it does the Qwen3.5-35B-A3B
# shape (Gated DeltaNet hybrid, a 248k vocabulary) at int4, cut to
# BENCH_QWEN35_LAYERS layers (8: 3.6 GB of experts beside 1.6 GB resident),
# capped at BENCH_QWEN35_CGROUP_LIMIT (3G) with --ram BENCH_QWEN35_CGROUP_RAM
# (2560M); BENCH_OLMOE=0 skips the OLMoE model.
#
# Environment (defaults in brackets):
#   BENCH_DIR [bench/work]   models and scratch     COLIBRI [./colibri]
#   BENCH_TOKENS [32]        tokens per decode      BENCH_BUDGETS [min,25,50,100]
#   BENCH_MODES [cold,warm]  BENCH_REPEAT [1]       BENCH_FIO_SECONDS [5]
#   BENCH_IO_DEPTH [32]      BENCH_THREADS [0: physical cores]
#   BENCH_CGROUP_LIMIT [2G]  memory cap of the larger-than-RAM runs ('' for none)
#   BENCH_CGROUP_RAM [1536M] --ram of the capped runs
#   BENCH_SOURCE_DTYPE [bf16] generated weights (fp8 halves the source)
#   BENCH_KEEP_SOURCE [0]    BENCH_QWEN [0]         BENCH_QWEN_BUDGETS [min,25,50]
#   BENCH_RESULTS [bench/results]
#   BENCH_LAYERS ['']        keep only the first N layers (a quick smoke test)
#   BENCH_OLMOE [1]          BENCH_QWEN35 [0]       BENCH_QWEN35_LAYERS [8]
#   BENCH_QWEN35_BUDGETS [min,25]  BENCH_QWEN35_CGROUP_LIMIT [3G]  BENCH_QWEN35_CGROUP_RAM [2560M]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
py=/usr/bin/python3
work=${BENCH_DIR:-$root/bench/work}
colibri=${COLIBRI:-$root/colibri}
results=${BENCH_RESULTS:-$root/bench/results}
tokens=${BENCH_TOKENS:-32}
budgets=${BENCH_BUDGETS:-min,25,50,100}
modes=${BENCH_MODES:-cold,warm}
repeat=${BENCH_REPEAT:-1}
fio_s=${BENCH_FIO_SECONDS:-5}
depth=${BENCH_IO_DEPTH:-32}
threads=${BENCH_THREADS:-0}
cg_limit=${BENCH_CGROUP_LIMIT-2G}
cg_ram=${BENCH_CGROUP_RAM:-1536M}
src_dtype=${BENCH_SOURCE_DTYPE:-bf16}
keep_src=${BENCH_KEEP_SOURCE:-0}
layers=${BENCH_LAYERS:-}
date=$(date +%Y-%m-%d)

say() { echo "bench: $*" >&2; }

[ -x "$colibri" ] || { say "$colibri is missing: run make"; exit 1; }
command -v fio >/dev/null || { say "fio is missing (apt-get install fio)"; exit 1; }
[ "$(id -u)" = 0 ] || say "not root: cold runs keep the page cache and no cgroup runs"
mkdir -p "$work" "$results"

free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1e6 }'; }

# prepare SHAPE QUANT NEED_GB: generates and converts once; prints the
# container folder.
prepare() {
  shape=$1; quant=$2; need=$3
  tag=$shape${layers:+-${layers}l}
  src="$work/$tag-$src_dtype"
  ctr="$work/$tag-$quant"
  if [ -f "$ctr/manifest.json" ] && [ -f "$ctr/bench-provenance.txt" ]; then
    say "$ctr exists: skipping generation and conversion"
    echo "$ctr"; return 0
  fi
  if [ ! -f "$src/.complete" ]; then
    have=$(free_gb "$work")
    if [ "$have" -lt "$need" ]; then
      say "$shape: needs about $need GB free in $work for source and container, $have GB free; skipping"
      return 1
    fi
    rm -rf "$src"
    gen="$py $root/tools/gen_model.py --shape $shape --weights-dtype $src_dtype --out $src"
    [ -n "$layers" ] && gen="$gen --layers $layers"
    say "generating: $gen"
    $gen || { say "generation failed"; return 1; }
    touch "$src/.complete"
    echo "$gen" > "$src/.command"
    if [ "${BENCH_ROUTE_STATS:-1}" = 1 ]; then
      say "routing statistics of $shape (a few minutes)"
      $py "$here/route_stats.py" --model "$src" --tokens 256 \
          --json "$work/route-stats-$tag.json" > "$work/route-stats-$tag.md.tmp" ||
        { say "route_stats failed"; return 1; }
      { echo "# Routing of the generated $tag checkpoint"; echo
        echo "\`$py bench/route_stats.py --model $src --tokens 256\` on \`$gen\`, $(date -Iseconds):"
        echo; cat "$work/route-stats-$tag.md.tmp"; } > "$results/route-stats-$tag.md"
      rm -f "$work/route-stats-$tag.md.tmp"
    fi
  fi
  conv="$colibri convert $src $ctr --quant $quant --force"
  say "converting: $conv"
  $conv >&2 || { say "conversion failed"; return 1; }
  { echo "date: $(date -Iseconds)"; echo "generate: $(cat "$src/.command")"; echo "convert: $conv"
    echo "gen_model.py sha256: $(sha256sum "$root/tools/gen_model.py" | cut -d' ' -f1)"; } \
    > "$ctr/bench-provenance.txt"
  if [ "$keep_src" != 1 ]; then
    say "deleting the source $src"
    rm -rf "$src"
  fi
  echo "$ctr"
}

# measure CONTAINER NAME BUDGETS [CGROUP_LIMIT]
measure() {
  ctr=$1; name=$2; b=$3; lim=${4:-}
  raw="$results/decode-$name-$date.json"
  set -- "$py" "$here/decode_runs.py" --model "$ctr" --out "$raw" --label "$name" \
      --colibri "$colibri" --tokens "$tokens" --budgets "$b" --modes "$modes" \
      --repeat "$repeat" --fio-seconds "$fio_s" --io-depth "$depth" --threads "$threads" \
      --scratch "$work"
  [ -n "$lim" ] && set -- "$@" --cgroup-limit "$lim" --cgroup-ram "$cg_ram"
  env_line="BENCH_TOKENS=$tokens BENCH_BUDGETS=$b BENCH_MODES=$modes BENCH_REPEAT=$repeat"
  env_line="$env_line BENCH_FIO_SECONDS=$fio_s BENCH_IO_DEPTH=$depth BENCH_CGROUP_LIMIT=$lim"
  "$@" --command "$env_line bench/decode.sh  ->  $*" || say "$name: some runs failed (see $raw)"
  "$py" "$here/report.py" "$raw" --out "$results/decode-$name-$date.md" \
      --title "colibri decode benchmark: $name"
  say "results: $results/decode-$name-$date.md"
}

# OLMoE-1B-7B: 13.8 GB of bf16 source (7.2 GB fp8) and a 4.3 GB container.
if [ "${BENCH_OLMOE:-1}" = 1 ]; then
  need=$([ "$src_dtype" = fp8 ] && echo 17 || echo 24)
  [ -n "$layers" ] && need=8
  ctr=$(prepare olmoe-1b-7b int4 "$need")
  measure "$ctr" "olmoe-1b-7b${layers:+-${layers}l}-int4" "$budgets" "$cg_limit"
fi

# Qwen3.5-35B-A3B cut to N layers: about 2 GB of bf16 source per layer plus
# 2 GB of embeddings; the int4 container 0.45 GB per layer plus 1.6 GB.
if [ "${BENCH_QWEN35:-0}" = 1 ]; then
  layers=${BENCH_QWEN35_LAYERS:-8}
  cg_ram=${BENCH_QWEN35_CGROUP_RAM:-2560M}
  BENCH_ROUTE_STATS=${BENCH_ROUTE_STATS:-0}
  if ctr=$(prepare qwen3.5-35b-a3b int4 $((layers * 3 + 8))); then
    measure "$ctr" "qwen3.5-35b-a3b-${layers}l-int4" "${BENCH_QWEN35_BUDGETS:-min,25}" \
        "${BENCH_QWEN35_CGROUP_LIMIT-3G}"
  fi
fi

# Qwen3-30B-A3B at int8: 31 GB container, larger than RAM; fp8 source 30 GB.
if [ "${BENCH_QWEN:-0}" = 1 ]; then
  src_dtype=fp8
  if ctr=$(prepare qwen3-30b-a3b int8 "$([ -n "$layers" ] && echo 12 || echo 75)"); then
    measure "$ctr" "qwen3-30b-a3b${layers:+-${layers}l}-int8" "${BENCH_QWEN_BUDGETS:-min,25,50}" ""
  fi
fi
