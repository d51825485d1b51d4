#!/bin/sh
# DeepSeek-V4-Flash's shape cut to the layers of BENCH_V4_TYPES (hca,csa:
# a hash-routed HCA layer, then a top-k CSA layer with its indexer, so
# every block kind runs; BENCH_V4_HASH hash layers, 1): decode in RAM
# and under a cgroup v1 memory cap smaller than the container, with fio on
# the expert files before each run (decode_runs.py, report.py), and the
# compressed V4 cache of `colibri plan` at 8k and 32k positions against
# DeepSeek-V3's MLA cache for the same layers. Writes
# results/v4-flash-<date>.md (+ the decode tables' .json); deletes the
# source after conversion and the container at the end (BENCH_V4_KEEP=1
# keeps it). Run as root (drop_caches, cgroups).
#
#   bench/v4_flash.sh    # about 15 minutes the first time (generate 0.5, convert 6)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
py=/usr/bin/python3
colibri=${COLIBRI:-$root/colibri}
work=${BENCH_DIR:-$here/work}
results=${BENCH_RESULTS:-$here/results}
types=${BENCH_V4_TYPES:-hca,csa}
n_hash=${BENCH_V4_HASH:-1}
layers=$(echo "$types" | tr ',' '\n' | grep -c .)
tokens=${BENCH_TOKENS:-16}
repeat=${BENCH_REPEAT:-2}
fio_s=${BENCH_FIO_SECONDS:-3}
depth=${BENCH_IO_DEPTH:-32}
threads=${BENCH_THREADS:-0}
cg_limit=${BENCH_CGROUP_LIMIT-2G}
cg_ram=${BENCH_CGROUP_RAM:-1536M}
budgets=${BENCH_BUDGETS:-100}
modes=${BENCH_MODES:-cold,warm}
date=$(date +%F)
name=v4-flash-$(echo "$types" | tr ',' '-')-int4
ctr=$work/$name
say() { echo "v4_flash: $*" >&2; }
mkdir -p "$work" "$results"

# Sizes per layer: source 3.6 GB (FP4 experts + FP8 dense), container 3.4
# GB (int4 experts, int8 dense); both carry 2.1 GB (source) / 1.9 GB
# (container) of embedding and head. The source goes to /dev/shm when the
# memory allows, so the disk holds only the container.
src_gb=$((layers * 36 / 10 + 3))
ctr_gb=$((layers * 34 / 10 + 3))
if [ ! -f "$ctr/manifest.json" ]; then
  avail_mem_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
  if [ "$avail_mem_gb" -ge $((src_gb + 8)) ] && [ -d /dev/shm ]; then
    src=/dev/shm/colibri-$name-src; need_disk=$ctr_gb
  else
    src=$work/$name-src; need_disk=$((src_gb + ctr_gb))
  fi
  free_gb=$(df -P -BG "$work" | awk 'NR == 2 {print int($4)}')
  if [ "$free_gb" -lt $((need_disk + 4)) ]; then
    say "needs ${need_disk} GB on $work (+4 spare), has ${free_gb} GB: list fewer BENCH_V4_TYPES"
    exit 1
  fi
  gen="$py $root/tools/gen_model.py --arch deepseek_v4 --v4-shape flash --v4-layer-types $types --v4-hash-layers $n_hash --v4-fill tiled --out $src"
  conv="$colibri convert $src $ctr --quant int4 --force"
  trap 'rm -rf "$src"' EXIT INT TERM
  say "$gen"; $gen
  say "$conv"; $conv --quiet
  rm -rf "$src"; trap - EXIT INT TERM
  { echo "date: $(date -Iseconds)"; echo "generate: $gen"; echo "convert: $conv"; } > "$ctr/bench-provenance.txt"
fi
[ "${BENCH_V4_KEEP:-0}" = 1 ] || trap 'rm -rf "$ctr" "$work/decode-$name-scratch"' EXIT INT TERM

# (a) in RAM (budget 100%: every expert cached; cold then warm) and (b) under
# the cap (O_DIRECT and buffered, page cache dropped first), the whole
# matrix BENCH_REPEAT times in turn; decode_runs.py creates and removes the
# cgroup and runs fio right before each run.
raw=$results/decode-$name-$date.json
mkdir -p "$work/decode-$name-scratch"
set -- "$py" "$here/decode_runs.py" --model "$ctr" --out "$raw" --label "deepseek-v4-flash-$types-int4" \
    --colibri "$colibri" --tokens "$tokens" --budgets "$budgets" --modes "$modes" \
    --repeat "$repeat" --fio-seconds "$fio_s" --io-depth "$depth" --threads "$threads" \
    --scratch "$work/decode-$name-scratch" --fio-sweep "${BENCH_FIO_SWEEP:-8,32}"
[ -n "$cg_limit" ] && set -- "$@" --cgroup-limit "$cg_limit" --cgroup-ram "$cg_ram"
"$@" --command "BENCH_V4_TYPES=$types BENCH_V4_HASH=$n_hash BENCH_TOKENS=$tokens BENCH_REPEAT=$repeat bench/v4_flash.sh  ->  $*" \
  || say "some runs failed (see $raw)"
"$py" "$here/report.py" "$raw" --out "$results/decode-$name-$date.md" \
    --title "colibri decode benchmark: DeepSeek-V4-Flash shape, layers $types ($n_hash hash-routed), int4"

# (c) the cache at 8k and 32k positions: plan's KV line (and its JSON bytes
# per position) against DeepSeek-V3's MLA cache as colibri keeps it,
# (kv_lora_rank 512 + qk_rope_head_dim 64) f32 per layer and position.
out=$results/v4-flash-kv-$date.md   # folded by hand into results/v4-flash-<date>.md
{
  echo "colibri $(git -C "$root" rev-parse --short HEAD), mixer_v4.c at $(git -C "$root" log -1 --format=%h -- engine/forward/mixer_v4.c)"
  echo
  echo "| positions | V4 cache (plan) | V4 bytes / position | V3 MLA cache, same $layers layers | V4 / MLA |"
  echo "| ---: | ---: | ---: | ---: | ---: |"
  for ctx in 8192 32768; do
    "$colibri" plan --model "$ctr" --ctx $ctx --ram 8G --json > "$work/plan-$ctx.json"
    "$colibri" plan --model "$ctr" --ctx $ctx --ram 8G | grep '^  kv cache' > "$work/plan-$ctx.txt"
    "$py" - "$work/plan-$ctx.json" "$ctx" "$layers" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1])); ctx, L = int(sys.argv[2]), int(sys.argv[3])
kv = p["split"]["kv_bytes"]; per = p["model"]["kv_bytes_per_position"]
mla = (512 + 64) * 4 * L * ctx
print("| %d | %.1f MiB | %d | %.1f MiB | %.3f |" % (ctx, kv / 2**20, per, mla / 2**20, kv / mla))
EOF
  done
  echo
  for ctx in 8192 32768; do echo "    colibri plan --ctx $ctx: $(sed 's/^ *//' "$work/plan-$ctx.txt")"; done
} > "$out"
cat "$out" >&2
say "results: $results/decode-$name-$date.md, $out"
