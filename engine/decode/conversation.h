/*
 * conversation — the messages of a chat and how they become a prompt: the
 * list of (role, content), its JSON form (sessions on disk, see
 * conversation_store.h), and conversation_prompt, the one function that
 * renders the list through the model's chat template and tokenizes it, so
 * that a new template engine changes one place; and conversation_fit,
 * which drops the oldest turns when the conversation outgrows its context
 * (the system prompt stays).
 *
 * Invariants: contents hold no NUL byte (templates work on C strings; a NUL
 * in text becomes U+FFFD); roles are "system", "user" or "assistant".
 * cut_token is the last token of the last assistant message when that
 * answer was cut short (by -n, or stopped), and that token has been shown
 * but not yet run through the model: continuing the answer starts from it.
 * It is -1 when the last answer is complete or there is none.
 *
 * Ownership: a conversation owns copies of its strings; conversation_free
 * frees them.
 */
#ifndef COLIBRI_ENGINE_DECODE_CONVERSATION_H
#define COLIBRI_ENGINE_DECODE_CONVERSATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct tokenizer;

struct conversation_message {
	char *role;
	char *content;
	size_t len;                  /* strlen(content) */
};

struct conversation {
	struct conversation_message *msgs;   /* [cap], n used */
	size_t n, cap;
	int32_t cut_token;           /* see the file comment; -1 none */
};

void conversation_init(struct conversation *c);
void conversation_free(struct conversation *c);

/* Forgets every message but a leading system message (keep_system) or all. */
void conversation_clear(struct conversation *c, bool keep_system);

/* Appends a message of text[0..len) (NUL bytes become U+FFFD). -EINVAL for
 * a role other than system, user and assistant; -ENOMEM. */
int conversation_add(struct conversation *c, const char *role, const char *text, size_t len);

/* Appends text[0..len) to the last message's content (which must exist). */
int conversation_append(struct conversation *c, const char *text, size_t len);

/* Removes the last message (if any). */
void conversation_pop(struct conversation *c);

/* Removes the oldest turn: the first message after a leading system
 * message and those after it up to the next user message (a user message
 * and its answers), unless that would remove one of the last keep
 * messages. Returns how many messages went (0: none could). cut_token
 * stays with the last message, and goes with it. */
size_t conversation_drop_turn(struct conversation *c, size_t keep);

/* Messages of the given role. */
size_t conversation_count(const struct conversation *c, const char *role);

/* Moves src into dst (dst's messages are freed; src is left empty). */
void conversation_move(struct conversation *dst, struct conversation *src);

/* The messages as a JSON array of {"role", "content"} (NULL: out of memory). */
struct cJSON *conversation_to_json(const struct conversation *c);

/* Reads such an array into the empty conversation c; -EINVAL with a
 * message naming src and the item for anything else. */
int conversation_from_json(struct conversation *c, const struct cJSON *messages, const char *src);

/* XXH3-64 of the messages (roles, contents and their lengths) and
 * cut_token, with seed: what a session file's checksum covers. */
uint64_t conversation_hash(const struct conversation *c, uint64_t seed);

struct conversation_prompt_options {
	bool no_thinking;            /* ask the template not to think (Qwen3, GLM enable_thinking=false) */
};

/* Renders the first n_msgs messages of c, ending with the assistant's
 * generation prompt, through the chat template of tok (model_type picks
 * one when the tokenizer has none) and encodes them: *ids is malloc'd with
 * *n ids. *thinking (may be NULL) says whether the prompt ends inside an
 * open <think> block, so that the answer starts with reasoning.
 * *n_history (may be NULL): how many of the ids the messages alone give,
 * without the generation prompt (the tokens the next turn's prompt will
 * share: batch_params.checkpoint_at). -EINVAL with a message for a
 * template or conversation the renderer refuses. */
int conversation_prompt(const struct conversation *c, size_t n_msgs, const struct tokenizer *tok,
			const char *model_type, const struct conversation_prompt_options *o, int32_t **ids, int *n,
			bool *thinking, int *n_history);

/* How a conversation is made to fit its context (conversation_fit). The
 * caller fills the first five fields. */
struct conversation_fit {
	int ctx;                     /* positions of the context */
	int want;                    /* positions the prompt should leave after it: the answer's room */
	int need;                    /* positions it must leave (<= want); 0: none */
	size_t keep;                 /* trailing messages never dropped */
	size_t leave_out;            /* trailing messages the prompt does not render (a cut answer that
				      * goes on from its tokens, counted in want and need) */
	int dropped;                 /* out: turns dropped */
	int freed;                   /* out: prompt tokens they took */
};

/* The prompt of c's first c->n - f->leave_out messages (conversation_prompt,
 * whose outputs these are), after dropping as few of the oldest turns as
 * leaves f->want positions of f->ctx free (conversation_drop_turn with
 * f->keep); when no number of turns does, as many as can go. Turns are
 * dropped only on success. -ENOSPC with a message when even then the
 * prompt leaves fewer than f->need positions (c unchanged); *n still says
 * how long the prompt would be. The prompt of what remains is the one a
 * conversation that never held the dropped turns gives, so a cache that
 * keeps the longest common prefix of its tokens stays exact. */
int conversation_fit(struct conversation *c, struct conversation_fit *f, const struct tokenizer *tok,
		     const char *model_type, const struct conversation_prompt_options *o, int32_t **ids, int *n,
		     bool *thinking, int *n_history);

#endif
