# Sourced by bench/mirror.sh and bench/pinning.sh: the benchmark model.
#
# prepare_olmoe LAYERS QUANT -> prints the container folder
#   bench/work/olmoe12/olmoe-1b-7b-<LAYERS>l-<QUANT>, generated once:
#   tools/gen_model.py --shape olmoe-1b-7b --layers LAYERS --weights-dtype fp8
#   (random weights, skewed token-dependent routing), converted with
#   colibri convert --quant QUANT, the source deleted afterwards.
# Needs: $root (repository), $colibri (binary), $py (/usr/bin/python3).

model_say() { echo "bench: $*" >&2; }

prepare_olmoe() {
  _layers=$1; _quant=$2
  _dir=${BENCH_MODEL_DIR:-$root/bench/work/olmoe12}
  _src=$_dir/olmoe-1b-7b-${_layers}l-fp8
  _ctr=$_dir/olmoe-1b-7b-${_layers}l-$_quant
  if [ -f "$_ctr/manifest.json" ] && [ -f "$_ctr/bench-provenance.txt" ]; then
    model_say "$_ctr exists: no generation or conversion"
    echo "$_ctr"; return 0
  fi
  mkdir -p "$_dir"
  _gen="$py $root/tools/gen_model.py --shape olmoe-1b-7b --layers $_layers --weights-dtype fp8 --out $_src"
  if [ ! -f "$_src/.complete" ]; then
    rm -rf "$_src"
    model_say "generating: $_gen"
    $_gen >&2 || { model_say "generation failed"; return 1; }
    touch "$_src/.complete"
  fi
  _conv="$colibri convert $_src $_ctr --quant $_quant --force"
  model_say "converting: $_conv"
  $_conv >&2 || { model_say "conversion failed"; return 1; }
  { echo "date: $(date -Iseconds)"; echo "generate: $_gen"; echo "convert: $_conv"
    echo "gen_model.py sha256: $(sha256sum "$root/tools/gen_model.py" | cut -d' ' -f1)"; } \
    > "$_ctr/bench-provenance.txt"
  rm -rf "$_src"
  echo "$_ctr"
}

# The exact colibri revision, for the reports: HEAD, flagged when the
# sources have uncommitted changes or $colibri is older than the last commit
# that touched them (a binary built before HEAD).
colibri_rev() {
  _r=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git -C "$root" status --porcelain -- storage engine compute planner 2>/dev/null)" ]; then
    _r="$_r (+ uncommitted changes in storage/ engine/ compute/ planner/)"
  fi
  _c=$(git -C "$root" log -1 --format=%ct -- storage engine compute planner 2>/dev/null || echo 0)
  if [ -n "$_c" ] && [ "$(stat -c %Y "$colibri")" -lt "$_c" ]; then
    _r="$_r (WARNING: $colibri was built before the last source commit; rebuild)"
  fi
  echo "$_r"
}
