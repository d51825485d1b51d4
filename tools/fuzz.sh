#!/bin/sh
# Runs the libFuzzer harnesses that `make fuzz-bin` built into
# build-fuzz/fuzz/, each on its corpus, and prints one line per harness:
#   fuzz_x: pass (N runs in S s, N exec/s, cov C ft F, corpus N)
#   fuzz_x: FAIL: crash input build-fuzz/crashes/fuzz_x/crash-... (log build-fuzz/logs/fuzz_x.log)
# then the sanitizer report of each failure, and exits non-zero if any failed.
#   tools/fuzz.sh [--seconds S | --runs N] [--nice] [--logs DIR] [HARNESS...]
# --seconds S runs each for S seconds (default 60), --runs N for N inputs;
# --nice runs at nice 19 (long campaigns on a shared machine); --logs DIR
# keeps the libFuzzer logs there instead of build-fuzz/logs. New inputs go
# to build-fuzz/corpus/HARNESS (the committed seeds in tests/fuzz/corpus/HARNESS
# are only read), crash inputs to build-fuzz/crashes/HARNESS/.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
seconds=60
runs=""
nice=""
logs=build-fuzz/logs
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --nice) nice="nice -n 19"; shift ;;
    --logs) logs=$2; shift 2 ;;
    -*) echo "usage: tools/fuzz.sh [--seconds S | --runs N] [--nice] [--logs DIR] [HARNESS...]" >&2; exit 2 ;;
    *) break ;;
  esac
done

out=build-fuzz
export COLIBRI_REPO="$here"
export COLIBRI_FIXTURES="$here/build/fixtures"
# The harnesses that read fixtures (a converted container, sharded
# safetensors) find them here.
tools/make_fixtures.sh "$COLIBRI_FIXTURES" >/dev/null || { echo "fuzz: fixtures failed" >&2; exit 1; }
# Reconverted when colibri changed, so the container matches this format.
if [ ! -f "$out/container/manifest.json" ] || [ "$out/colibri" -nt "$out/container/manifest.json" ]; then
  rm -rf "$out/container"
  "$out/colibri" convert "$COLIBRI_FIXTURES/hf/qwen3_moe" "$out/container" >"$out/convert.log" 2>&1 ||
    { echo "fuzz: converting the qwen3_moe fixture failed, see $out/convert.log" >&2; exit 1; }
fi
export COLIBRI_FUZZ_CONTAINER="$here/$out/container"
# The container's own manifest seeds fuzz_manifest on every run: committed
# seeds of an older format version would all be refused at the version
# check and leave the harness fuzzing nothing but that check.
mkdir -p "$out/corpus/fuzz_manifest"
cp "$out/container/manifest.json" "$out/corpus/fuzz_manifest/current_container"
# And a shard's (colibri shard): its records and placement, over the same
# files (a shard's file only needs to hold its records).
rm -rf "$out/shard"
"$out/colibri" shard --quiet --model "$out/container" --ranks 2 --rank 1 --placement 1,2 --replicas 2 \
  --to "$out/shard" >"$out/shard.log" 2>&1 ||
  { echo "fuzz: sharding the qwen3_moe container failed, see $out/shard.log" >&2; exit 1; }
cp "$out/shard/manifest.json" "$out/corpus/fuzz_manifest/current_shard"

# Known findings others are fixing are suppressed (tests/fuzz/ubsan.supp);
# halt_on_error makes every other UBSan report a crash.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/tests/fuzz/ubsan.supp"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"

# The harnesses' scratch folders (fuzz_util.h) live here, removed at the end.
scratch=$(mktemp -d /dev/shm/colibri-fuzz.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
export COLIBRI_FUZZ_SCRATCH="$scratch"

if [ $# -eq 0 ]; then
  set -- $(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
fi
mkdir -p "$logs"
failed=0
for h in "$@"; do
  bin="$out/fuzz/$h"
  [ -x "$bin" ] || { echo "$h: FAIL: $bin is missing (make fuzz-bin)"; failed=1; continue; }
  mkdir -p "$out/corpus/$h" "$out/crashes/$h" "tests/fuzz/corpus/$h"
  log="$logs/$h.log"
  dict=""
  [ -f "tests/fuzz/$h.dict" ] && dict="-dict=tests/fuzz/$h.dict"
  # tests/fuzz/HARNESS.options: more libFuzzer flags, whitespace-separated.
  opts=""
  [ -f "tests/fuzz/$h.options" ] && opts=$(grep -v '^#' "tests/fuzz/$h.options")
  if [ -n "$runs" ]; then limit="-runs=$runs"; else limit="-max_total_time=$seconds"; fi
  start=$(date +%s)
  $nice "$bin" $limit $dict $opts -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/crashes/$h/" "$out/corpus/$h" "tests/fuzz/corpus/$h" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  [ -n "$done_line" ] || done_line=$(grep -a -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$done_line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$done_line" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  corp=$(echo "$done_line" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "$h: pass (${n:-?} runs in $took s, ${eps:-?} exec/s, cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?})"
  else
    failed=1
    art=$(sed -n "s/.*Test unit written to \(.*\)$/\1/p" "$log" | tail -1)
    echo "$h: FAIL: crash input ${art:-(none written)} (log $log)"
    # The report and the stack frames in our code (not libFuzzer's or libc's).
    grep -a -E 'ERROR: |FUZZ ASSERTION|runtime error|SUMMARY|^    #[0-9]' "$log" |
      grep -a -v -E 'fuzzer::|libc|__sanitizer|_start|compiler-rt' | head -20
  fi
done
exit $failed
