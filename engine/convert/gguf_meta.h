/*
 * gguf_meta — the Hugging Face documents a colibri container carries
 * (config.json, tokenizer.json, tokenizer_config.json), synthesized from a
 * GGUF file's metadata so that everything downstream of the converter
 * (model_config_parse, tokenizer_load, the chat templates) runs unchanged.
 *
 * The meaning is llama.cpp's (at 81ff7abe5): every key colibri reads is
 * written explicitly, with the value llama.cpp would use when the GGUF is
 * silent, so no transformers default that differs from llama.cpp's can
 * creep in (DeepSeek's n_group 8, GLM's first_k_dense_replace 1, ...).
 * What a GGUF cannot say the way colibri needs it is refused (-ENOTSUP),
 * never approximated.
 */
#ifndef COLIBRI_ENGINE_CONVERT_GGUF_META_H
#define COLIBRI_ENGINE_CONVERT_GGUF_META_H

struct cJSON;
struct gguf_set;

/* config.json equivalent of the GGUF's model metadata (general.architecture
 * and ARCH.* keys, plus tensor shapes and presence where the metadata is
 * silent: vocab size from token_embd.weight, tied embeddings, attention
 * biases, q/k norms). The result has been checked by model_config_parse.
 * -ENOTSUP naming the file and the architecture for an architecture colibri
 * does not run; -EINVAL naming the key for a missing or bad key. The caller
 * frees *config with cJSON_Delete; set must stay open during the call only. */
int gguf_meta_config(const struct gguf_set *set, struct cJSON **config);

/* tokenizer.json and tokenizer_config.json (chat_template, bos / eos / pad /
 * unk tokens, add_bos_token, add_eos_token) from tokenizer.ggml.*. Both
 * NULL (return 0) when the file has no tokenizer.ggml.model. -ENOTSUP for
 * a tokenizer model or pre-tokenizer it cannot express exactly (naming
 * it), -EINVAL for inconsistent arrays (lengths, an unknown token in a
 * merge, duplicate tokens, ids out of range). The caller frees both. */
int gguf_meta_tokenizer(const struct gguf_set *set, struct cJSON **tokenizer,
			struct cJSON **tokenizer_config);

#endif
