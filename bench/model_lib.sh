# Sourced by the benchmark scripts (mirror.sh, pinning.sh, drafting.sh,
# dsa.sh): their common settings, the benchmark model, the --ram of a cache
# size and the colibri revision.
#
# bench_init NAME [FALLBACK] (with $here = bench/) sets
#   root     the repository
#   py       /usr/bin/python3
#   colibri  $COLIBRI, else ./colibri, else FALLBACK (relative to the
#            repository, when given and ./colibri is not executable); absolute
#   results  $BENCH_RESULTS, else bench/results
#   work     $BENCH_DIR/NAME, else bench/work/NAME
#   date     today, YYYY-MM-DD
#
# prepare_olmoe LAYERS QUANT -> prints the container folder (LAYERS '': the full shape)
#   bench/work/olmoe12/olmoe-1b-7b-<LAYERS>l-<QUANT>, generated once:
#   tools/gen_model.py --shape olmoe-1b-7b --layers LAYERS --weights-dtype fp8
#   (random weights, skewed token-dependent routing), converted with
#   colibri convert --quant QUANT, the source deleted afterwards.
# Needs: $root (repository), $colibri (binary), $py (/usr/bin/python3).
#
# decode_report NAME CTR SCRIPT SETTINGS: bench/decode_runs.py over the
#   container CTR (fio before each run, the budgets cold and warm, the
#   capped runs when $cg_limit is set), then bench/report.py into
#   $results/decode-NAME-$date.md; "SETTINGS SCRIPT" is the command line the
#   report records. Reads $tokens $budgets $modes $repeat $fio_s $depth
#   $threads $cg_limit $cg_ram $work. Returns 1 when some runs failed.

bench_init() {
  root=$(cd "$here/.." && pwd)
  py=/usr/bin/python3
  colibri=${COLIBRI:-$root/colibri}
  [ -z "${2:-}" ] || [ -x "$colibri" ] || [ -n "${COLIBRI:-}" ] || colibri=$root/$2
  colibri=$(cd "$(dirname "$colibri")" && pwd)/$(basename "$colibri")
  results=${BENCH_RESULTS:-$root/bench/results}
  work=${BENCH_DIR:-$root/bench/work}/$1
  date=$(date +%Y-%m-%d)
}

model_say() { echo "bench: $*" >&2; }

prepare_olmoe() {
  _layers=$1; _quant=$2
  if [ -n "$_layers" ]; then
    _dir=${BENCH_MODEL_DIR:-$root/bench/work/olmoe12} _cut=-${_layers}l _flag="--layers $_layers "
  else # the full shape, where decode.sh keeps it
    _dir=${BENCH_MODEL_DIR:-${BENCH_DIR:-$root/bench/work}} _cut= _flag=
  fi
  _src=$_dir/olmoe-1b-7b${_cut}-fp8
  _ctr=$_dir/olmoe-1b-7b${_cut}-$_quant
  if [ -f "$_ctr/manifest.json" ] && [ -f "$_ctr/bench-provenance.txt" ]; then
    model_say "$_ctr exists: no generation or conversion"
    echo "$_ctr"; return 0
  fi
  mkdir -p "$_dir"
  _gen="$py $root/tools/gen_model.py --shape olmoe-1b-7b ${_flag}--weights-dtype fp8 --out $_src"
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

# ram_for_cache CTR PERCENT CTX -> the --ram value (e.g. 1246M) that gives
# an expert cache of PERCENT of CTR's expert bytes: on top of it the session
# (session.c) holds the resident weights, the KV cache of CTX positions and
# 64 MiB of scratch; 16 MiB more for the process and reserve.
ram_for_cache() {
  $py - "$1" "$2" "$3" <<'EOF'
import json, os, sys
ctr, pct, ctx = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
m = json.load(open(os.path.join(ctr, "manifest.json")))
c = json.load(open(os.path.join(ctr, "config.json")))
e = m["experts"]
experts = sum(l["record_bytes"] for l in e["layers"]) * e["n_experts"]
heads = c["num_attention_heads"]; kv = c.get("num_key_value_heads") or heads
hd = c.get("head_dim") or c["hidden_size"] // heads
kvb = 2 * c["num_hidden_layers"] * ctx * kv * hd * 4
total = m["resident"]["bytes"] + kvb + (64 << 20) + (16 << 20) + int(experts * pct / 100)
print("%dM" % -(-total // (1 << 20)))
EOF
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

decode_report() {
  _name=$1 _ctr=$2 _script=$3 _settings=$4
  _raw="$results/decode-$_name-$date.json"
  set -- "$py" "$here/decode_runs.py" --model "$_ctr" --out "$_raw" --label "$_name" \
      --colibri "$colibri" --tokens "$tokens" --budgets "$budgets" --modes "$modes" \
      --repeat "$repeat" --fio-seconds "$fio_s" --io-depth "$depth" --threads "$threads" \
      --scratch "$work"
  [ -n "$cg_limit" ] && set -- "$@" --cgroup-limit "$cg_limit" --cgroup-ram "$cg_ram"
  _status=0
  "$@" --command "$_settings $_script  ->  $*" || { model_say "$_name: some runs failed (see $_raw)"; _status=1; }
  "$py" "$here/report.py" "$_raw" --out "$results/decode-$_name-$date.md" \
      --title "colibri decode benchmark: $_name"
  model_say "results: $results/decode-$_name-$date.md"
  return $_status
}
