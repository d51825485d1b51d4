#!/bin/sh
# dashboard_shot.sh — the README's picture of the web dashboard
# (docs/dashboard.png, docs/DASHBOARD.md says how it is made): starts
# `colibri serve` on the default model, then tools/dashboard_shot.mjs chats
# twice in headless Chromium, keeps the server decoding from two clients and
# screenshots the page while the throughput card shows the decode rate.
#   tools/dashboard_shot.sh [OUT.png] [SERVE_OPTION...]   (default docs/dashboard.png)
# COLIBRI: the binary (default build/colibri); COLIBRI_CHROMIUM: the browser
# (default chromium in PATH). Needs node and tools/node_modules (./setup.sh).
set -eu
cd "$(dirname "$0")/.."
out=${1:-docs/dashboard.png}
[ $# -gt 0 ] && shift
bin=${COLIBRI:-build/colibri}
chromium=${COLIBRI_CHROMIUM:-$(command -v chromium || true)}
[ -x "$bin" ] || { echo "dashboard_shot: no $bin (run make, or set COLIBRI)" >&2; exit 1; }
[ -n "$chromium" ] || { echo "dashboard_shot: no chromium in PATH (./setup.sh installs it)" >&2; exit 1; }

log=$(mktemp)
"$bin" serve --port 0 "$@" >"$log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
# The first run converts the default model (once), hence the long wait.
port=
for _ in $(seq 1200); do
  port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "dashboard_shot: the server did not start:" >&2
  cat "$log" >&2
  exit 1
fi
node tools/dashboard_shot.mjs "http://127.0.0.1:$port" "$out" "$chromium"
