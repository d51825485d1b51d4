/*
 * model_config — the hyperparameters of a model, read from its HF config.json.
 *
 * A family is a configuration, not a separate engine: its hyperparameters
 * (with transformers v5.15.0's defaults where config.json is silent) and
 * one row of block kinds per layer (struct layer_row: the mixer, the FFN,
 * the norm, the residual), which the forward pass walks. Variants inside a
 * kind (q/k norm, router, biases) are fields; fields a family does not use
 * keep neutral values.
 */
#ifndef COLIBRI_ENGINE_MODEL_CONFIG_H
#define COLIBRI_ENGINE_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

enum model_arch {
	MODEL_ARCH_OLMOE = 0,
	MODEL_ARCH_QWEN3_MOE,
	MODEL_ARCH_MIXTRAL,
	MODEL_ARCH_DEEPSEEK_V3,
	MODEL_ARCH_GLM4_MOE,
	MODEL_ARCH_DEEPSEEK_V32,     /* DeepSeek-V3.2: deepseek_v3 plus the DSA indexer */
	MODEL_ARCH_GLM_MOE_DSA,      /* GLM-5: the same blocks, GLM's RoPE defaults */
	MODEL_ARCH_QWEN3_5_MOE,      /* Qwen3.5 / Qwen3.6 MoE: Gated DeltaNet + gated attention */
	MODEL_ARCH_QWEN3_NEXT,       /* Qwen3-Next: the same blocks, fused grouped DeltaNet projections */
	MODEL_ARCH_DEEPSEEK_V4,      /* DeepSeek-V4: shared-KV MQA with CSA/HCA compression, hyper-connections */
	MODEL_ARCH_MINIMAX_M2,       /* MiniMax-M2: GQA with whole-projection q/k norms, sigmoid-routed MoE */
	MODEL_ARCH_GPT_OSS,          /* gpt-oss: GQA with sinks, sliding / full layers, biased experts */
	MODEL_ARCH_INKLING,          /* Inkling: relative-position attention, short convolutions (the last) */
};

/* A layer is a row of block kinds (struct layer_row); the forward pass
 * walks the rows (engine/forward/block.h). */

/* Token mixer: grouped-query attention over per-head K/V; DeepSeek's
 * multi-head latent attention over a compressed KV cache; MLA whose keys
 * the DSA indexer selects (DeepSeek-V3.2, GLM-5); Gated DeltaNet linear
 * attention over a fixed-size recurrent state (Qwen3.5, Qwen3-Next);
 * DeepSeek-V4's compressed attention; attention with a learned,
 * hidden-state-conditioned relative-position bias and no RoPE (Inkling). */
enum mixer_kind { MIXER_GQA = 0, MIXER_MLA, MIXER_MLA_DSA, MIXER_GDN, MIXER_V4, MIXER_REL };
#define MIXER_KINDS 6

/* DeepSeek-V4 attention of a MIXER_V4 row: sliding-window shared-KV MQA
 * alone, plus compressed sparse attention (overlapping windows pooled into
 * entries, a Lightning indexer keeping index_topk of them), or plus
 * heavily compressed attention (non-overlapping windows, no indexer). */
enum v4_attn { V4_ATTN_SLIDING = 0, V4_ATTN_CSA, V4_ATTN_HCA };

/* Feed-forward block: a dense SwiGLU MLP; routed experts; routed experts
 * plus shared experts every token runs. */
enum ffn_kind { FFN_DENSE = 0, FFN_MOE, FFN_MOE_SHARED };
#define FFN_KINDS 3

/* The norm before each block: RMSNorm with the layer's weight (which the
 * loader has made 1 + w for zero-centred norms, norm_zero_centred). */
enum norm_kind { NORM_RMS = 0 };

/* How a block's output joins the residual stream: added (x += block(norm(x)));
 * or hyper-connections (DeepSeek-V4): hc_mult streams per token, collapsed
 * into the block's input and mixed with its output by weights computed from
 * the streams (Sinkhorn-projected mixer); or through a short convolution
 * (Inkling): x += y + conv(y) for y = block(norm(x)), conv a causal
 * depthwise convolution of sconv_kernel taps over the sequence's outputs of
 * that block. */
enum residual_kind { RESIDUAL_PLAIN = 0, RESIDUAL_HC, RESIDUAL_SCONV };

struct layer_row {
	enum norm_kind norm;
	enum mixer_kind mixer;
	enum ffn_kind ffn;
	enum residual_kind residual;
};

/* Router: softmax over all experts then top-k (OLMoE, Qwen3, Mixtral),
 * sigmoid scores with a correction bias and grouped top-k (DeepSeek-V3,
 * GLM), or sqrt(softplus) scores with a correction bias and plain top-k, or
 * on hash_routed layers the token's row of tid2eid (DeepSeek-V4); or the
 * top-k of the biased logits, then softmax over the chosen k (gpt-oss); or
 * one router over the routed and the shared experts (Inkling: n_experts +
 * n_shared_experts rows): top-k of sigmoid + correction bias among the
 * routed, weights sigmoid(l) / sum of sigmoid over the chosen and the
 * shared, times routed_scaling and the layer's gate.global_scale; each
 * shared expert's output is scaled by its weight. */
enum router_kind { ROUTER_SOFTMAX = 0, ROUTER_SIGMOID_GROUPED, ROUTER_SQRTSOFTPLUS, ROUTER_TOPK_SOFTMAX,
		   ROUTER_SIGMOID_SHARED };

/* Where q/k RMSNorm applies: not at all, per head (Qwen3), or over the
 * whole projected q and k vectors (OLMoE). */
enum qk_norm_kind { QK_NORM_NONE = 0, QK_NORM_HEAD, QK_NORM_FULL };

/* How expert tensors are named in HF checkpoints. */
enum expert_naming {
	EXPERT_NAMING_MLP = 0,   /* mlp.experts.E.{gate,up,down}_proj */
	EXPERT_NAMING_MIXTRAL,   /* block_sparse_moe.experts.E.{w1,w3,w2} */
	EXPERT_NAMING_GPT_OSS,   /* mlp.router.{weight,bias}; mlp.experts.gate_up_proj [E, H, 2I], gate and up
				  * interleaved on the last dim, down_proj [E, I, H] (both transposed), or
				  * their MXFP4 *_blocks / *_scales in nn.Linear order; *_bias [E, 2I], [E, H] */
};

#define MODEL_LAYERS_MAX 256
#define MODEL_EOS_MAX 8
#define MODEL_GROUPS_MAX 256

struct model_config {
	enum model_arch arch;
	char model_type[32];
	int32_t n_layers;
	int32_t hidden;              /* d_model */
	int32_t n_heads;
	int32_t n_kv_heads;
	int32_t head_dim;
	int32_t vocab;
	int32_t intermediate;        /* dense FFN width (0 if no dense layer) */
	int32_t moe_intermediate;    /* routed expert FFN width */
	int32_t n_experts;
	int32_t top_k;
	bool norm_topk_prob;         /* renormalise the top-k weights */
	float rms_eps;
	float rope_theta;
	int32_t max_positions;
	bool tie_embeddings;
	float clip_qkv;              /* 0 = off (OLMoE option) */
	int32_t sliding_window;      /* keys within this many positions; 0 = off (Mixtral, gpt-oss) */
	bool full_attention[MODEL_LAYERS_MAX]; /* the layer sees every key whatever sliding_window says
					  * (gpt-oss's "full_attention" layer_types) */
	enum qk_norm_kind qk_norm;
	enum expert_naming expert_naming;
	/* The decoder layers, then the MTP layers: [n_layers + n_mtp_layers]. */
	struct layer_row rows[MODEL_LAYERS_MAX];
	bool attn_bias;              /* q/k/v projections carry biases (GLM, gpt-oss) */
	bool attn_o_bias;            /* so does o_proj (gpt-oss) */
	bool attn_sinks;             /* self_attn.sinks: one more logit per head in the softmax, which
				      * takes no value (gpt-oss) */
	/* MLA (MIXER_MLA and MIXER_MLA_DSA rows) */
	int32_t q_lora_rank;         /* 0: q_proj directly */
	int32_t kv_lora_rank;
	int32_t qk_nope_dim;
	int32_t qk_rope_dim;
	int32_t v_head_dim;
	/* DeepSeek sparse attention (MIXER_MLA_DSA): a "lightning indexer" per
	 * layer keeps, for each query, only the index_topk keys it scores
	 * highest. */
	int32_t index_n_heads;
	int32_t index_head_dim;      /* its first qk_rope_dim dims are rotated */
	int32_t index_topk;
	int index_rope_interleave;   /* the indexer's RoPE pairing, as rope_interleave */
	bool index_shared[MODEL_LAYERS_MAX]; /* reuses the previous layer's selection (GLM-5 "shared") */
	/* RoPE */
	int32_t rot_dim;             /* rotated dims of a head (partial rotary) */
	int rope_interleave;         /* 1: pairs (2i, 2i+1); 0: (i, i + rot_dim/2) */
	bool yarn;                   /* YaRN scaled frequencies */
	float yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
	bool yarn_truncate;          /* correction range floored / ceiled (transformers' default; gpt-oss: false) */
	int32_t yarn_original_max;
	float rope_attn_factor;      /* multiplies cos and sin (YaRN attention_factor) */
	float attn_scale;            /* softmax scale of q.k */
	/* Routing */
	enum router_kind router;
	bool router_bias;            /* e_score_correction_bias */
	bool router_mask_inf;        /* dropped groups score -inf, not 0 (DSA models' routers) */
	int32_t n_group, topk_group;
	float routed_scaling;        /* multiplies the routing weights */
	int32_t n_shared_experts;    /* shared experts (DeepSeek), 1 for Qwen's one shared expert */
	int32_t shared_intermediate; /* width of the shared experts together */
	bool shared_gate;            /* the shared expert's output is scaled by sigmoid(shared_expert_gate . x) */
	/* Qwen3.5 / Qwen3-Next */
	bool norm_zero_centred;      /* every RMSNorm but the DeltaNet's gated one multiplies by 1 + w */
	bool attn_gate;              /* q_proj also emits, per head, head_dim gates: out *= sigmoid(gate) */
	/* Gated DeltaNet (MIXER_GDN rows) */
	int32_t lin_k_heads, lin_v_heads;   /* key heads, value heads (a multiple of them) */
	int32_t lin_k_dim, lin_v_dim;       /* dims of a key head, of a value head */
	int32_t lin_conv;                   /* causal depthwise convolution kernel */
	bool lin_grouped;            /* fused in_proj_qkvz / in_proj_ba grouped per key head (Qwen3-Next) */
	/* DeepSeek-V4 (MIXER_V4 rows, RESIDUAL_HC). rope_theta is the sliding
	 * layers' ("main") RoPE base, a default RoPE; compressed layers, their
	 * compressors and indexers use the "compress" RoPE: compress_rope_theta
	 * with the yarn* fields when yarn, and rope_attn_factor on cos and sin
	 * (1 for flat rope parameters, as DeepseekV4Config forces it; a nested
	 * compress set may give or imply another). rot_dim (= qk_rope_dim) is
	 * the rotated tail of each head (interleaved pairs); q_lora_rank,
	 * sliding_window and index_* as above; n_kv_heads is 1 (K = V);
	 * attn_scale is head_dim^-0.5. The router (ROUTER_SQRTSOFTPLUS) always
	 * renormalises, whatever norm_topk_prob says; router_bias holds for the
	 * layers that are not hash_routed. One shared expert of
	 * moe_intermediate (shared_intermediate). */
	enum v4_attn v4_attn[MODEL_LAYERS_MAX];
	int32_t compress_rate_csa, compress_rate_hca;
	float compress_rope_theta;
	int32_t o_groups, o_lora_rank;      /* grouped output projection: o_groups blocks to o_lora_rank each */
	int32_t hc_mult, hc_sinkhorn_iters; /* residual streams, Sinkhorn iterations */
	float hc_eps;
	bool hash_routed[MODEL_LAYERS_MAX]; /* experts chosen by the token id (mlp.gate.tid2eid) */
	float swiglu_limit;                 /* gate <= limit, |up| <= limit in every SwiGLU (routed and
					     * shared experts); 0: no clamp (> 0 in every deepseek_v4, 7 in gpt-oss) */
	float glu_alpha;                    /* > 0: the experts' GLU is gpt-oss's (up + 1) * gate *
					     * sigmoid(alpha * gate) after the clamp; 0: silu(gate) * up */
	bool expert_bias;                   /* experts add biases: gate_up_proj_bias [E, 2I] (gate at even
					     * columns) and down_proj_bias [E, H], resident (gpt-oss) */
	/* Inkling (MIXER_REL rows, RESIDUAL_SCONV). No RoPE (rot_dim 0). The
	 * global layers (full_attention[l]) have n_heads, n_kv_heads, head_dim
	 * and a relative extent of rel_extent; the sliding ones swa_* and
	 * sliding_window as both window and extent. Each head's score is
	 * q.k * attn_scale (1 / head_dim: q and k are RMS-normed per head)
	 * plus a relative bias: the token's d_rel values of r_proj for the
	 * head times rel_logits_proj.proj [d_rel, extent] at the distance,
	 * zero at or beyond the extent. log_n_floor > 0: on global layers the
	 * normed q and the bias are scaled by 1 + log_alpha * log(max((pos+1)
	 * / log_n_floor, 1)). Short convolutions of sconv_kernel taps (with
	 * residual) run on k and v before their norm, and on each block's
	 * output (RESIDUAL_SCONV). */
	int32_t swa_n_heads, swa_n_kv_heads, swa_head_dim;
	int32_t d_rel, rel_extent;
	int32_t log_n_floor;                /* 0: no log-length scaling */
	float log_alpha;
	int32_t sconv_kernel;
	bool embed_norm;                    /* model.embed_norm (RMSNorm) after the embedding */
	bool global_scale;                  /* dense MLPs multiply by mlp.global_scale; the router's
					     * weights by mlp.gate.global_scale */
	float logit_divisor;                /* the final hidden state is divided by it before lm_head
					     * (logits_mup_width_multiplier); 1: none */
	int32_t vocab_stored;               /* rows of the checkpoint's embedding and head when they are
					     * padded past vocab (Inkling's unpadded_vocab_size); 0: vocab */
	int32_t n_mtp_layers;        /* DeepSeek MTP modules stored after the decoder layers */
	int32_t bos_id;              /* -1 if unknown */
	int32_t eos_ids[MODEL_EOS_MAX];
	int32_t n_eos;
};

/* Parses a config.json object. Unknown or missing model_type, missing or
 * out-of-range fields give -EINVAL with a message naming the field;
 * `source` names the file in messages. */
int model_config_parse(struct model_config *cfg, const struct cJSON *json, const char *source);

/* The i-th model_type (from 0) that model_config_parse accepts, a static
 * string, with the family it selects in *arch (may be NULL); NULL past the
 * last. Lets a caller list every family the engine knows. */
const char *model_config_type_at(int i, enum model_arch *arch);

/* Reads and parses DIR/config.json (and EOS ids from generation_config.json
 * when present). */
int model_config_load(struct model_config *cfg, const char *dir);

/* Number of MoE layers among the decoder layers. */
int model_config_moe_layers(const struct model_config *cfg);

/* Whether row l (decoder or MTP layer) has routed experts. */
bool model_config_layer_moe(const struct model_config *cfg, int l);

/* Whether some row (decoder or MTP) has the mixer kind k. */
bool model_config_has_mixer(const struct model_config *cfg, enum mixer_kind k);

/* Whether the rows' mixers are MLA (with or without DSA). */
bool model_config_mla(const struct model_config *cfg);

#endif
