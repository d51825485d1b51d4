#!/bin/sh
# Runs every test binary in BUILD/tests after generating the fixtures, and
# ends with one summary line "N passed, N failed" over all binaries.
#   tools/run_tests.sh BUILD
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
export COLIBRI_REPO="$here"
export COLIBRI_FIXTURES="$here/build/fixtures"
export COLIBRI_BIN="${COLIBRI_BIN:-$here/$build/colibri}"
"$here/tools/make_fixtures.sh" "$COLIBRI_FIXTURES" || { echo "fixtures: generation failed" >&2; exit 1; }

passed=0; failed=0; bad=""
for t in "$here/$build"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  log="$here/$build/tests/$name.log"
  "$t" --jobs 2 >"$log" 2>&1
  rc=$?
  syn=$(grep -a "Synthesis:" "$log" | tail -1)
  p=$(echo "$syn" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
  f=$(echo "$syn" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
  c=$(echo "$syn" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
  p=${p:-0}; f=${f:-0}; c=${c:-0}
  if [ $rc -ne 0 ] && [ $((f + c)) -eq 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f + c))
  echo "$build/$name: $p passed, $((f + c)) failed"
  if [ $rc -ne 0 ]; then bad="$bad $name"; grep -a -v "^\[----\]" "$log" | tail -40; fi
done
echo "$build: $passed passed, $failed failed"
[ -z "$bad" ] && [ $passed -gt 0 ]
