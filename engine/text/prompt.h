/*
 * prompt — user text to prompt token ids: optional chat template, optional
 * BOS, tokenization. Shared by `run` and `tokenize` so both see the same ids.
 */
#ifndef COLIBRI_ENGINE_PROMPT_H
#define COLIBRI_ENGINE_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

/* Loads the tokenizer of a container or HF folder; a folder without
 * tokenizer.json gives -ENOENT with "DIR: the model has no tokenizer; pass
 * --tokens instead". */
int prompt_tokenizer_load(struct tokenizer **out, const char *model_dir);

/* Encodes text[0..len) (a user message rendered through the chat template
 * when chat is set, with an optional system message) into a malloc'd id
 * array. Without chat every byte is encoded, NUL included; a chat message
 * holding a NUL byte is refused (templates work on C strings). */
int prompt_encode(const struct tokenizer *tok, const char *model_type, const char *text, size_t len,
		  bool chat, const char *system, int32_t **ids, int *n);

#endif
