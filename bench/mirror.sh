#!/bin/bash
# Mirror benchmark: expert reads striped over two throttled disks.
#
#   bench/mirror.sh            (root: loop devices, mkfs, mount, cgroups, drop_caches)
#
# 1. The model: the OLMoE-1B-7B shape cut to BENCH_MIRROR_LAYERS layers
#    (bench/model_lib.sh: generated once, int4, 2.7 GB of experts in 768
#    records of 3.4 MiB).
# 2. Two "disks": sparse image files attached as loop devices, mkfs.ext4,
#    mounted. The images live in /dev/shm (RAM) by default, so that the
#    throttles below are the only limit: on a shared machine the real disk
#    is busy with other work, and reads of one image on it compete with
#    everything else (BENCH_MIRROR_A_DIR / _B_DIR put them elsewhere; an
#    image on a block device is attached with losetup --direct-io=on, and
#    that disk's reads by others are reported). colibri keys a disk profile
#    by the physical disk behind a loop device (a loop device over tmpfs by
#    its own name), so two images on the same real disk would share one
#    profile and the stripe weights could never differ. The container goes
#    to A; `colibri mirror --model A/model --to B/model` copies its experts
#    to B. RAM used: the container (3.1 GB) plus its experts (2.7 GB).
# 3. A cgroup v1 blkio group (/sys/fs/cgroup/blkio/colibri-mirror-bench)
#    throttles reads of each loop device (blkio.throttle.read_bps_device,
#    "MAJ:MIN BYTES/s"); fio, colibri iobench and colibri run inside it.
# 4. For each pair of throttles A:B (250:250, 300:150, 150:300 MB/s):
#    - fio random reads of whole records on A alone, B alone, both at once;
#    - `colibri iobench` of each disk at the record size and depth 32,
#      saved as disk profiles in a folder of this pair's own
#      (COLIBRI_CACHE_DIR), which is where `colibri run` takes each copy's
#      stripe weight from;
#    - cold decodes (page cache dropped, usage.json removed, --no-pin):
#      mirror-eq   both copies, no disk profile: equal stripe weights
#      mirror-prof both copies, with this pair's profiles: weights by bandwidth
#    Then one-copy decodes (`colibri mirror --remove`; re-added after) with
#    disk A throttled to each rate of the pairs.
#    With A's image on a real disk, every run also samples that disk, so
#    that reads of other processes competing with A show in the report.
# 5. bench/mirror_report.py: bench/results/mirror-<date>.md and the raw .json.
# Everything is undone on exit: umount, losetup -d, rmdir of the cgroup,
# the images deleted (unless BENCH_MIRROR_KEEP=1).
#
# Environment (defaults in brackets):
#   COLIBRI [./colibri]  BENCH_RESULTS [bench/results]  BENCH_DIR [bench/work]
#   BENCH_MIRROR_LAYERS [12]     BENCH_MIRROR_QUANT [int4]
#   BENCH_MIRROR_TOKENS [16]     decode tokens per run (one-token prompt)
#   BENCH_MIRROR_BUDGETS [min,25]  --ram min, or a cache of N% of the expert bytes
#   BENCH_MIRROR_PAIRS [250:250,300:150,150:300]  read throttles of A:B, MB/s (1e6)
#   BENCH_MIRROR_REPEAT [2]      BENCH_MIRROR_FIO_SECONDS [5]
#   BENCH_MIRROR_DISK_GB [6]     size of each (sparse) image
#   BENCH_MIRROR_A_DIR, BENCH_MIRROR_B_DIR [/dev/shm]  where the images live
#   BENCH_MIRROR_IO_DEPTH [32]   BENCH_MIRROR_THREADS [0: colibri's default]
#   BENCH_MIRROR_KEEP [0]        keep the images (not the mounts) for a rerun
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init mirror
layers=${BENCH_MIRROR_LAYERS:-12}
quant=${BENCH_MIRROR_QUANT:-int4}
tokens=${BENCH_MIRROR_TOKENS:-16}
budgets=${BENCH_MIRROR_BUDGETS:-min,25}
pairs=${BENCH_MIRROR_PAIRS:-250:250,300:150,150:300}
repeat=${BENCH_MIRROR_REPEAT:-2}
fio_s=${BENCH_MIRROR_FIO_SECONDS:-5}
disk_gb=${BENCH_MIRROR_DISK_GB:-6}
a_dir=${BENCH_MIRROR_A_DIR:-/dev/shm}
b_dir=${BENCH_MIRROR_B_DIR:-/dev/shm}
depth=${BENCH_MIRROR_IO_DEPTH:-32}
threads=${BENCH_MIRROR_THREADS:-0}
keep=${BENCH_MIRROR_KEEP:-0}
cg=/sys/fs/cgroup/blkio/colibri-mirror-bench
rev=$(colibri_rev)

say() { echo "mirror: $*" >&2; }
# What it cannot do without is a skip, not a failure (bench/run_all.sh goes on).
[ "$(id -u)" = 0 ] || { say "skipped: needs root (loop devices, mount, cgroups, drop_caches)"; exit 0; }
[ -d /sys/fs/cgroup/blkio ] || { say "skipped: no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio"; exit 0; }
[ -x "$colibri" ] || { say "$colibri is missing: run make"; exit 1; }
command -v fio >/dev/null || { say "fio is missing"; exit 1; }

src=$(prepare_olmoe "$layers" "$quant")
mkdir -p "$work" "$results"
img_a=$a_dir/colibri-mirror-disk-a.img img_b=$b_dir/colibri-mirror-disk-b.img
mnt_a=$work/a mnt_b=$work/b
dev_a= dev_b=
runs=$work/runs-$date
rm -rf "$runs"; mkdir -p "$runs"

cleanup() {
  set +e
  if [ -d "$cg" ]; then
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do echo "$p" > /sys/fs/cgroup/blkio/cgroup.procs; done
    rmdir "$cg"
  fi
  for m in "$mnt_a" "$mnt_b"; do mountpoint -q "$m" && umount "$m"; done
  for d in "$dev_a" "$dev_b"; do [ -n "$d" ] && losetup -d "$d"; done
  [ "$keep" = 1 ] || rm -f "$img_a" "$img_b"
  rmdir "$mnt_a" "$mnt_b" 2>/dev/null
  say "cleaned up: mounts, loop devices, cgroup$([ "$keep" = 1 ] || echo ", images")"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Disks.
for m in "$mnt_a" "$mnt_b"; do mountpoint -q "$m" && umount "$m"; done
mkdir -p "$mnt_a" "$mnt_b"
fresh=1
if [ "$keep" = 1 ] && [ -f "$img_a" ] && [ -f "$img_b" ]; then fresh=0; fi
if [ $fresh = 1 ]; then
  rm -f "$img_a" "$img_b"
  truncate -s "${disk_gb}G" "$img_a" "$img_b"
fi
attach() { # image: tmpfs has no O_DIRECT under the loop
  if [ "$(stat -f -c %T "$(dirname "$1")")" = tmpfs ]; then
    losetup --find --show "$1"
  else
    losetup --find --show --direct-io=on "$1"
  fi
}
dev_a=$(attach "$img_a")
dev_b=$(attach "$img_b")
if [ $fresh = 1 ]; then
  mkfs.ext4 -q -F "$dev_a"; mkfs.ext4 -q -F "$dev_b"
fi
mount "$dev_a" "$mnt_a"; mount "$dev_b" "$mnt_b"
name_a=$(basename "$dev_a") name_b=$(basename "$dev_b")
mm_a=$(cat /sys/block/$name_a/dev) mm_b=$(cat /sys/block/$name_b/dev)
# The real disk under A's image (none on tmpfs), sampled to see competing reads.
under_a=$(basename "$(df --output=source "$a_dir" | tail -1)")
[ -e "/sys/class/block/$under_a/stat" ] || under_a=
backing() { echo "$(stat -f -c %T "$(dirname "$1")") ($(dirname "$1")$([ "$(stat -f -c %T "$(dirname "$1")")" = tmpfs ] || echo ", losetup --direct-io=on"))"; }
say "disk A: $dev_a ($mm_a) on $mnt_a, image on $(backing "$img_a"); disk B: $dev_b ($mm_b) on $mnt_b, image on $(backing "$img_b")"

ctr=$mnt_a/model mirror=$mnt_b/model
if [ ! -f "$ctr/manifest.json" ] || ! cmp -s "$src/bench-provenance.txt" "$ctr/bench-provenance.txt"; then
  rm -rf "$ctr"
  say "copying the container to disk A"
  cp -a "$src" "$ctr"
  sync
fi
rm -f "$ctr/usage.json"
"$colibri" mirror --model "$ctr" --to "$mirror" --remove 2>/dev/null || true
t0=$(date +%s%N)
mirror_cmd="$colibri mirror --model $ctr --to $mirror --quiet --no-probe"  # profiles are measured per pair below
$mirror_cmd
mirror_s=$(( ($(date +%s%N) - t0) / 1000000 ))e-3
say "mirror added in $mirror_s s"

mkdir -p "$cg"
throttle() { # A_MBps B_MBps
  echo "$mm_a $(( $1 * 1000000 ))" > "$cg/blkio.throttle.read_bps_device"
  echo "$mm_b $(( $2 * 1000000 ))" > "$cg/blkio.throttle.read_bps_device"
}
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }

rec=$($py -c 'import json,sys; m=json.load(open(sys.argv[1])); print(max(l["record_bytes"] for l in m["experts"]["layers"]))' "$ctr/manifest.json")
ebytes=$($py -c 'import json,sys; m=json.load(open(sys.argv[1])); e=m["experts"]; print(sum(l["record_bytes"] for l in e["layers"]) * e["n_experts"])' "$ctr/manifest.json")
files_a=$(ls "$ctr"/experts/layer-*.bin | tr '\n' ':' | sed 's/:$//')
files_b=$(ls "$mirror"/experts/layer-*.bin | tr '\n' ':' | sed 's/:$//')
fio_common="--ioengine=io_uring --direct=1 --rw=randread --bs=$rec --iodepth=$depth --size=$ebytes --runtime=$fio_s --time_based --readonly --output-format=json"
iobench_a="$colibri iobench $ctr --block-kb $((rec / 1024)) --depth $depth --seconds 3 --json"
iobench_b="$colibri iobench $mirror/experts/layer-000.bin --block-kb $((rec / 1024)) --depth $depth --seconds 3 --json"

ram_for() { # budget -> --ram value: min, or a cache of that percentage (context: prompt, tokens, 17)
  if [ "$1" = min ]; then echo min; else ram_for_cache "$ctr" "$1" $((1 + tokens + 17)); fi
}

# fio on A, B and both at once; colibri iobench of each disk into the
# pair's profile folder; at the current throttles.
reference() { # tag
  in_cg fio --name=A --filename="$files_a" $fio_common > "$runs/fio-$1-A.json"
  in_cg fio --name=B --filename="$files_b" $fio_common > "$runs/fio-$1-B.json"
  in_cg fio $fio_common --name=A --filename="$files_a" --name=B --filename="$files_b" > "$runs/fio-$1-AB.json"
  mkdir -p "$work/profiles-$1"
  COLIBRI_CACHE_DIR=$work/profiles-$1 in_cg $iobench_a > "$runs/iobench-$1-A.json"
  COLIBRI_CACHE_DIR=$work/profiles-$1 in_cg $iobench_b > "$runs/iobench-$1-B.json"
  cp "$work/profiles-$1/disks.json" "$runs/profiles-$1.json"
}

engine() { # tag budget profile-folder
  tag=$1; ram=$(ram_for "$2")
  rm -f "$ctr/usage.json"
  set -- env COLIBRI_CACHE_DIR="$3" "$colibri" run --model "$ctr" --tokens 1 -n "$tokens" --temp 0 \
      --ram "$ram" --no-pin --io-depth "$depth" --stats-json "$runs/$tag.stats.json"
  [ "$threads" != 0 ] && set -- "$@" --threads "$threads"
  say "run $tag: $*"
  $py "$here/sampled_run.py" --out "$runs/$tag.json" --label "$tag" --dev "$name_a" --dev "$name_b" \
      ${under_a:+--dev "$under_a"} --blkio-cgroup "$cg" --drop-caches -- "$@" || say "run $tag failed"
}

registered=2
set_copies() { # 1 or 2
  [ "$1" = "$registered" ] && return 0
  if [ "$1" = 1 ]; then
    "$colibri" mirror --model "$ctr" --to "$mirror" --remove
  else
    $mirror_cmd
  fi
  registered=$1
}

mkdir -p "$work/profiles-none"; rm -f "$work/profiles-none/"*
IFS=, read -r -a budget_list <<< "$budgets"
IFS=, read -r -a pair_list <<< "$pairs"
for r in $(seq 1 "$repeat"); do
  set_copies 2
  for pair in "${pair_list[@]}"; do
    ta=${pair%%:*}; tb=${pair##*:}
    throttle "$ta" "$tb"
    [ "$r" = 1 ] && reference "$ta-$tb"
    for b in "${budget_list[@]}"; do
      engine "mirror-eq-$ta-$tb-$b-r$r" "$b" "$work/profiles-none"
      engine "mirror-prof-$ta-$tb-$b-r$r" "$b" "$work/profiles-$ta-$tb"
    done
  done
  # One copy: disk A throttled to each rate that occurs in the pairs.
  set_copies 1
  rates=$(for pair in "${pair_list[@]}"; do echo "${pair%%:*}"; echo "${pair##*:}"; done | sort -un)
  for rate in $rates; do
    throttle "$rate" "$rate"
    for b in "${budget_list[@]}"; do
      engine "single-$rate-$b-r$r" "$b" "$work/profiles-none"
    done
  done
done
set_copies 2
rm -rf "$work"/profiles-*

$py - "$runs/info.json" <<EOF
import json, sys
json.dump({"date": "$(date -Iseconds)", "colibri_rev": "$rev", "colibri": "$colibri",
           "host": "$(uname -srm)", "cpus": $(nproc), "fio": "$(fio --version)",
           "container": "$src", "provenance": open("$src/bench-provenance.txt").read(),
           "record_bytes": $rec, "expert_bytes": $ebytes, "tokens": $tokens,
           "disk_a": "$dev_a ($mm_a): ext4 on a ${disk_gb} GiB sparse image $img_a on $(backing "$img_a")",
           "disk_b": "$dev_b ($mm_b): ext4 on a ${disk_gb} GiB sparse image $img_b on $(backing "$img_b")",
           "dev_a": "$name_a", "dev_b": "$name_b", "under_a": "$under_a", "cgroup": "$cg",
           "mirror_cmd": "$mirror_cmd", "mirror_add_s": $mirror_s,
           "fio_cmd": "fio --name=X --filename=<expert files on X> $fio_common",
           "iobench_cmds": ["$iobench_a", "$iobench_b"],
           "env": "BENCH_MIRROR_LAYERS=$layers BENCH_MIRROR_TOKENS=$tokens BENCH_MIRROR_BUDGETS=$budgets BENCH_MIRROR_PAIRS=$pairs BENCH_MIRROR_REPEAT=$repeat BENCH_MIRROR_FIO_SECONDS=$fio_s BENCH_MIRROR_IO_DEPTH=$depth"},
          open(sys.argv[1], "w"), indent=1)
EOF
$py "$here/mirror_report.py" "$runs" --json "$results/mirror-$date.json" --out "$results/mirror-$date.md"
say "results: $results/mirror-$date.md"
