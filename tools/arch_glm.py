"""glm4_moe (GLM-4.5 / GLM-4.6 family) pieces for arch_deepseek.py.

The MoE part (sigmoid router with e_score_correction_bias, grouped top-k,
shared expert, first_k_dense_replace, MTP layers) is DeepSeek-V3's and
lives in arch_deepseek.py; this module holds the attention (GQA with q/k/v
biases, per-head q_norm / k_norm, partial rotary) and the config fields.
"""

GLM_TINY = dict(kv_heads=2, head_dim=64, partial_rotary_factor=0.5, rope_theta=1000000,
                n_group=1, topk_group=1, max_pos=4096)


def config(common, vocab):
    """config.json with the field names of zai-org/GLM-4.5's."""
    t = GLM_TINY
    return dict(common,
                architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe",
                attention_bias=True, head_dim=t["head_dim"],
                max_position_embeddings=t["max_pos"], n_group=t["n_group"],
                num_key_value_heads=t["kv_heads"],
                partial_rotary_factor=t["partial_rotary_factor"],
                rms_norm_eps=1e-05, rope_scaling=None, rope_theta=t["rope_theta"],
                topk_group=t["topk_group"], transformers_version="4.54.0",
                use_qk_norm=True)


def special_ids(vocab):
    # GLM-4.5: pad = eos[0] = <|endoftext|>, then <|user|> and <|observation|>
    # also end a turn; no bos_token_id in config.json.
    eos = [vocab - 12, vocab - 5, vocab - 3]
    return ({"pad_token_id": eos[0], "eos_token_id": eos},
            {"eos_token_id": eos, "pad_token_id": eos[0]})


def attention_specs(cfg, p):
    """(name, shape, kind, std) of one layer's attention; p ends with '.'."""
    H = cfg["hidden_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    a = p + "self_attn."
    # HF Glm4MoeAttention: q/k/v Linear with bias=attention_bias, o_proj
    # without bias; q_norm / k_norm RMSNorm(head_dim) when use_qk_norm.
    yield a + "q_proj.weight", (nh * hd, H), "proj", H ** -0.5
    yield a + "k_proj.weight", (nkv * hd, H), "proj", H ** -0.5
    yield a + "v_proj.weight", (nkv * hd, H), "proj", H ** -0.5
    if cfg.get("attention_bias"):
        # Biases comparable to the projections' outputs, so that a dropped
        # bias (or one added after q_norm) shows in the logits.
        yield a + "q_proj.bias", (nh * hd,), "bias", 0.5
        yield a + "k_proj.bias", (nkv * hd,), "bias", 0.5
        yield a + "v_proj.bias", (nkv * hd,), "bias", 0.5
    yield a + "o_proj.weight", (H, nh * hd), "proj", 0.7 * (nh * hd) ** -0.5
    if cfg.get("use_qk_norm"):
        yield a + "q_norm.weight", (hd,), "norm", 0.1
        yield a + "k_norm.weight", (hd,), "norm", 0.1
