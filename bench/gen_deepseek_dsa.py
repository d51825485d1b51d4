#!/usr/bin/python3
"""A DeepSeek-V3.2 (deepseek_v32) checkpoint with a mid-size attention for bench/dsa.sh.

    gen_deepseek_dsa.py --out HF_DIR [--seed S] [--index-topk K]

tools/gen_model.py --arch deepseek_v32 writes only the tiny test size
(4 heads, kv_lora_rank 64, an indexer of 8 heads of 32 dims keeping 4
positions), where attention costs next to nothing. This runs the same
generator with DeepSeek-V3's per-head attention dimensions and fewer heads:
hidden 1024, 2 layers (the first dense, one MoE), 16 heads, q_lora_rank 512,
kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128; the indexer 16 heads
of 128 dims (DeepSeek-V3.2: 64, GLM-5: 32) keeping --index-topk positions
(default 256; the real models keep 2048); 8 routed experts of width 256,
top-2 in one group, 1 shared expert, no MTP layer, vocab 4096, YaRN factor 4
over 4096 positions (max_position_embeddings 16384). About 90 MB of bf16.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import arch_deepseek  # noqa: E402
import gen_model  # noqa: E402

MID = dict(hidden=1024, layers=2, first_k_dense=1, heads=16, experts=8, top_k=2, n_shared=1,
           experts_ffn=256, dense_ffn=1024, mtp_layers=0)
MID_MLA = dict(q_lora_rank=512, kv_lora_rank=512, qk_nope=128, qk_rope=64, v_head=128,
               n_group=1, topk_group=1, max_pos=16384, yarn_factor=4, yarn_original_max=4096)
MID_DSA = dict(index_n_heads=16, index_head_dim=128, index_topk=256)
VOCAB = 4096


def main():
    argv = list(sys.argv[1:])
    if "--index-topk" in argv:
        i = argv.index("--index-topk")
        MID_DSA["index_topk"] = int(argv[i + 1])
        del argv[i:i + 2]
    arch_deepseek.TINY.update(MID)
    arch_deepseek.DEEPSEEK_TINY.update(MID_MLA)
    arch_deepseek.DSA_TINY.update(MID_DSA)
    return gen_model.main(["--arch", "deepseek_v32", "--vocab-size", str(VOCAB)] + argv)


if __name__ == "__main__":
    sys.exit(main())
