/*
 * default_model — the model `run`, `chat` and `serve` use when no --model
 * is given: the toy MoE trained on the King James Bible that ships with
 * colibri (models/kjv-moe-hf, made by tools/train_demo.py).
 *
 * Where it comes from, first found wins:
 *   1. COLIBRI_DEFAULT_MODEL: a container folder, or a checkpoint folder
 *      (converted as in 3);
 *   2. the checkpoint beside the binary: DIR/models/kjv-moe-hf,
 *      DIR/../models/kjv-moe-hf (a source tree) or
 *      DIR/../share/colibri/kjv-moe-hf (make install), DIR being the
 *      folder of the running executable;
 *   3. its container: the sibling kjv-moe (what make demo writes) when it
 *      is at least as new as the checkpoint, else ROOT/kjv-moe in the
 *      cache (model_cache.h: ~/.cache/colibri/models/...), converted there
 *      (int4, a few seconds) when missing or older than the checkpoint.
 */
#ifndef COLIBRI_ENGINE_DEFAULT_MODEL_H
#define COLIBRI_ENGINE_DEFAULT_MODEL_H

#include <stddef.h>

/* Writes the default model's container folder to out (converting it
 * first when needed, with progress on stderr) and says which on stderr;
 * an error names every place looked at. */
int default_model_dir(char *out, size_t len);

/* For a command's --model: leaves a given folder as it is; a given GGUF
 * file becomes its container in the cache (converted the first time,
 * engine/cli/model_cache.h); none: the default model's container, said on
 * stderr. *model_dir then points at a static buffer. */
int default_model_use(const char **model_dir);

#endif
