#!/bin/sh
# The soak: colibri serve --parallel 4 under a memory cgroup for a fixed
# time, with a bounded mix of clients on loopback, SIGKILL and restart every
# few minutes on the same --sessions folder and a mirror file damaged half
# way; requests per outcome, time to first token, RSS against the budget,
# sessions lost and the fixed greedy request's text at start and end.
# A benchmark, not a test: `make test` does not run it.
#
#   bench/soak.sh [--minutes 30] [--model DIR] [--ram 64M] [--cgroup-limit SIZE]
#                 [--clients 6] [--restart-every S] [--out FILE]
#
#   --model DIR      a container (default: the default model, models/kjv-moe-hf,
#                    converted afresh into bench/work/soak/kjv-moe with a mirror
#                    in bench/work/soak/kjv-moe-mirror, as the tests make it).
#                    If DIR has a mirror, half way one byte of each expert
#                    record of one of the mirror's layer files is flipped, and
#                    flipped back when the soak ends (a SIGKILL of the soak
#                    itself leaves it flipped: run `colibri mirror` again).
#   --ram SIZE       serve's --ram, the budget RSS is reported against
#   --cgroup-limit   the memory group's limit (default: twice --ram)
#   --restart-every  seconds between kills, +-30% (default 180, or a fifth
#                    of a soak under 15 minutes)
#   --out FILE       the report (default bench/results/soak-<date>.md; the raw
#                    JSON beside it)
#
# Steps: the model (and its mirror); a cgroup v1 memory group
# /sys/fs/cgroup/memory/colibri-soak (root; without root the soak runs
# uncapped and the report says so); bench/soak_client.py, which starts the
# server inside the group, drives it and writes the report. On any exit the
# trap stops the client and the server (by their pids) and removes the
# group. Environment: COLIBRI, BENCH_DIR, BENCH_RESULTS, BENCH_NOTE (a
# line for the report).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/model_lib.sh"
bench_init soak build/colibri
[ -x "$colibri" ] || { model_say "$colibri is missing: run make"; exit 1; }

minutes=30 model='' ram=64M limit='' clients=6 every=0 out=''
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { model_say "$1 needs a value"; exit 2; }
  case $1 in
    --minutes) minutes=$2 ;;
    --model) model=$2 ;;
    --ram) ram=$2 ;;
    --cgroup-limit) limit=$2 ;;
    --clients) clients=$2 ;;
    --restart-every) every=$2 ;;
    --out) out=$2 ;;
    *) model_say "unknown option $1 (see the head of $0)"; exit 2 ;;
  esac
  shift 2
done
out=${out:-$results/soak-$date.md}
mkdir -p "$work" "$(dirname "$out")"

if [ -z "$model" ]; then
  model=$work/kjv-moe
  rm -rf "$model" "$work/kjv-moe-mirror"
  "$colibri" convert "$root/models/kjv-moe-hf" "$model" >&2
  "$colibri" mirror --model "$model" --to "$work/kjv-moe-mirror" >&2
fi
[ -f "$model/manifest.json" ] || { model_say "$model holds no container"; exit 1; }

sessions=$work/sessions log=$work/serve.log
rm -rf "$sessions" "$log"

cg='' client=''
cleanup() {
  [ -z "$client" ] || kill "$client" 2>/dev/null || true
  [ -z "$client" ] || wait "$client" 2>/dev/null || true
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    # The server is the client's child and dies with it; a pid still in
    # the group is one of ours: end it, then remove the group.
    for p in $(cat "$cg/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$(id -u)" = 0 ] && [ -d /sys/fs/cgroup/memory ]; then
  cg=/sys/fs/cgroup/memory/colibri-soak
  [ -d "$cg" ] && rmdir "$cg"
  mkdir "$cg"
  bytes=$("$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import soak_client as s; print(s.parse_size(sys.argv[2]))' \
    "$here" "${limit:-$ram}")
  [ -n "$limit" ] || bytes=$((bytes * 2))
  echo "$bytes" > "$cg/memory.limit_in_bytes"
else
  model_say "not root or no cgroup v1 memory hierarchy: the server runs uncapped (the report says so)"
fi

cmd="bench/soak.sh --minutes $minutes --ram $ram --clients $clients"
[ "$every" = 0 ] || cmd="$cmd --restart-every $every"
[ -z "$limit" ] || cmd="$cmd --cgroup-limit $limit"
"$py" "$here/soak_client.py" --colibri "$colibri" --model "$model" --sessions "$sessions" --log "$log" \
  --out "$out" --minutes "$minutes" --ram "$ram" --clients "$clients" --restart-every "$every" \
  --cgroup "$cg" --rev "$(colibri_rev)" --note "${BENCH_NOTE:-}" --command "$cmd" &
client=$!
rc=0
wait "$client" || rc=$?
client=''
exit "$rc"
