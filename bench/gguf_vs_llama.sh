#!/bin/sh
# colibri against llama.cpp on the same GGUF file: the file llama.cpp
# decodes is the one `colibri convert FILE.gguf OUT` converts, so both
# engines hold the same weight blocks.
#
#   LLAMA_CPP_DIR=/work/llama.cpp-81ff7abe5 nice -n 10 bench/gguf_vs_llama.sh
#                                                (root: caps, drop_caches)
#
# The model is the OLMoE-1B-7B shape (tools/gen_model.py --shape
# olmoe-1b-7b, BENCH_GGUF_LAYERS layers, 16 by default), the bf16 source
# shared with bench/vs_llama.sh in bench/work/vsllama/ (generated there when
# missing, kept for reruns). From it come the GGUFs, beside vs_llama.sh's:
#   Q8_0, Q4_0  tools/gguf_write.py (ggml's reference quantizers);
#   Q4_K_M      llama-quantize from a BF16 GGUF (tools/gguf_write.py --type
#               bf16, deleted afterwards unless BENCH_GGUF_KEEP_BF16=1), the
#               mix a user downloads: Q4_K experts and attention, Q6_K for
#               the output and some down projections.
# Each is converted by `colibri convert FILE.gguf` into
# bench/work/ggufvsllama/olmoe-<L>l-<type>-from-gguf. Then
# bench/gguf_vs_llama_runs.py measures, for every GGUF: teacher-forced top-1
# agreement of the two engines' logits on 256 fixed random ids
# (bench/llama_logits.c against libllama, compiled here, and `colibri
# logits`), and decode tok/s of both alternately with fio before each pair,
# in RAM and under a 2 GiB memory cgroup; bench/gguf_vs_llama_report.py
# writes bench/results/gguf-vs-llama-<date>.md (-<L>l when not 16 layers)
# and the raw JSON beside it.
#
# BENCH_GGUF_STANDIN=1 converts the colibri side from the HF directory
# instead (--quant int8 for Q8_0, int4 with int4 dense weights for Q4_0 and
# Q4_K_M): not the same weights, for trying the benchmark where `colibri
# convert FILE.gguf` is missing; its report is named -standin and says so.
# BENCH_GGUF_TYPES may add f32 (tools/gguf_write.py --type f32; its
# stand-in is --quant f32, the same values as the file, and llama.cpp
# multiplies F32 by f32 activations): the control for the agreement
# measurement itself, which must then agree at every position.
#
# llama.cpp is found, or built, by bench/llama_cpp.sh (its opening comment:
# how to get the source at 81ff7abe5 and the exact cmake line); this needs a
# source tree (llama.h for llama_logits, libllama, llama-quantize, which is
# built here when the tree lacks it).
#
# Disk: 16 layers need about 60 GB at the peak (13.8 GB source, 13.8 GB
# BF16 GGUF until Q4_K_M is made, 15.4 GB of GGUFs, as much again of
# containers); 4 layers about a quarter. Memory: the Q8_0 pair in RAM is
# 14.6 GB of page cache.
# Environment: COLIBRI, LLAMA_CPP_DIR, BENCH_GGUF_LAYERS [16],
#   BENCH_GGUF_TYPES ["q8_0 q4_0 q4_k_m"], BENCH_GGUF_ONLY [agree,ram,2G],
#   BENCH_AGREE_TOKENS [256], BENCH_TOKENS [32], BENCH_REPEAT [2],
#   BENCH_FIO_SECONDS [5], BENCH_GGUF_STANDIN, BENCH_GGUF_KEEP_BF16,
#   BENCH_NOTE (a line for the report: how colibri was built, the
#   machine), BENCH_DIR, BENCH_RESULTS.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
. "$here/llama_cpp.sh"
bench_init ggufvsllama build/colibri
layers=${BENCH_GGUF_LAYERS:-16}
types=${BENCH_GGUF_TYPES:-q8_0 q4_0 q4_k_m}
standin=${BENCH_GGUF_STANDIN:-0}
srcdir=$(dirname "$work")/vsllama

say() { echo "gguf_vs_llama: $*" >&2; }
die() { say "$*"; exit 1; }

if ! llama_cpp_find; then
  say "skipped: no llama.cpp (set LLAMA_CPP_DIR to its source tree; see bench/llama_cpp.sh)"
  exit 0
fi
[ -x "$colibri" ] || die "no colibri binary at $colibri (make first)"
[ "$(id -u)" = 0 ] || say "not root: the 2 GiB runs are skipped and the page cache is not dropped"
command -v fio >/dev/null || die "needs fio"
"$py" -c 'import numpy' 2>/dev/null || die "$py has no numpy"

# The source tree above build/bin: headers for llama_logits, the place to
# build llama-quantize.
llama_src=$(cd "$llama_bin/../.." && pwd)
if [ ! -f "$llama_src/include/llama.h" ] || [ ! -f "$llama_src/ggml/include/ggml.h" ]; then
  die "$llama_src is not a llama.cpp source tree (no include/llama.h); set LLAMA_CPP_DIR to one"
fi
[ -e "$llama_bin/libllama.so" ] || die "$llama_bin has no libllama.so"
case " $types " in
  *" q4_k_m "*)
    if [ ! -x "$llama_bin/llama-quantize" ]; then
      say "building llama-quantize in $llama_src/build"
      nice -n 10 cmake --build "$llama_src/build" -j 2 --target llama-quantize >&2 ||
        die "building llama-quantize failed (see above)"
    fi ;;
esac

mkdir -p "$work" "$srcdir" "$results"

logits_bin=$work/llama_logits
if [ ! -x "$logits_bin" ] || [ "$here/llama_logits.c" -nt "$logits_bin" ] ||
   [ "$llama_bin/libllama.so" -nt "$logits_bin" ]; then
  say "compiling $logits_bin against $llama_src"
  cc -std=c11 -O2 -Wall -Wextra -Werror -I"$llama_src/include" -I"$llama_src/ggml/include" \
    "$here/llama_logits.c" -o "$logits_bin" -L"$llama_bin" -lllama -Wl,-rpath,"$llama_bin" ||
    die "compiling bench/llama_logits.c failed (see above)"
fi

src=$srcdir/olmoe-1b-7b-${layers}l-bf16
if [ ! -f "$src/.complete" ]; then
  rm -rf "$src"
  say "generating $src (tools/gen_model.py --shape olmoe-1b-7b --layers $layers)"
  "$py" "$root/tools/gen_model.py" --shape olmoe-1b-7b --layers "$layers" --out "$src" >&2 ||
    die "generating $src failed"
  touch "$src/.complete"
else
  say "$src exists: no generation"
fi

gguf_path() { echo "$srcdir/olmoe-${layers}l-$1.gguf"; }

make_gguf() { # TYPE -> the GGUF's path
  _out=$(gguf_path "$1")
  if [ -f "$_out" ]; then
    say "$_out exists"
  elif [ "$1" = q4_k_m ]; then
    _bf=$(gguf_path bf16)
    if [ ! -f "$_bf" ]; then
      say "writing $_bf (tools/gguf_write.py --type bf16), for llama-quantize"
      "$py" "$root/tools/gguf_write.py" --model "$src" --out "$_bf" --type bf16 --quiet >&2 ||
        die "tools/gguf_write.py --type bf16 failed"
    fi
    say "llama-quantize $_bf -> $_out Q4_K_M"
    nice -n 10 "$llama_bin/llama-quantize" "$_bf" "$_out.tmp" Q4_K_M 2 > "$work/llama-quantize.log" 2>&1 || {
      tail -20 "$work/llama-quantize.log" >&2; rm -f "$_out.tmp"; die "llama-quantize failed (log: $work/llama-quantize.log)"; }
    mv "$_out.tmp" "$_out"
    [ "${BENCH_GGUF_KEEP_BF16:-0}" = 1 ] || rm -f "$_bf"
  else
    say "writing $_out (tools/gguf_write.py --type $1)"
    "$py" "$root/tools/gguf_write.py" --model "$src" --out "$_out" --type "$1" --quiet >&2 ||
      die "tools/gguf_write.py --type $1 failed"
  fi
  echo "$_out"
}

# The container of one GGUF, converted again when the GGUF (size, mtime)
# or the colibri binary changed since.
make_container() { # TYPE GGUF -> the container's path
  if [ "$standin" = 1 ]; then
    # One container per quantization: Q4_0 and Q4_K_M share theirs.
    case $1 in
      f32) set -- "$1" "$2" --quant f32; _ctr=$work/olmoe-${layers}l-standin-f32 ;;
      q8_0) set -- "$1" "$2" --quant int8; _ctr=$work/olmoe-${layers}l-standin-int8 ;;
      *) set -- "$1" "$2" --quant int4 --dense-quant int4; _ctr=$work/olmoe-${layers}l-standin-int4-dense-int4 ;;
    esac
    _from="$src $(shift 2; echo "$@")"
    _cmd="$colibri convert $src $_ctr --force $(shift 2; echo "$@")"
  else
    _ctr=$work/olmoe-${layers}l-$1-from-gguf
    _from="$2 $(stat -c '%s %Y' "$2")"
    _cmd="$colibri convert $2 $_ctr --force"
  fi
  _stamp="$_from; colibri $(stat -c '%s %Y' "$colibri")"
  if [ -f "$_ctr/manifest.json" ] && [ "$(cat "$_ctr/bench-from.txt" 2>/dev/null)" = "$_stamp" ]; then
    say "$_ctr is up to date"
  else
    say "converting: $_cmd"
    # shellcheck disable=SC2086  # the command's words (no spaces in the paths)
    if ! nice -n 10 $_cmd >&2; then
      if [ "$standin" = 1 ]; then
        die "colibri convert of $src failed (see above)"
      fi
      die "colibri convert $2 failed (see above): this benchmark needs \`colibri convert FILE.gguf OUT\` (issue 21); BENCH_GGUF_STANDIN=1 tries the rest with containers converted from the HF directory"
    fi
    echo "$_stamp" > "$_ctr/bench-from.txt"
  fi
  echo "$_ctr"
}

pairs=
for t in $types; do
  case $t in
    q8_0|q4_0|q4_k_m|f32) ;;
    *) die "BENCH_GGUF_TYPES: unknown type $t (q8_0, q4_0, q4_k_m, f32)" ;;
  esac
  g=$(make_gguf "$t")
  c=$(make_container "$t" "$g")
  name=$(echo "$t" | tr '[:lower:]' '[:upper:]')
  pairs="$pairs --pair $name:$g:$c"
done

suffix=
[ "$layers" = 16 ] || suffix="$suffix-${layers}l"
[ "$standin" = 1 ] && suffix="$suffix-standin"
raw=$results/gguf-vs-llama-$date$suffix.json
note="OLMoE-1B-7B shape, $layers layers (tools/gen_model.py, random weights); colibri $(colibri_rev); llama.cpp $llama_src (81ff7abe5)."
say "measuring: $raw"
standin_arg=
[ "$standin" = 1 ] && standin_arg=--standin
# shellcheck disable=SC2086  # $pairs: --pair words; no spaces in the paths
"$py" "$here/gguf_vs_llama_runs.py" --llama-bin "$llama_bin" --llama-logits "$logits_bin" --colibri "$colibri" \
  --out "$raw" --agree-tokens "${BENCH_AGREE_TOKENS:-256}" --tokens "${BENCH_TOKENS:-32}" \
  --repeat "${BENCH_REPEAT:-2}" --fio-seconds "${BENCH_FIO_SECONDS:-5}" --only "${BENCH_GGUF_ONLY:-agree,ram,2G}" \
  --note "$note" ${BENCH_NOTE:+--note "$BENCH_NOTE"} $standin_arg $pairs
"$py" "$here/gguf_vs_llama_report.py" "$raw" --out "${raw%.json}.md"
say "wrote ${raw%.json}.md"
