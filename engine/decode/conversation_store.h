/*
 * conversation_store — chat sessions on disk, so that a conversation
 * survives a restart without being prefilled again.
 *
 * Where: a folder per model, $COLIBRI_CACHE_DIR/sessions/<model id>/ (else
 * $XDG_CACHE_HOME/colibri/..., else ~/.cache/colibri/..., the rule of
 * planner/profile.h), the model id being manifest_model_id in 16 hex
 * digits. A named session NAME is two files there:
 *   NAME.json   the conversation: {"format": "colibri-chat", "version": 1,
 *               "model_id", "model" (the folder, for people), "saved",
 *               "messages": [{"role", "content"}...], "cut_token",
 *               "state": {"file", "tokens", "tokens_xxh3"} or null,
 *               "checksum"}: XXH3-64 of the messages, cut_token and the
 *               state fields, seeded with the model id;
 *   NAME.state  the batch slot's tokens and sequence state (batch_save:
 *               its own magic, model id and checksums).
 * Each is written atomically (temporary file, fsync, rename), the state
 * first. The state is only a cache of the conversation's prefill: one that
 * is missing, refused or older than its conversation (a crash between the
 * two renames) costs a prefill, never a message.
 *
 * Refusals: a NAME.json that is truncated, malformed, corrupted, of another
 * format version or of another model is refused with a message; the file is
 * renamed aside (NAME.json.refused, .refused.2, ...), never deleted, and
 * the chat starts with an empty conversation. A refused NAME.state is
 * renamed aside the same way and the conversation is kept.
 */
#ifndef COLIBRI_ENGINE_DECODE_CONVERSATION_STORE_H
#define COLIBRI_ENGINE_DECODE_CONVERSATION_STORE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/decode/batch.h"
#include "engine/decode/conversation.h"

#define CONVERSATION_STORE_VERSION 1
#define CONVERSATION_NAME_MAX 64

struct conversation_store {
	char dir[PATH_MAX];          /* the model's session folder (made at the first save) */
	uint64_t model_id;
	const char *model_dir;       /* borrowed; written into the files for people */
};

/* Finds the session folder of model_id; -ENOENT with a message when no
 * cache folder can be named (no $COLIBRI_CACHE_DIR, $XDG_CACHE_HOME or
 * $HOME). model_dir must outlive st. */
int conversation_store_init(struct conversation_store *st, uint64_t model_id, const char *model_dir);

/* 0 when name is a session name: 1 to CONVERSATION_NAME_MAX characters of
 * [A-Za-z0-9._-], not starting with '.'; else -EINVAL with a message. */
int conversation_store_name_check(const char *name);

/* The path of session name's file with extension ext ("json", "state"). */
void conversation_store_path(const struct conversation_store *st, const char *name, const char *ext, char *buf,
			     size_t n);

/* Saves c, and slot `slot` of b (free) unless b is NULL, as session name.
 * The conversation is written even when the state cannot be (it then
 * records no state); the first error is returned with its message. */
int conversation_store_save(const struct conversation_store *st, const char *name, const struct conversation *c,
			    const struct batch *b, int slot);

/* What conversation_store_load found. */
struct conversation_load {
	bool found;                  /* NAME.json exists */
	bool refused;                /* and was refused (renamed to aside) */
	int restored;                /* tokens of state now in the slot (0: none) */
	bool state_refused;          /* NAME.state refused (renamed to state_aside) */
	bool state_stale;            /* NAME.state is of another point of the conversation */
	bool state_missing;          /* the conversation records a state that is not there */
	char message[1024];          /* why the conversation or the state was refused */
	char aside[PATH_MAX + 16];
	char state_aside[PATH_MAX + 16];
};

/* Loads session name into the empty conversation c and the free slot of b
 * (b may be NULL: the conversation only). Returns 0 whatever the files
 * held, *r saying what happened: c is left empty and the slot untouched
 * when nothing was found or the file was refused; otherwise the slot holds
 * the restored state (r->restored tokens) or nothing. -errno with
 * a message only for failures that are not the files' (out of memory, a
 * refused file that cannot be renamed aside). */
int conversation_store_load(const struct conversation_store *st, const char *name, struct conversation *c,
			    struct batch *b, int slot, struct conversation_load *r);

/* The names of the saved sessions, sorted, as a malloc'd array of
 * malloc'd strings (free each and the array); 0 names when the folder
 * does not exist yet. */
int conversation_store_list(const struct conversation_store *st, char ***names, int *n);

#endif
