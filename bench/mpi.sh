#!/bin/bash
# MPI benchmark (issue 23): the OLMoE-1B-7B shape decoded by 1, 2 and 3 MPI
# ranks on this one machine, each rank capped to its own memory and its own
# throttled disk, so that the routed experts are disk-bound and the ranks
# add disk bandwidth.
#
#   bench/mpi.sh               (root: loop devices, mkfs, mount, cgroups, drop_caches)
#
# 1. The model: the OLMoE-1B-7B shape, int4 experts. Full shape (16 layers)
#    in bench/work/olmoe-1b-7b-int4, made by decode.sh's steps when missing
#    (tools/gen_model.py --shape olmoe-1b-7b --weights-dtype fp8, then
#    colibri convert --quant int4, the source deleted); with
#    BENCH_MPI_LAYERS=N the first N layers only (bench/model_lib.sh
#    prepare_olmoe, bench/work/olmoe12/olmoe-1b-7b-<N>l-int4).
# 2. One "disk" per rank: an image file on local ext4 (BENCH_MPI_IMG_DIR,
#    default bench/work/mpi) attached with losetup --direct-io=on (no page
#    cache of the image itself), mkfs.ext4, mounted on bench/work/mpi/diskR,
#    holding rank R's own copy of the container (cp -a: every rank opens an
#    identical container, the engine checks the model id).
# 3. Two cgroup v1 groups per rank: /sys/fs/cgroup/memory/colibri-mpi-rR
#    (memory.limit_in_bytes = BENCH_MPI_MEM) and
#    /sys/fs/cgroup/blkio/colibri-mpi-rR (blkio.throttle.read_bps_device
#    "MAJ:MIN BYTES/s" of that rank's loop device only). Each rank enters
#    both before it execs colibri: mpirun starts
#    `sh -c 'echo $$ > MEMCG/cgroup.procs && echo $$ > BLKCG/cgroup.procs
#    && exec colibri run ...'`.
# 4. fio on each disk inside its rank's blkio group: what the throttle lets
#    through at the record size and io depth 32 (the disk-bound reference).
# 5. bench/mpi_runs.py: the runs, alternating rank counts (1,2,3,1,2,3 ...),
#    the page cache dropped and usage.json removed before each, rank 0's
#    --stats-json kept with the cgroups' counters (peak memory, OOM kills,
#    bytes the block layer read per rank).
# 6. bench/mpi_report.py: bench/results/mpi-<date>.md and .json.
# Everything is undone on exit, also on failure or ^C: the groups removed
# (their processes moved to the root group first), umount, losetup -d, the
# images deleted (unless BENCH_MPI_KEEP=1, which keeps them for a rerun).
#
# Environment (defaults in brackets):
#   COLIBRI [./colibri]  BENCH_RESULTS [bench/results]  BENCH_DIR [bench/work]
#   BENCH_MPI_LAYERS ['']    '' = all 16 layers; N = the first N layers
#   BENCH_MPI_RANKS [1,2,3]  rank counts, run in this order each repeat
#   BENCH_MPI_REPEAT [2]     BENCH_MPI_TOKENS [32]  BENCH_MPI_PROMPT [1,2,3]
#   BENCH_MPI_MEM [1G]       memory cap of each rank (memory.limit_in_bytes)
#   BENCH_MPI_RAM [900M]     --ram of each rank (under the cap: the stated slack)
#   BENCH_MPI_MBPS [300]     read throttle of each rank's disk, MB/s (1e6 bytes)
#   BENCH_MPI_THREADS [1]    --threads of each rank
#   BENCH_MPI_PLACEMENT [even]  --placement
#   BENCH_MPI_BTL ['']       '' = Open MPI's default (shared memory between
#                            same-host ranks); e.g. tcp,self = --mca btl tcp,self
#   BENCH_MPI_TIMEOUT [900]  seconds before a run is killed
#   BENCH_MPI_FIO_SECONDS [3]  BENCH_MPI_IO_DEPTH [32]
#   BENCH_MPI_IMG_DIR [bench/work/mpi]  BENCH_MPI_DISK_GB [container + 1]
#   BENCH_MPI_KEEP [0]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init mpi
layers=${BENCH_MPI_LAYERS:-}
ranks=${BENCH_MPI_RANKS:-1,2,3}
repeat=${BENCH_MPI_REPEAT:-2}
tokens=${BENCH_MPI_TOKENS:-32}
prompt=${BENCH_MPI_PROMPT:-1,2,3}
mem=${BENCH_MPI_MEM:-1G}
ram=${BENCH_MPI_RAM:-900M}
mbps=${BENCH_MPI_MBPS:-300}
threads=${BENCH_MPI_THREADS:-1}
placement=${BENCH_MPI_PLACEMENT:-even}
btl=${BENCH_MPI_BTL:-}
run_timeout=${BENCH_MPI_TIMEOUT:-900}
fio_s=${BENCH_MPI_FIO_SECONDS:-3}
depth=${BENCH_MPI_IO_DEPTH:-32}
img_dir=${BENCH_MPI_IMG_DIR:-$work}
disk_gb=${BENCH_MPI_DISK_GB:-}
keep=${BENCH_MPI_KEEP:-0}
cg_name=colibri-mpi-r

say() { echo "mpi: $*" >&2; }
die() { say "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (loop devices, mount, cgroups, drop_caches)"
[ -d /sys/fs/cgroup/memory ] || die "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory"
[ -d /sys/fs/cgroup/blkio ] || die "no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio"
[ -x "$colibri" ] || die "$colibri is missing: run make"
command -v mpirun >/dev/null || die "mpirun is missing (apt-get install openmpi-bin)"
command -v fio >/dev/null || die "fio is missing (apt-get install fio)"
case "$ranks" in *[!0-9,]*|'') die "BENCH_MPI_RANKS=$ranks: expected a list like 1,2,3";; esac
n_max=$(echo "$ranks" | tr , '\n' | sort -n | tail -1)
[ "$n_max" -ge 1 ] || die "BENCH_MPI_RANKS=$ranks: no rank count >= 1"

# decode.sh's container for the full shape, a cut one with BENCH_MPI_LAYERS.
src=$(prepare_olmoe "$layers" int4) || die "could not prepare the container${layers:+ of $layers layers}"

mkdir -p "$work" "$results" "$img_dir"
fs=$(df -P -T "$img_dir" | awk 'NR == 2 { print $2 }')
[ "$fs" = tmpfs ] && die "$img_dir is on tmpfs: the images must be on a local disk (losetup --direct-io=on)"
if [ -z "$disk_gb" ]; then
  disk_gb=$(( $(du -sk "$src" | cut -f1) / 1000000 + 2 ))
fi
runs=$work/runs-$date
rm -rf "$runs"; mkdir -p "$runs"

devs=()
cleanup() {
  set +e
  for r in $(seq 0 $((n_max - 1))); do
    for h in memory blkio; do
      cg=/sys/fs/cgroup/$h/$cg_name$r
      [ -d "$cg" ] || continue
      for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do echo "$p" > "/sys/fs/cgroup/$h/cgroup.procs"; done
      rmdir "$cg" || say "could not remove $cg"
    done
    m=$work/disk$r
    mountpoint -q "$m" && { umount "$m" || say "could not unmount $m"; }
    rmdir "$m" 2>/dev/null
  done
  for d in "${devs[@]}"; do losetup -d "$d" || say "could not detach $d"; done
  if [ "$keep" != 1 ]; then
    for r in $(seq 0 $((n_max - 1))); do rm -f "$img_dir/rank$r.img"; done
  fi
  say "cleaned up: cgroups, mounts, loop devices$([ "$keep" = 1 ] || echo ", images")"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Leftovers of an earlier run that was killed before its cleanup.
for r in $(seq 0 $((n_max - 1))); do
  m=$work/disk$r
  mountpoint -q "$m" && umount "$m"
  if [ -f "$img_dir/rank$r.img" ]; then
    for d in $(losetup -j "$img_dir/rank$r.img" | cut -d: -f1); do losetup -d "$d"; done
  fi
done

# Disks: one image, loop device, file system and container copy per rank.
rec=$($py -c 'import json,sys; m=json.load(open(sys.argv[1])); print(max(l["record_bytes"] for l in m["experts"]["layers"]))' "$src/manifest.json")
ebytes=$($py -c 'import json,sys; m=json.load(open(sys.argv[1])); e=m["experts"]; print(sum(l["record_bytes"] for l in e["layers"]) * e["n_experts"])' "$src/manifest.json")
fio_common="--ioengine=io_uring --direct=1 --rw=randread --bs=$rec --iodepth=$depth --runtime=$fio_s --time_based --readonly --output-format=json"
ranks_json=
for r in $(seq 0 $((n_max - 1))); do
  img=$img_dir/rank$r.img mnt=$work/disk$r
  mkdir -p "$mnt"
  fresh=1
  if [ "$keep" = 1 ] && [ -f "$img" ]; then fresh=0; fi
  if [ $fresh = 1 ]; then rm -f "$img"; truncate -s "${disk_gb}G" "$img"; fi
  dev=$(losetup --find --show --direct-io=on "$img") || die "losetup of $img failed"
  devs+=("$dev")
  if [ $fresh = 1 ]; then mkfs.ext4 -q -F "$dev" || die "mkfs.ext4 $dev ($img) failed"; fi
  mount "$dev" "$mnt" || die "mount $dev $mnt failed"
  ctr=$mnt/model
  if [ ! -f "$ctr/manifest.json" ] || ! cmp -s "$src/manifest.json" "$ctr/manifest.json" ||
     ! cmp -s "$src/bench-provenance.txt" "$ctr/bench-provenance.txt"; then
    rm -rf "$ctr"
    say "rank $r: copying the container to $dev ($mnt)"
    cp -a "$src" "$ctr" || die "copying $src to $ctr failed"
    rm -f "$ctr/usage.json"
    sync
  fi
  mm=$(cat "/sys/block/$(basename "$dev")/dev")
  cgm=/sys/fs/cgroup/memory/$cg_name$r cgb=/sys/fs/cgroup/blkio/$cg_name$r
  mkdir -p "$cgm" "$cgb"
  echo "$mem" > "$cgm/memory.limit_in_bytes" || die "$cgm/memory.limit_in_bytes: cannot set $mem"
  echo "$mm $((mbps * 1000000))" > "$cgb/blkio.throttle.read_bps_device" ||
    die "$cgb/blkio.throttle.read_bps_device: cannot set $mm $((mbps * 1000000))"
  files=$(ls "$ctr"/experts/*.bin | tr '\n' ':' | sed 's/:$//')
  sync; echo 3 > /proc/sys/vm/drop_caches
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cgb" \
      fio --name=rank$r --filename="$files" --size="$ebytes" $fio_common > "$runs/fio-rank$r.json" ||
    die "fio on $dev failed (see $runs/fio-rank$r.json)"
  say "rank $r: $dev ($mm) on $mnt, image $img ($fs), read throttle $mbps MB/s, memory cap $mem"
  ranks_json="$ranks_json${ranks_json:+,}{\"rank\": $r, \"model\": \"$ctr\", \"dev\": \"$dev\", \"majmin\": \"$mm\", \"image\": \"$img\", \"mem_cgroup\": \"$cgm\", \"blkio_cgroup\": \"$cgb\", \"fio\": \"$runs/fio-rank$r.json\"}"
done

rev=$(colibri_rev)
cat > "$runs/setup.json" <<EOF
{"date": "$(date -Iseconds)", "colibri_rev": "$rev", "colibri": "$colibri",
 "host": "$(uname -srm)", "cpus": $(nproc), "mem_total_kb": $(awk '/MemTotal/ {print $2}' /proc/meminfo),
 "mpirun": "$(mpirun --version 2>&1 | head -1)", "fio_version": "$(fio --version)",
 "container": "$src", "provenance": $($py -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$src/bench-provenance.txt"),
 "layers": "${layers:-all}", "record_bytes": $rec, "expert_bytes": $ebytes,
 "tokens": $tokens, "prompt": "$prompt", "mem_limit": "$mem", "ram": "$ram", "read_mbps": $mbps,
 "threads": $threads, "placement": "$placement", "btl": "$btl", "io_depth": $depth,
 "image_fs": "$fs", "disk_gb": $disk_gb,
 "fio_cmd": "fio --name=rankR --filename=<rank R's expert files> --size=$ebytes $fio_common (inside rank R's blkio group)",
 "env": "BENCH_MPI_LAYERS=$layers BENCH_MPI_RANKS=$ranks BENCH_MPI_REPEAT=$repeat BENCH_MPI_TOKENS=$tokens BENCH_MPI_MEM=$mem BENCH_MPI_RAM=$ram BENCH_MPI_MBPS=$mbps BENCH_MPI_THREADS=$threads BENCH_MPI_PLACEMENT=$placement BENCH_MPI_BTL=$btl",
 "ranks": [$ranks_json]}
EOF

status=0
$py "$here/mpi_runs.py" --setup "$runs/setup.json" --runs "$runs" --ranks "$ranks" --repeat "$repeat" \
    --timeout "$run_timeout" || { say "some runs failed (see $runs)"; status=1; }
$py "$here/mpi_report.py" "$runs" --json "$results/mpi-$date.json" --out "$results/mpi-$date.md" ||
  die "mpi_report.py failed"
say "results: $results/mpi-$date.md"
exit $status
