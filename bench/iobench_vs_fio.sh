#!/bin/sh
# Compares `colibri iobench` with fio on the same file at the same block
# sizes, depths and duration (random O_DIRECT reads through io_uring), and
# writes a side-by-side Markdown table into bench/results/. Each point runs
# ROUNDS times per tool, alternating which tool goes first, and the table
# gives the medians and each tool's own spread (max/min - 1), so a noisy
# device shows as noise rather than as a difference. The target is median
# bandwidth within 15% of fio at every point; the last line says whether it
# was met.
#   bench/iobench_vs_fio.sh [FILE [SIZE_GIB]]
# Environment: COLIBRI (binary, default ./colibri), SECONDS_PER_POINT (2),
# ROUNDS (5), BLOCKS_KB ("128 1024 4096"), DEPTHS ("1 4 16 64"), OUT (result
# file), BUFFERED=1 (both tools through the page cache, file cached first:
# compares the tools' own overhead without the device).
# FILE (default $TMPDIR/colibri-iobench-vs-fio.dat) is created with random
# data when missing or smaller than SIZE_GIB (default 4). FILE may be a block
# device; a RAM-backed loop device takes the device's noise out and compares
# the two tools' O_DIRECT paths alone (as root):
#   head -c 2G /dev/urandom >/dev/shm/ram.img && dev=$(losetup -f --show /dev/shm/ram.img)
#   bench/iobench_vs_fio.sh "$dev"; losetup -d "$dev"; rm /dev/shm/ram.img
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
colibri=${COLIBRI:-$here/colibri}
file=${1:-${TMPDIR:-/tmp}/colibri-iobench-vs-fio.dat}
size_gib=${2:-4}
secs=${SECONDS_PER_POINT:-2}
rounds=${ROUNDS:-5}
buffered=${BUFFERED:-0}
# fio drops the file's cached pages before a job unless --invalidate=0.
if [ "$buffered" = 1 ]; then cmode=--buffered; direct="0 --invalidate=0"; mode=buffered; else cmode=; direct=1; mode=O_DIRECT; fi
blocks=${BLOCKS_KB:-"128 1024 4096"}
depths=${DEPTHS:-"1 4 16 64"}
host=$(hostname -s 2>/dev/null || hostname)
day=$(date -u +%Y-%m-%d)
tag=$( [ -b "$file" ] && basename "$file" || echo file)
out=${OUT:-$here/bench/results/iobench_vs_fio-$mode-$tag-$host-$day.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
[ -x "$colibri" ] || { echo "$colibri: not built (make)" >&2; exit 1; }

want=$((size_gib * 1024 * 1024 * 1024))
if [ -b "$file" ]; then
  bytes=$(blockdev --getsize64 "$file")
else
  bytes=$(stat -c %s "$file" 2>/dev/null || echo 0)
fi
if [ ! -b "$file" ] && [ "$bytes" -lt "$want" ]; then
  echo "writing $size_gib GiB of random data to $file" >&2
  fio --name=prep --filename="$file" --size="${size_gib}G" --rw=write --bs=1M --direct=1 \
      --ioengine=io_uring --refill_buffers --output=/dev/null
  bytes=$(stat -c %s "$file")
fi

[ "$buffered" = 1 ] && cat "$file" >/dev/null

# field FILE EXPR: evaluates a Python expression over the JSON in FILE (as j).
field() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

mkdir -p "$(dirname "$out")"
"$colibri" iobench "$file" --block-kb 128 --depth 1 --seconds 0.2 --json --no-save $cmode >"$tmp/id.json"
dev=$(field "$tmp/id.json" 'j["devices"][0]["key"] + " (" + (j["devices"][0]["name"] or "?") + ", " + j["devices"][0]["fs_type"] + ")"')

{
  echo "# colibri iobench vs fio"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- host: $host, $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs"
  echo "- device: $dev"
  echo "- file: $file, $((bytes / 1048576)) MiB"
  echo "- $("$colibri" --version), $(fio --version)"
  echo "- $mode reads; $secs s per run, $rounds runs per tool and point, alternating which tool goes first"
  echo
  echo "Command lines (B = block bytes, D = depth):"
  echo
  echo '    colibri iobench FILE --block-kb B/1024 --depth D --seconds '"$secs"' --json --no-save'"${cmode:+ $cmode}"
  echo '    fio --name=randread --ioengine=io_uring --direct='"$direct"' --rw=randread --bs=B --iodepth=D \'
  echo '        --runtime='"$secs"' --time_based --filename=FILE --lat_percentiles=1 --output-format=json'
  echo
  echo "GB/s is 10^9 bytes per second, the median of the runs; spread is max/min - 1 over one"
  echo "tool's runs; latency (median run's p50 / p99) is from submission to completion, in microseconds."
  echo
  echo "| block | depth | iobench GB/s | fio GB/s | diff | iobench spread | fio spread | iobench IOPS | fio IOPS | iobench p50 / p99 us | fio p50 / p99 us |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} >"$out"

# median FILES...: "GBPS SPREAD IOPS P50 P99" of the median-bandwidth run,
# from colibri (c) or fio (f) JSON files.
median() {
  python3 - "$@" <<'PY'
import json, sys
kind, files = sys.argv[1], sys.argv[2:]
runs = []
for f in files:
    j = json.load(open(f))
    if kind == "c":
        p = j["devices"][0]["points"][0]
        runs.append((p["gbps"], p["iops"], p["p50_us"], p["p99_us"]))
    else:
        r = j["jobs"][0]["read"]
        pc = r["lat_ns"]["percentile"]
        runs.append((r["bw_bytes"] / 1e9, r["iops"], pc["50.000000"] / 1e3, pc["99.000000"] / 1e3))
runs.sort()
m = runs[len(runs) // 2]
spread = runs[-1][0] / runs[0][0] - 1 if runs[0][0] > 0 else float("inf")
print("%.3f %.0f%% %.0f %.0f %.0f" % (m[0], 100 * spread, m[1], m[2], m[3]))
PY
}

worst=0
for kb in $blocks; do
  for d in $depths; do
    bs=$((kb * 1024))
    r=0
    while [ $r -lt "$rounds" ]; do
      for tool in $( [ $((r % 2)) = 0 ] && echo "c f" || echo "f c" ); do
        if [ $tool = c ]; then
          "$colibri" iobench "$file" --block-kb "$kb" --depth "$d" --seconds "$secs" --json --no-save $cmode \
            >"$tmp/c$r.json"
        else
          fio --name=randread --ioengine=io_uring --direct=$direct --rw=randread --bs="$bs" --iodepth="$d" \
              --runtime="$secs" --time_based --filename="$file" --lat_percentiles=1 \
              --output-format=json >"$tmp/f$r.json"
        fi
      done
      r=$((r + 1))
    done
    set -- $(median c "$tmp"/c*.json); cg=$1 cs=$2 ci=$3 cl="$4 / $5"
    set -- $(median f "$tmp"/f*.json); fg=$1 fs=$2 fio_iops=$3 fl="$4 / $5"
    rm -f "$tmp"/c*.json "$tmp"/f*.json
    diff=$(python3 -c "print('%+.1f%%' % (100 * ($cg - $fg) / $fg))")
    worst=$(python3 -c "print(max($worst, abs(100 * ($cg - $fg) / $fg)))")
    echo "| $kb KiB | $d | $cg | $fg | $diff | $cs | $fs | $ci | $fio_iops | $cl | $fl |" | tee -a "$out"
  done
done

verdict=$(python3 -c "print('met' if $worst <= 15 else 'NOT met')")
{
  echo
  echo "Largest difference of the medians: $(python3 -c "print('%.1f%%' % $worst)") (target: within 15%, $verdict)."
} | tee -a "$out"
echo "wrote $out" >&2
