#!/bin/sh
# What the web dashboard costs a decode: the decode tok/s of one greedy
# request (the answer's timings.tokens_per_second) on a server without the
# dashboard (--no-ui) against one with it on and BENCH_DASH_VIEWERS
# dashboards connected to /api/live (each an event stream: an event after
# steps, at most 10 a second, with the whole expert map), alternately
# (A B A B), each on a fresh server. The model is in RAM, so a step is as
# short as it gets and the dashboard's share of it as large as it gets.
#
#   bench/dashboard.sh
#
# Environment (defaults in brackets): BENCH_DASH_MODEL [the default model:
# models/kjv-moe from make demo, else the copy run converts into ~/.cache],
# BENCH_DASH_TOKENS [256], BENCH_DASH_REPEAT [4], BENCH_DASH_VIEWERS [4], BENCH_THREADS [0: the
# plan's], COLIBRI [./colibri, else build/colibri], BENCH_RESULTS.
# Writes results/dashboard-<date>.md.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init dashboard build/colibri
[ -x "$colibri" ] || { model_say "$colibri is missing: run make"; exit 1; }
model=${BENCH_DASH_MODEL:-$root/models/kjv-moe}
[ -f "$model/manifest.json" ] || [ -n "${BENCH_DASH_MODEL:-}" ] || model=${XDG_CACHE_HOME:-$HOME/.cache}/colibri/models/kjv-moe
[ -f "$model/manifest.json" ] || { model_say "$model is not a container: run make demo or set BENCH_DASH_MODEL"; exit 1; }
tokens=${BENCH_DASH_TOKENS:-256}
repeat=${BENCH_DASH_REPEAT:-4}
viewers=${BENCH_DASH_VIEWERS:-4}
threads=${BENCH_THREADS:-0}
mkdir -p "$work" "$results"
out=$results/dashboard-$date.md
raw=$work/runs.tsv
: >"$raw"
targs=""
[ "$threads" = 0 ] || targs="--threads $threads"

# One run: variant (off|on); prints the decode tok/s.
run_one() {
  v=$1
  ui=--no-ui
  [ "$v" = on ] && ui=--ui
  log=$work/srv-$v.out
  # shellcheck disable=SC2086
  "$colibri" serve --model "$model" --port 0 --parallel 1 --ctx $((tokens + 64)) $ui $targs >"$log" 2>"$work/srv-$v.err" &
  srv=$!
  port=""
  for _ in $(seq 600); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { kill "$srv"; model_say "the server did not start: $(cat "$work/srv-$v.err")"; exit 1; }
  pids=""
  if [ "$v" = on ]; then
    for _ in $(seq "$viewers"); do
      curl -sN "http://127.0.0.1:$port/api/live" >/dev/null 2>&1 &
      pids="$pids $!"
    done
    sleep 1
  fi
  curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"And God said\"}],\"max_tokens\":$tokens,\"temperature\":0}" \
    >"$work/answer-$v.json"
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  kill -INT "$srv"
  wait "$srv" 2>/dev/null || true
  $py -c 'import json,sys; t=json.load(open(sys.argv[1]))["timings"]; print("%.3f %d" % (t["tokens_per_second"], t["completion_tokens"]))' \
    "$work/answer-$v.json"
}

i=0
while [ "$i" -lt "$repeat" ]; do
  i=$((i + 1))
  for v in off on; do
    r=$(run_one "$v")
    model_say "repeat $i, dashboard $v: $r (tok/s, tokens)"
    echo "$i	$v	$r" >>"$raw"
  done
done

$py - "$raw" "$out" "$model" "$viewers" "$tokens" "$(colibri_rev)" <<'EOF'
import statistics, sys
raw, out, model, viewers, tokens, rev = sys.argv[1:]
runs = {}
for line in open(raw):
    i, v, rate, n = line.split()
    runs.setdefault(int(i), {})[v] = (float(rate), int(n))
off = [r["off"][0] for r in runs.values()]
on = [r["on"][0] for r in runs.values()]
ratios = [r["on"][0] / r["off"][0] for r in runs.values() if r["off"][0] > 0]
with open(out, "w") as f:
    f.write("# The dashboard's cost to a decode\n\n")
    f.write(f"`bench/dashboard.sh` at {rev}: model `{model}` in RAM, one greedy chat request of up to "
            f"{tokens} tokens per fresh server, `--no-ui` (off) against the dashboard on with {viewers} "
            f"dashboards connected to /api/live (on), alternately.\n\n")
    f.write("| repeat | off tok/s | on tok/s | on / off |\n| --- | --- | --- | --- |\n")
    for i in sorted(runs):
        a, b = runs[i]["off"][0], runs[i]["on"][0]
        f.write(f"| {i} | {a:.1f} | {b:.1f} | {b / a:.3f} |\n")
    f.write(f"\nMedians: off {statistics.median(off):.1f}, on {statistics.median(on):.1f} tok/s; "
            f"paired ratio on / off median {statistics.median(ratios):.3f} "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}).\n")
print(open(out).read())
EOF
