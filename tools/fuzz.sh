#!/bin/sh
# Runs the libFuzzer harnesses that `make fuzz-bin` built into
# build-fuzz/fuzz/, each on its corpus, and prints one line per harness:
#   fuzz_x: pass (N runs in S s, N exec/s, cov C ft F, corpus N)
#   fuzz_x: FAIL: crash input build-fuzz/crashes/fuzz_x/crash-... (log build-fuzz/logs/fuzz_x.log)
# then the sanitizer report of each failure, and exits non-zero if any failed.
#
#   tools/fuzz.sh --ci [--seed S] [--runs N] [--build DIR] [--logs DIR] [HARNESS...]
#   tools/fuzz.sh [--seconds S | --runs N] [--nice] [--build DIR] [--logs DIR] [HARNESS...]
#
# --ci is the mode of `make test`, which must give the same verdict every
# time on the same tree. Each harness replays its committed corpus
# (tests/fuzz/corpus/HARNESS) and the seeds this script generates
# (build-fuzz/seeds/HARNESS), then fuzzes from -seed=S (default 1) until it
# has run the number of inputs that ci_runs below gives it, corpus replay
# included (--runs N: N for every harness). New inputs go to a scratch
# corpus that is removed afterwards, so nothing a run finds changes the
# next one, and no time limit decides anything: the verdict and the
# counts (runs, cov, ft, corpus) are the same on every run.
#
# Without --ci the fuzzing is open-ended (`make fuzz`): --seconds S runs
# each harness for S seconds (default 60), --runs N for N inputs, from a
# random seed; new inputs go to build-fuzz/corpus/HARNESS, which grows from
# one campaign to the next (the committed seeds are only read); --nice
# runs at nice 19 (long campaigns on a shared machine).
#
# Both modes: crash inputs go to build-fuzz/crashes/HARNESS/, the libFuzzer
# logs to build-fuzz/logs (--logs DIR: there instead); --build DIR uses the
# fuzz build in DIR instead of build-fuzz.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1

# --ci: the inputs each harness runs, its corpus replay included: about 5 s
# of CPU each at its speed in the fuzz build (on a 2-core Intel Xeon;
# tests/fuzz/README.md has the table), so that the fuzz step of make test
# takes about a minute. A harness not listed runs 2000 until it is given
# its own entry.
ci_runs() {
  case "$1" in
    fuzz_chat) echo 25000 ;;
    fuzz_config) echo 60000 ;;
    fuzz_gguf) echo 100000 ;;
    fuzz_gguf_meta) echo 40000 ;;
    fuzz_grammar) echo 4000 ;;
    fuzz_jinja) echo 35000 ;;
    fuzz_manifest) echo 40000 ;;
    fuzz_safetensors) echo 60000 ;;
    fuzz_safetensors_index) echo 40000 ;;
    fuzz_serve_llama) echo 50000 ;;
    fuzz_serve_ollama) echo 60000 ;;
    fuzz_serve_request) echo 200000 ;;
    fuzz_tokenizer) echo 12000 ;;
    *) echo 2000 ;;
  esac
}

usage="usage: tools/fuzz.sh --ci [--seed S] [--runs N] [--build DIR] [--logs DIR] [HARNESS...]
       tools/fuzz.sh [--seconds S | --runs N] [--nice] [--build DIR] [--logs DIR] [HARNESS...]"
ci=""
seed=1
seconds=60
runs=""
nice=""
out=build-fuzz
logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) ci=1; shift ;;
    --seed) seed=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --nice) nice="nice -n 19"; shift ;;
    --build) out=${2%/}; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
logs=${logs:-$out/logs}

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
case "$out" in
  /*) export COLIBRI_FUZZ_CONTAINER="$out/container" ;;   # --build /abs/dir
  *) export COLIBRI_FUZZ_CONTAINER="$here/$out/container" ;;
esac
# The container's own manifest seeds fuzz_manifest on every run: committed
# seeds of an older format version would all be refused at the version
# check and leave the harness fuzzing nothing but that check. They are
# remade each run into a folder of their own, byte for byte the same while
# colibri and the fixture are (tests/fuzz/README.md says how that was
# checked), so that --ci replays the same inputs every time.
seeds="$out/seeds"
rm -rf "$seeds/fuzz_manifest"
mkdir -p "$seeds/fuzz_manifest"
cp "$out/container/manifest.json" "$seeds/fuzz_manifest/current_container"
# And a shard's (colibri shard): its records and placement, over the same
# files (a shard's file only needs to hold its records).
rm -rf "$out/shard"
"$out/colibri" shard --quiet --model "$out/container" --ranks 2 --rank 1 --placement 1,2 --replicas 2 \
  --to "$out/shard" >"$out/shard.log" 2>&1 ||
  { echo "fuzz: sharding the qwen3_moe container failed, see $out/shard.log" >&2; exit 1; }
cp "$out/shard/manifest.json" "$seeds/fuzz_manifest/current_shard"

# Known findings others are fixing are suppressed (tests/fuzz/ubsan.supp);
# halt_on_error makes every other UBSan report a crash.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/tests/fuzz/ubsan.supp"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"

# The harnesses' scratch folders (fuzz_util.h: SCRATCH/HARNESS) and, with
# --ci, the corpus each run grows, removed at the end. With --ci its name
# is the same on every run, of every checkout: the paths a harness writes
# reach error messages and libFuzzer's comparison hooks, which feed the
# mutations, so a random name, or one that depends on where the checkout
# lies, would make two runs differ (seen: fuzz_tokenizer covered 2249
# edges in one checkout, 2107 in another). So the container a harness
# reads is reached through a link there too, and two --ci runs on one
# machine take turns (flock) rather than share it.
tmp=/dev/shm
[ -d "$tmp" ] && [ -w "$tmp" ] || tmp=/tmp
if [ -n "$ci" ]; then
  scratch="$tmp/colibri-fuzz-ci"
  if command -v flock >/dev/null 2>&1; then
    exec 8>"$scratch.lock"
    flock -n 8 || { echo "fuzz: another --ci run holds $scratch.lock; waiting for it"; flock 8; }
  fi
  rm -rf "$scratch"
  mkdir -p "$scratch" || exit 1
  ln -s "$COLIBRI_FUZZ_CONTAINER" "$scratch/container"
  export COLIBRI_FUZZ_CONTAINER="$scratch/container"
else
  scratch=$(mktemp -d "$tmp/colibri-fuzz.XXXXXX") || exit 1
fi
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
export COLIBRI_FUZZ_SCRATCH="$scratch/work"

# With --ci each harness runs without address space randomisation: the
# comparisons libFuzzer traces include pointers (p < end), whose values it
# keeps and writes into later inputs, so with random addresses two runs
# from one -seed part after some ten thousand inputs (seen on
# fuzz_serve_request, fuzz_jinja, fuzz_safetensors and fuzz_tokenizer).
norand=""
if [ -n "$ci" ]; then
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    norand="setarch $(uname -m) -R"
  else
    echo "fuzz: setarch -R is refused here, so addresses are random and the counts (not the corpus replay) may differ between runs"
  fi
fi

if [ $# -eq 0 ]; then
  set -- $(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
fi
mkdir -p "$logs"
failed=0
for h in "$@"; do
  bin="$out/fuzz/$h"
  [ -x "$bin" ] || { echo "$h: FAIL: $bin is missing (make fuzz-bin)"; failed=1; continue; }
  mkdir -p "$out/crashes/$h" "tests/fuzz/corpus/$h"
  log="$logs/$h.log"
  dict=""
  [ -f "tests/fuzz/$h.dict" ] && dict="-dict=tests/fuzz/$h.dict"
  # tests/fuzz/HARNESS.options: more libFuzzer flags, whitespace-separated.
  opts=""
  [ -f "tests/fuzz/$h.options" ] && opts=$(grep -v '^#' "tests/fuzz/$h.options" | tr '\n' ' ')
  extra=""
  [ -d "$seeds/$h" ] && extra="$seeds/$h"
  rm -rf "$COLIBRI_FUZZ_SCRATCH"
  mkdir -p "$COLIBRI_FUZZ_SCRATCH"
  if [ -n "$ci" ]; then
    # Flags that let the clock or parallel workers decide what runs would
    # break the promise of --ci.
    case " $opts " in
      *" -fork="*|*" -jobs="*|*" -workers="*|*" -max_total_time="*|*" -reload="*)
        echo "$h: FAIL: tests/fuzz/$h.options sets -fork, -jobs, -workers, -max_total_time or -reload, which --ci cannot keep deterministic"
        failed=1; continue ;;
    esac
    # -reload=0: libFuzzer would otherwise reread the corpus folder every
    # second, at moments that depend on the machine's speed.
    limit="-runs=${runs:-$(ci_runs "$h")} -seed=$seed -reload=0"
    grown="$scratch/corpus/$h"
    mkdir -p "$grown"
  else
    if [ -n "$runs" ]; then limit="-runs=$runs"; else limit="-max_total_time=$seconds"; fi
    grown="$out/corpus/$h"
    mkdir -p "$grown"
  fi
  # With --ci the harness gets a fixed environment: its size and content
  # (and the command line's) move the stack, whose addresses reach the
  # comparison hooks like the paths do (seen: fuzz_serve_request ran
  # otherwise under make than from a shell in the same checkout). Every
  # path on the command line is relative to the checkout or fixed above.
  fixed_env=""
  run="$bin"
  if [ -n "$ci" ]; then
    # And the harness itself runs from a fixed path: the sanitizers' start-up
    # reads the mapped files' names, so the checkout's path would move the
    # heap (seen: fuzz_gguf covered 1539 edges from one checkout, 1538 from
    # another, with the same code).
    run="$scratch/$h"
    cp "$bin" "$run"
    fixed_env="env -i PATH=/usr/bin:/bin LANG=C HOME=/nonexistent ASAN_OPTIONS=$ASAN_OPTIONS
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=tests/fuzz/ubsan.supp
      COLIBRI_FUZZ_SCRATCH=$COLIBRI_FUZZ_SCRATCH COLIBRI_FUZZ_CONTAINER=$COLIBRI_FUZZ_CONTAINER"
  fi
  start=$(date +%s%N)
  $nice $fixed_env $norand "$run" $limit $dict $opts -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/crashes/$h/" "$grown" "tests/fuzz/corpus/$h" $extra >"$log" 2>&1
  rc=$?
  took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  took=$(awk "BEGIN { printf \"%.1f\", $took_ms / 1000 }")
  [ -n "$ci" ] && rm -rf "$grown" "$run"
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  [ -n "$done_line" ] || done_line=$(grep -a -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$done_line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$done_line" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  corp=$(echo "$done_line" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # libFuzzer's own average_exec_per_sec counts whole seconds (0 under one).
  eps=$(awk "BEGIN { if (\"${n:-}\" != \"\" && $took_ms > 0) printf \"%d\", ${n:-0} * 1000 / $took_ms }")
  if [ $rc -eq 0 ]; then
    echo "$h: pass (${n:-?} runs in $took s, ${eps:-?} exec/s, cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?})"
  else
    failed=1
    art=$(sed -n "s/.*Test unit written to \(.*\)$/\1/p" "$log" | tail -1)
    echo "$h: FAIL: crash input ${art:-(none written)} (log $log)"
    # The report and the stack frames in our code: those with a source file
    # of this checkout, which the build names relative to it
    # (-ffile-prefix-map), not libFuzzer's, the sanitizers' or libc's.
    grep -a -E 'ERROR: |FUZZ ASSERTION|runtime error|SUMMARY|^    #[0-9]' "$log" |
      awk '!/^    #[0-9]/ || / (\.\/)?(base|storage|compute|planner|engine|tests)\/[^ ]*\.[ch]:/' | head -20
  fi
done
exit $failed
