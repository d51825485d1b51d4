#!/bin/sh
# Decode benchmark of the gpt-oss-120B shape: MXFP4 experts streamed from
# disk, measured against fio on the same files right before each run, as
# bench/decode.sh measures the other shapes (the same decode_runs.py and
# report.py).
#
#   bench/gpt_oss.sh           (root for drop_caches and cgroups)
#
# Steps, each skipped when its output exists:
#   1. generate openai/gpt-oss-120b's shape cut to BENCH_GPTOSS_LAYERS layers
#      (tools/gen_model.py --shape gpt-oss-120b --layers N: the released
#      layout, MXFP4 experts as U8 blocks and scales, everything else BF16,
#      random weights with skewed routing);
#   2. convert it with the normal converter (colibri convert --quant mxfp4:
#      the experts' codes and scales copied as they are, dense weights at the
#      default int8), then delete the source (BENCH_KEEP_SOURCE=1 keeps it);
#   3. bench/decode_runs.py: a fio depth sweep, then cold and warm decodes at
#      the budgets, then decodes inside a cgroup v1 memory group capped far
#      below the container (O_DIRECT and buffered);
#   4. bench/report.py: bench/results/decode-gpt-oss-120b-<N>l-mxfp4-<date>.md
#      next to the raw JSON, with the exact commands.
#
# Disk: the MXFP4 source and the mxfp4 container are the same size, about
# 1.70 GB of experts per layer (128 records of 12.6 MiB) plus 2.3 GB of
# embed_tokens and lm_head in the source (1.8 GB resident in the container:
# the embedding stays bf16, lm_head int8). Both exist at once during the
# conversion: about 3.5 GB per layer plus 4.3 GB; the script asks for
# 3.5 N + 9 GB free (37 GB at the default 8 layers) and keeps the 15.6 GB
# container in bench/work/gpt-oss/ for reruns (delete it to regenerate).
# Generation and conversion take about 3 minutes at 8 layers on this host
# (85 s and 110 s), the runs about 6 minutes per repeat.
#
# Environment (defaults in brackets):
#   BENCH_GPTOSS_LAYERS [8]        layers kept (1 to 36)
#   BENCH_GPTOSS_BUDGETS [min,25]  --ram budgets: min, or percent of the expert bytes
#   BENCH_GPTOSS_CGROUP_LIMIT [3G] memory cap of the larger-than-RAM runs ('' for none)
#   BENCH_GPTOSS_CGROUP_RAM [2560M] --ram of the capped runs
#   BENCH_TOKENS [32]  BENCH_MODES [cold,warm]  BENCH_REPEAT [1]  BENCH_FIO_SECONDS [5]
#   BENCH_IO_DEPTH [32]  BENCH_THREADS [0: physical cores]  BENCH_KEEP_SOURCE [0]
#   BENCH_DIR [bench/work] (models in BENCH_DIR/gpt-oss)  BENCH_RESULTS [bench/results]
#   COLIBRI [./colibri]
# A quick check of the whole pipeline (about 3 minutes, 8 GB of disk):
#   BENCH_GPTOSS_LAYERS=1 BENCH_TOKENS=4 BENCH_FIO_SECONDS=1 BENCH_RESULTS=/tmp/r bench/gpt_oss.sh
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init gpt-oss
layers=${BENCH_GPTOSS_LAYERS:-8}
budgets=${BENCH_GPTOSS_BUDGETS:-min,25}
cg_limit=${BENCH_GPTOSS_CGROUP_LIMIT-3G}
cg_ram=${BENCH_GPTOSS_CGROUP_RAM:-2560M}
tokens=${BENCH_TOKENS:-32}
modes=${BENCH_MODES:-cold,warm}
repeat=${BENCH_REPEAT:-1}
fio_s=${BENCH_FIO_SECONDS:-5}
depth=${BENCH_IO_DEPTH:-32}
threads=${BENCH_THREADS:-0}
keep_src=${BENCH_KEEP_SOURCE:-0}

say() { echo "bench: $*" >&2; }

[ -x "$colibri" ] || { say "$colibri is missing: run make"; exit 1; }
command -v fio >/dev/null || { say "fio is missing (apt-get install fio)"; exit 1; }
[ "$(id -u)" = 0 ] || say "not root: cold runs keep the page cache and no cgroup runs"
mkdir -p "$work" "$results"

name=gpt-oss-120b-${layers}l-mxfp4
src=$work/gpt-oss-120b-${layers}l-src
ctr=$work/$name

if [ -f "$ctr/manifest.json" ] && [ -f "$ctr/bench-provenance.txt" ]; then
  say "$ctr exists: skipping generation and conversion"
else
  gen="$py $root/tools/gen_model.py --shape gpt-oss-120b --layers $layers --out $src"
  if [ ! -f "$src/.complete" ]; then
    need=$((layers * 7 / 2 + 9))
    have=$(df -Pk "$work" | awk 'NR == 2 { printf "%d", $4 / 1e6 }')
    if [ "$have" -lt "$need" ]; then
      say "gpt-oss-120b, $layers layers: needs about $need GB free in $work for source and container, $have GB free"
      exit 1
    fi
    rm -rf "$src"
    say "generating: $gen"
    $gen || { say "generation failed"; exit 1; }
    touch "$src/.complete"
  fi
  conv="$colibri convert $src $ctr --quant mxfp4 --force"
  say "converting: $conv"
  $conv >&2 || { say "conversion failed"; exit 1; }
  { echo "date: $(date -Iseconds)"; echo "generate: $gen"; echo "convert: $conv"
    echo "colibri: $(colibri_rev)"
    for f in gen_model.py arch_gpt_oss.py; do
      echo "$f sha256: $(sha256sum "$root/tools/$f" | cut -d' ' -f1)"
    done; } > "$ctr/bench-provenance.txt"
  if [ "$keep_src" != 1 ]; then
    say "deleting the source $src"
    rm -rf "$src"
  fi
fi

env_line="BENCH_GPTOSS_LAYERS=$layers BENCH_TOKENS=$tokens BENCH_GPTOSS_BUDGETS=$budgets"
env_line="$env_line BENCH_MODES=$modes BENCH_REPEAT=$repeat BENCH_FIO_SECONDS=$fio_s"
env_line="$env_line BENCH_IO_DEPTH=$depth BENCH_GPTOSS_CGROUP_LIMIT=$cg_limit"
env_line="$env_line BENCH_GPTOSS_CGROUP_RAM=$cg_ram"
decode_report "$name" "$ctr" bench/gpt_oss.sh "$env_line"
