#!/bin/sh
# colibri against llama.cpp on the same weights, as a user would run each.
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp bench/vs_llama.sh   (root: caps, drop_caches)
#
# The model is the OLMoE-1B-7B shape (tools/gen_model.py --shape olmoe-1b-7b,
# BENCH_VS_LAYERS layers, 16 by default: the real model's 13.8 GB of bf16),
# generated once into bench/work/vsllama/. From those bf16 values come
#   colibri  --quant int4 (dense weights int8, the default),
#            --quant int4 --dense-quant int4 (byte for byte Q4_0's size),
#            --quant int8;
#   llama.cpp Q4_0 and Q8_0 GGUFs (tools/gguf_write.py: the same bf16
#            values, quantized as ggml's reference quantizer does).
# llama.cpp is found or built by bench/llama_cpp.sh (LLAMA_CPP_DIR; without
# it the benchmark is skipped and says why). bench/vs_llama_runs.py runs both
# engines alternately, with fio on the same files before each pair: in RAM
# (Q4_0 vs both int4 containers, Q8_0 vs int8), under 2 GiB (greedy and
# sampled) and 1 GiB memory cgroups, and pp512. bench/vs_llama_report.py
# writes bench/results/vs-llama-<date>.md (raw JSON beside it).
#
# Needs about 45 GB free in bench/work/vsllama (13.8 GB bf16 source, kept for
# reruns; BENCH_VS_DROP_SOURCE=1 deletes it after the conversions).
# Environment: COLIBRI, LLAMA_CPP_DIR, BENCH_VS_LAYERS [16], BENCH_TOKENS [32],
#   BENCH_REPEAT [2], BENCH_FIO_SECONDS [5], BENCH_VS_ONLY [ram,2G,1G,pp],
#   BENCH_RESULTS.
# BENCH_VS_ONLY=prepare stops after the bf16 source and the two GGUFs (and
# finding or building llama.cpp), before any colibri conversion or run:
# the peer's side made ahead, no colibri binary needed; the containers come
# from the colibri that will be measured.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
. "$here/llama_cpp.sh"
bench_init vsllama build/colibri
layers=${BENCH_VS_LAYERS:-16}
tokens=${BENCH_TOKENS:-32}
repeat=${BENCH_REPEAT:-2}
only=${BENCH_VS_ONLY:-ram,2G,1G,pp}

if ! llama_cpp_find; then
  model_say "skipped: no llama.cpp (set LLAMA_CPP_DIR to its source tree or binaries)"
  exit 0
fi
[ "$only" = prepare ] || [ -x "$colibri" ] || { model_say "no colibri binary at $colibri (make first)"; exit 1; }
[ "$only" = prepare ] || [ "$(id -u)" = 0 ] || model_say "not root: the capped runs are skipped and the page cache is not dropped"
[ "$only" = prepare ] || command -v fio >/dev/null || { model_say "needs fio"; exit 1; }

mkdir -p "$work" "$results"
src=$work/olmoe-1b-7b-${layers}l-bf16
if [ ! -f "$src/.complete" ]; then
  rm -rf "$src"
  model_say "generating $src"
  "$py" "$root/tools/gen_model.py" --shape olmoe-1b-7b --layers "$layers" --out "$src" >&2
  touch "$src/.complete"
fi

convert() { # NAME ARGS...
  _out=$work/olmoe-${layers}l-$1; shift
  if [ ! -f "$_out/manifest.json" ]; then
    model_say "converting: colibri convert $src $_out $*"
    "$colibri" convert "$src" "$_out" --force "$@" >&2
  fi
  echo "$_out"
}
gguf() { # TYPE
  _out=$work/olmoe-${layers}l-$1.gguf
  if [ ! -f "$_out" ]; then
    model_say "writing $_out"
    "$py" "$root/tools/gguf_write.py" --model "$src" --out "$_out" --type "$1" >&2
  fi
  echo "$_out"
}
if [ "$only" = prepare ]; then
  g4=$(gguf q4_0)
  g8=$(gguf q8_0)
  model_say "prepared: $src, $g4, $g8 (llama.cpp: $llama_bin)"
  exit 0
fi
c4=$(convert int4 --quant int4)
c4d=$(convert int4-dense-int4 --quant int4 --dense-quant int4)
c8=$(convert int8 --quant int8)
g4=$(gguf q4_0)
g8=$(gguf q8_0)
[ "${BENCH_VS_DROP_SOURCE:-0}" = 1 ] && rm -rf "$src"

raw=$results/vs-llama-$date.json
"$py" "$here/vs_llama_runs.py" --llama-bin "$llama_bin" --colibri "$colibri" --out "$raw" \
  --tokens "$tokens" --repeat "$repeat" --fio-seconds "${BENCH_FIO_SECONDS:-5}" --only "$only" \
  --llama-flags "$llama_flags" \
  --pair "Q4_0 vs int4:$g4:$c4" --pair "Q4_0 vs int4 dense int4:$g4:$c4d" --pair "Q8_0 vs int8:$g8:$c8"
"$py" "$here/vs_llama_report.py" "$raw" --out "$results/vs-llama-$date.md"
