/*
 * model_cache — the folder where colibri keeps the containers it makes for
 * itself (the default model's, and those of `--model FILE.gguf`), and the
 * GGUF case: a GGUF file given to run, chat or serve as --model is
 * converted once into the cache and its container used from then on, as
 * `llama-cli -m FILE.gguf` and Ollama users expect.
 *
 * The root: $COLIBRI_CACHE_DIR/models, else $XDG_CACHE_HOME/colibri/models,
 * else ~/.cache/colibri/models.
 *
 * A GGUF's container is ROOT/gguf/KEY/NAME: KEY a hash of the file's real
 * path (for a split, its first part's, so any part finds it), NAME the
 * file's name without ".gguf" and the split suffix (serve's default
 * --model-id). Beside it, KEY/source records the path, size and
 * modification time of every file it was made from, and the container is
 * used only while they still match. Not a hash of the content: that reads
 * the whole file (hundreds of GB for the models this is for) on every start,
 * and a hash of the header alone would take two fine-tunes of one base at
 * one quantization (the same names, shapes and types) for the same model.
 * A file replaced or downloaded again has a new size or modification time:
 * its stale container is removed and the new one converted. A copy of the
 * file elsewhere is converted again: the price of not reading content.
 *
 * A conversion holds an exclusive flock of KEY/lock (a second colibri
 * started meanwhile waits, then uses the container), is written into a
 * temporary folder renamed into place when complete (engine/convert), and
 * KEY/source is written last: a failed or interrupted conversion leaves
 * nothing that would be used.
 */
#ifndef COLIBRI_ENGINE_MODEL_CACHE_H
#define COLIBRI_ENGINE_MODEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>

/* The cache's root folder, into out (not created); -ENOENT with a message
 * when no environment variable names one. */
int model_cache_root(char *out, size_t len);

/* Whether path is a regular file that starts with GGUF's magic. */
bool model_cache_is_gguf(const char *path);

/* For a command's --model: a GGUF file becomes its container
 * (model_cache_gguf, into a static buffer); anything else stays as it is. */
int model_cache_use(const char **model_dir);

/* The container of the GGUF file gguf, into out: the cached one while its
 * source record matches, else converted now, with a line saying where and
 * the converter's progress on stderr. -errno with a message otherwise
 * (no room in the cache, a conversion that failed). */
int model_cache_gguf(const char *gguf, char *out, size_t len);

#endif
