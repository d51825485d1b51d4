#!/bin/sh
# Every benchmark, in turn (make bench): decode, mirrors, pinning, drafting, DSA. Not part of make test: the decode
# benchmark generates a 14 GB checkpoint once, keeps a 4.3 GB container in
# bench/work/, and runs for about ten minutes. See bench/README.md.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
"$here/decode.sh"
"$here/mirror.sh"
"$here/pinning.sh"
"$here/drafting.sh"
"$here/dsa.sh"
