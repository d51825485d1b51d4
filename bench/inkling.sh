#!/bin/sh
# Decode benchmark of the Inkling-975B shape (thinkingmachines/Inkling, 66
# layers, 256 experts of width 3072, top-6 plus 2 shared), cut to a few
# layers, int4 experts streamed from disk, measured against fio on the same
# files right before each run, as bench/gpt_oss.sh measures gpt-oss (the same
# decode_runs.py and report.py).
#
#   bench/inkling.sh           (root for drop_caches and cgroups)
#
# Steps, each skipped when its output exists:
#   1. generate the shape cut to BENCH_INKLING_LAYERS layers
#      (tools/shape_inkling.py --layers N, called directly: the released
#      layout, model.llm.* names, nested inkling_mm_model config, BF16 with
#      F32 short convolutions, random weights with skewed routing; layer 0
#      dense as released, the others MoE);
#   2. convert it with the normal converter (colibri convert --quant int4:
#      int4 experts, dense int8), then delete the source
#      (BENCH_KEEP_SOURCE=1 keeps it);
#   3. bench/decode_runs.py: a fio depth sweep, then cold and warm decodes at
#      the budgets, then decodes inside a cgroup v1 memory group capped far
#      below the container (O_DIRECT and buffered);
#   4. bench/report.py: bench/results/decode-inkling-975b-<N>l-int4-<date>.md
#      next to the raw JSON, with the exact commands.
#
# Disk: a MoE layer is 29.4 GB of BF16 in the source (256 experts of 113 MB)
# and about 8 GB of int4 in the container, the dense layer 1.1 GB (0.6 GB at
# int8), embed + unembed 4.9 GB (the container keeps the bf16 embedding on
# disk, 2.5 GB, and an int8 lm_head, 1.2 GB). Both exist at once during the
# conversion: the script asks for 38 GB per MoE layer plus 9 GB free (47 GB
# at the default 2 layers) and keeps the container (about 12 GB) in
# bench/work/inkling/ for reruns (delete it to regenerate). On this host
# generation writes about 190 MB/s (3 minutes at 2 layers); old benchmark
# models that make room when needed: bench/work/ggufvsllama and
# bench/work/vsllama (regenerable by their scripts).
#
# Environment (defaults in brackets):
#   BENCH_INKLING_LAYERS [2]          layers kept (1 to 66; layer 0 is dense)
#   BENCH_INKLING_BUDGETS [min,25]    --ram budgets: min, or percent of the expert bytes
#   BENCH_INKLING_CGROUP_LIMIT [4G]   memory cap of the larger-than-RAM runs ('' for none)
#   BENCH_INKLING_CGROUP_RAM [3584M]  --ram of the capped runs
#   BENCH_TOKENS [32]  BENCH_MODES [cold,warm]  BENCH_REPEAT [1]  BENCH_FIO_SECONDS [5]
#   BENCH_IO_DEPTH [32]  BENCH_THREADS [0: physical cores]  BENCH_KEEP_SOURCE [0]
#   BENCH_DIR [bench/work] (models in BENCH_DIR/inkling)  BENCH_RESULTS [bench/results]
#   COLIBRI [./colibri]
# A quick check of generation and conversion alone (a 1-layer dense model,
# 6.1 GB, about a minute; no experts, so decode_runs.py has nothing to read):
#   /usr/bin/python3 tools/shape_inkling.py --layers 1 --out /tmp/ik1src &&
#   ./colibri convert /tmp/ik1src /tmp/ik1 --force
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init inkling
layers=${BENCH_INKLING_LAYERS:-2}
budgets=${BENCH_INKLING_BUDGETS:-min,25}
cg_limit=${BENCH_INKLING_CGROUP_LIMIT-4G}
cg_ram=${BENCH_INKLING_CGROUP_RAM:-3584M}
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
case $layers in
  ''|*[!0-9]*) say "BENCH_INKLING_LAYERS must be a number of layers, not '$layers'"; exit 1 ;;
esac
if [ "$layers" -lt 2 ]; then
  say "BENCH_INKLING_LAYERS=$layers keeps only the dense layer 0: no experts to stream (use 2 or more)"
  exit 1
fi
mkdir -p "$work" "$results"

name=inkling-975b-${layers}l-int4
src=$work/inkling-975b-${layers}l-src
ctr=$work/$name

if [ -f "$ctr/manifest.json" ] && [ -f "$ctr/bench-provenance.txt" ]; then
  say "$ctr exists: skipping generation and conversion"
else
  gen="$py $root/tools/shape_inkling.py --layers $layers --out $src"
  if [ ! -f "$src/.complete" ]; then
    need=$(( (layers - 1) * 38 + 9 ))
    have=$(df -Pk "$work" | awk 'NR == 2 { printf "%d", $4 / 1e6 }')
    if [ "$have" -lt "$need" ]; then
      say "inkling-975b, $layers layers: needs about $need GB free in $work for source and container, $have GB free"
      say "(old benchmark models that can go: $root/bench/work/ggufvsllama $root/bench/work/vsllama)"
      exit 1
    fi
    rm -rf "$src"
    say "generating: $gen"
    t0=$(date +%s)
    nice $gen || { say "generation failed"; exit 1; }
    say "generated in $(( $(date +%s) - t0 )) s: $(du -sh "$src" | cut -f1)"
  fi
  conv="$colibri convert $src $ctr --quant int4 --force"
  say "converting: $conv"
  t0=$(date +%s)
  $conv >&2 || { say "conversion failed"; exit 1; }
  say "converted in $(( $(date +%s) - t0 )) s: $(du -sh "$ctr" | cut -f1)"
  { echo "date: $(date -Iseconds)"; echo "generate: $gen"; echo "convert: $conv"
    echo "colibri: $(colibri_rev)"
    for f in shape_inkling.py gen_model.py safetensors_np.py; do
      echo "$f sha256: $(sha256sum "$root/tools/$f" | cut -d' ' -f1)"
    done; } > "$ctr/bench-provenance.txt"
  if [ "$keep_src" != 1 ]; then
    say "deleting the source $src"
    rm -rf "$src"
  fi
fi

env_line="BENCH_INKLING_LAYERS=$layers BENCH_TOKENS=$tokens BENCH_INKLING_BUDGETS=$budgets"
env_line="$env_line BENCH_MODES=$modes BENCH_REPEAT=$repeat BENCH_FIO_SECONDS=$fio_s"
env_line="$env_line BENCH_IO_DEPTH=$depth BENCH_INKLING_CGROUP_LIMIT=$cg_limit"
env_line="$env_line BENCH_INKLING_CGROUP_RAM=$cg_ram"
decode_report "$name" "$ctr" bench/inkling.sh "$env_line"
