#!/bin/sh
# Compares two colibri builds bit for bit on every fixture and quant: each
# build converts each checkpoint of build/fixtures/hf at --quant f32, bf16,
# int8 and int4 with its own converter, then runs `logits` on the fixture's
# reference tokens (with --mtp-out where the model has an MTP module) and a
# short greedy `run`; the containers' data files, the logits files and the
# generated ids must be byte-identical. For restructurings that must not
# change behaviour: run it with the build before and the build after.
#
#   bench/same_logits.sh OLD_COLIBRI NEW_COLIBRI [FIXTURES]
#
# Prints one line per fixture and quant and a summary; exits 1 on the first
# difference's summary (all pairs are still compared).
set -u
old=${1:?usage: same_logits.sh OLD_COLIBRI NEW_COLIBRI [FIXTURES]}
new=${2:?usage: same_logits.sh OLD_COLIBRI NEW_COLIBRI [FIXTURES]}
fx=${3:-build/fixtures}
work=$(mktemp -d "${TMPDIR:-/tmp}/same-logits-XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
same=0
refused=0
differ=0
for hf in "$fx"/hf/*/; do
  name=$(basename "$hf")
  tokens=$(cat "$fx/ref/$name.tokens")
  for q in f32 bf16 int8 int4; do
    verdict=same
    for side in old new; do
      bin=$old
      [ "$side" = new ] && bin=$new
      out="$work/$side"
      rm -rf "$out"
      mkdir -p "$out"
      if ! "$bin" convert --quiet --quant "$q" "$hf" "$out/c" 2>"$out/err"; then
        # A conversion both builds refuse with the same message (a shape
        # the quant's groups do not divide) is the same behaviour: the
        # new build is asked too before the verdict.
        if [ "$side" = old ]; then
          verdict="convert failed (old): $(head -1 "$out/err")"
          continue
        fi
        if [ "$verdict" != same ] && [ "$(head -1 "$work/old/err")" = "$(head -1 "$out/err")" ]; then
          verdict="refused by both: $(head -1 "$out/err")"
        else
          verdict="convert failed (new): $(head -1 "$out/err")"
        fi
        break
      fi
      [ "$verdict" = same ] || break
      mtp=""
      [ -f "$fx/ref/$name.mtp.f32" ] && mtp="--mtp-out $out/mtp.f32"
      # shellcheck disable=SC2086
      if ! COLIBRI_CACHE_DIR="$out/cache" "$bin" logits --model "$out/c" --tokens "$tokens" \
             --out "$out/logits.f32" $mtp --no-pin 2>"$out/err" ||
         ! COLIBRI_CACHE_DIR="$out/cache" "$bin" run --model "$out/c" --tokens "$tokens" -n 8 \
             --temp 0 --no-pin >"$out/run.txt" 2>>"$out/err"; then
        verdict="run failed ($side): $(head -1 "$out/err")"
        break
      fi
      # The data files only: manifest.json may order keys differently.
      (cd "$out/c" && cat resident.bin experts/*.bin 2>/dev/null) | sha256sum >"$out/data.sha"
      [ -f "$out/mtp.f32" ] || : >"$out/mtp.f32"
    done
    if [ "$verdict" = same ]; then
      for f in data.sha logits.f32 mtp.f32 run.txt; do
        cmp -s "$work/old/$f" "$work/new/$f" || { verdict="differs: $f"; break; }
      done
    fi
    echo "$name $q: $verdict"
    case "$verdict" in
      same) same=$((same + 1)) ;;
      "refused by both: "*) refused=$((refused + 1)) ;;
      *) differ=$((differ + 1)) ;;
    esac
  done
done
echo "same_logits: $same identical, $refused refused alike by both, $differ different"
[ "$differ" -eq 0 ]
