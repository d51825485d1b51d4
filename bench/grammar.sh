#!/bin/sh
# Constrained decoding on the OLMoE-1B-7B shape (all 16 layers, int4, random
# weights) streamed under a 2 GiB memory cap: a JSON-schema extraction task
# (bench/schemas/extraction.json, --json-schema) decoded greedily with the
# grammar's forced tokens batched into the forwards of the sampled ones, and
# with --no-forced-batch, A B A B, page cache dropped and fio on the expert
# files before each run (bench/grammar_runs.py). The shape has no tokenizer
# of its own: the run uses a hard-linked copy of the container with the
# default model's byte-level BPE (models/kjv-moe-hf, 4096 tokens, all ids
# inside OLMoE's 50304; the ids past it are never admitted). Run as root.
# Writes results/grammar-<date>.md and .json.
#
#   bench/grammar.sh     # about 15 minutes the first time (generate + convert the shape)
#
# Environment: BENCH_TOKENS [256], BENCH_REPEAT [2], BENCH_FIO_SECONDS [2], BENCH_JSON_WS
# [none: compact JSON, run --json-ws],
# BENCH_IO_DEPTH [32], BENCH_CGROUP_LIMIT [2G], BENCH_CGROUP_RAM [1536M].
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init grammar
tokens=${BENCH_TOKENS:-256}
json_ws=${BENCH_JSON_WS:-none}
repeat=${BENCH_REPEAT:-2}
fio_s=${BENCH_FIO_SECONDS:-2}
depth=${BENCH_IO_DEPTH:-32}
cg_limit=${BENCH_CGROUP_LIMIT:-2G}
cg_ram=${BENCH_CGROUP_RAM:-1536M}
say() { echo "grammar: $*" >&2; }
[ -x "$colibri" ] || { say "$colibri is missing: run make"; exit 1; }
mkdir -p "$work" "$results"

ctr=$(prepare_olmoe 16 int4)
tokctr=$ctr-kjvtok
if [ ! -f "$tokctr/tokenizer.json" ]; then
  rm -rf "$tokctr"
  cp -al "$ctr" "$tokctr"
  cp "$root/models/kjv-moe-hf/tokenizer.json" "$root/models/kjv-moe-hf/tokenizer_config.json" "$tokctr/"
fi
cmd="BENCH_TOKENS=$tokens BENCH_REPEAT=$repeat BENCH_JSON_WS=$json_ws bench/grammar.sh"
"$py" "$here/grammar_runs.py" --model "$tokctr" --schema "$here/schemas/extraction.json" \
    --out "$results/grammar-$date.json" --md "$results/grammar-$date.md" --colibri "$colibri" \
    --cgroup-limit "$cg_limit" --ram "$cg_ram" --tokens "$tokens" --repeat "$repeat" \
    --fio-seconds "$fio_s" --io-depth "$depth" --json-ws "$json_ws" --scratch "$work/runs-$date" --command "$cmd"
