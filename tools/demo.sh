#!/bin/sh
# The main job on the default model: models/kjv-moe-hf, a toy Qwen3-MoE
# (5M parameters, 8 experts, top-2) that tools/train_demo.py trained on the
# King James Bible. Converts it to an int4 container, as any downloaded
# checkpoint is converted, then writes a continuation and answers a chat
# turn, with statistics. Real checkpoints take the same two commands:
#   ./colibri convert HF_DIR OUT_DIR && ./colibri run --model OUT_DIR --prompt ...
set -eu
cd "$(dirname "$0")/.."
hf=models/kjv-moe-hf
out=models/kjv-moe
./colibri convert "$hf" "$out" --force
echo
prompt="And it came to pass"
echo "== colibri run --model $out --prompt '$prompt' -n 80 --seed 7 --stats"
printf '%s' "$prompt"
./colibri run --model "$out" --prompt "$prompt" -n 80 --seed 7 --stats
echo
question="Who made the heaven and the earth?"
echo "== colibri run --model $out --chat --prompt '$question' -n 80 --seed 7"
echo "> $question"
./colibri run --model "$out" --chat --prompt "$question" -n 80 --seed 7
echo
echo "(a toy trained in 30 minutes on two CPU cores: it writes King James English, it does not know things;"
echo " colibri chat and colibri serve use it when no --model is given)"
