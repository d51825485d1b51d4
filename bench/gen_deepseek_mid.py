#!/usr/bin/python3
"""A mid-size DeepSeek-V3 checkpoint (with its MTP layer) for bench/drafting.sh.

    gen_deepseek_mid.py --out HF_DIR [--seed S]

tools/gen_model.py --arch deepseek_v3 writes only the tiny test size
(hidden 128, 16 experts of width 64: 16 KiB records, too small for the disk
to matter). This runs the same generator with larger dimensions: hidden
1024, 4 layers (the first dense, 3 MoE) plus 1 MTP layer, 64 routed experts
of width 512, top-8 in 8 groups (4 kept), 1 shared expert, vocab 4096, MLA
with q_lora_rank 256, kv_lora_rank 128, nope/rope/v head dims 64/32/64. About
0.9 GB of bf16; converted with --quant int4 the routed experts are records of
about 0.8 MiB (the MTP layer's stay int8, about 1.6 MiB).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import arch_deepseek  # noqa: E402
import gen_model  # noqa: E402

MID = dict(hidden=1024, layers=4, first_k_dense=1, heads=8, experts=64, top_k=8, n_shared=1,
           experts_ffn=512, dense_ffn=2048)
MID_MLA = dict(q_lora_rank=256, kv_lora_rank=128, qk_nope=64, qk_rope=32, v_head=64,
               n_group=8, topk_group=4)
VOCAB = 4096


def main():
    arch_deepseek.TINY.update(MID)
    arch_deepseek.DEEPSEEK_TINY.update(MID_MLA)
    argv = ["--arch", "deepseek_v3", "--vocab-size", str(VOCAB)] + sys.argv[1:]
    return gen_model.main(argv)


if __name__ == "__main__":
    sys.exit(main())
