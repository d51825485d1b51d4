#!/bin/sh
# The whole suite, as `make test` and CI run it:
#   1. the optimised build (make -jN tests-bin), then every test binary
#      (tools/run_tests.py build), two at a time;
#   2. meanwhile, at the lowest CPU priority, the ASan/UBSan build
#      (asan-bin) and the fuzz harnesses' build (fuzz-bin), so the two
#      builds use the time the tests leave idle (waiting on servers, ranks
#      and disks) and never slow a test that measures time;
#   3. the ASan/UBSan pass (tools/run_tests.py build-asan --pass asan: every
#      unit-level test, one family per kind of block and container,
#      tests/asan_subset.txt), and beside it
#   4. each fuzz harness over its committed corpus and a fixed number of
#      runs from a fixed seed (tools/fuzz.sh --ci), so the same tree always
#      gets the same verdict.
# The fixtures are made beside the optimised build.
# Each step prints its own summary; the script ends with one line per
# step and exits non-zero if any failed. Every step runs even after an
# earlier one failed, so one run shows every failure.
#   tools/test_all.sh [-j N]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
if [ "${1:-}" = -j ]; then jobs=$2; fi
make="make --no-print-directory"
mkdir -p build/logs
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }

status_build=0 status_opt=0 status_bg=0 status_asan=0 status_fuzz=0

echo "== optimised build (make -j$jobs tests-bin), the fixtures meanwhile"
# The fixtures (numpy) do not depend on the build: made beside it, they
# fill the build's serial stretches (linking); run_tests.py finds them made.
tools/make_fixtures.sh build/fixtures >build/logs/fixtures.log 2>&1 &
fx=$!
$make -j"$jobs" tests-bin >build/logs/build.log 2>&1 || status_build=$?
wait $fx || { cat build/logs/fixtures.log; echo "test_all: the fixtures failed (build/logs/fixtures.log)"; exit 1; }
if [ $status_build -ne 0 ]; then
  tail -40 build/logs/build.log
  echo "test_all: the optimised build failed (build/logs/build.log)"
  exit 1
fi

echo "== ASan/UBSan and fuzz builds in the background (build/logs/bg-build.log) [$(elapsed) s]"
# The ASan build with line tables only (DBG=-g1): its reports name files
# and lines, and it compiles a fifth faster than with full -g.
( nice -n 19 $make -j"$jobs" asan-bin DBG=-g1 && nice -n 19 $make -j"$jobs" fuzz-bin ) >build/logs/bg-build.log 2>&1 &
bg=$!

echo "== optimised tests [$(elapsed) s]"
COLIBRI_BIN="$here/build/colibri" /usr/bin/python3 tools/run_tests.py build || status_opt=$?

echo "== waiting for the background builds [$(elapsed) s]"
wait $bg || status_bg=$?
if [ $status_bg -ne 0 ]; then
  tail -40 build/logs/bg-build.log
  echo "test_all: the ASan or fuzz build failed (build/logs/bg-build.log)"
else
  # The fuzz harnesses run one at a time beside the ASan pass, whose
  # binaries leave a core idle now and then; their lines come after it.
  tools/fuzz.sh --ci >build/logs/fuzz.log 2>&1 &
  fz=$!
  echo "== ASan/UBSan tests, the fuzz harnesses' fixed runs meanwhile [$(elapsed) s]"
  COLIBRI_BIN="$here/build-asan/colibri" /usr/bin/python3 tools/run_tests.py build-asan --pass asan || status_asan=$?
  echo "== fuzz harnesses, fixed runs (build/logs/fuzz.log) [$(elapsed) s]"
  wait $fz || status_fuzz=$?
  cat build/logs/fuzz.log
fi

echo "test_all: optimised tests $( [ $status_opt = 0 ] && echo pass || echo FAIL ),"\
  "builds $( [ $status_bg = 0 ] && echo pass || echo FAIL ),"\
  "ASan/UBSan tests $( [ $status_bg != 0 ] && echo 'not run' || { [ $status_asan = 0 ] && echo pass || echo FAIL; } ),"\
  "fuzz $( [ $status_bg != 0 ] && echo 'not run' || { [ $status_fuzz = 0 ] && echo pass || echo FAIL; } )"\
  "in $(elapsed) s"
[ $status_opt = 0 ] && [ $status_bg = 0 ] && [ $status_asan = 0 ] && [ $status_fuzz = 0 ]
