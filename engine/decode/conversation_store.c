/*
 * conversation_store — see conversation_store.h for the files and the
 * refusal rule. The JSON file is small (the text of a conversation) and is
 * rewritten whole at every save; the state file is as large as the
 * sequence state holds (positions x bytes per position).
 */
#include "engine/decode/conversation_store.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/files.h"
#include "planner/profile.h"

#define STORE_FORMAT "colibri-chat"

int conversation_store_init(struct conversation_store *st, uint64_t model_id, const char *model_dir)
{
	memset(st, 0, sizeof *st);
	st->model_id = model_id;
	st->model_dir = model_dir;
	char profile[PATH_MAX];
	int rc = profile_path(profile, sizeof profile);
	if (rc == -ENOENT)
		return error_set(ENOENT, "no folder for chat sessions: set $COLIBRI_CACHE_DIR or $HOME");
	if (rc)
		return error_set(-rc, "the cache folder's path is too long");
	char *slash = strrchr(profile, '/'); /* profile_path names DIR/disks.json */
	if (slash)
		*slash = 0;
	if ((size_t)snprintf(st->dir, sizeof st->dir, "%s/sessions/%016" PRIx64, profile, model_id) >= sizeof st->dir)
		return error_set(ENAMETOOLONG, "the cache folder's path is too long");
	return 0;
}

int conversation_store_name_check(const char *name)
{
	size_t n = strlen(name);
	bool ok = n > 0 && n <= CONVERSATION_NAME_MAX && name[0] != '.';
	for (size_t i = 0; ok && i < n; i++) {
		char ch = name[i];
		ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
		     ch == '_' || ch == '-';
	}
	if (!ok)
		return error_set(EINVAL, "a session name is 1 to %d letters, digits, '.', '_' or '-', not starting "
					 "with '.'; not \"%s\"", CONVERSATION_NAME_MAX, name);
	return 0;
}

void conversation_store_path(const struct conversation_store *st, const char *name, const char *ext, char *buf,
			     size_t n)
{
	snprintf(buf, n, "%s/%s.%s", st->dir, name, ext);
}

/* mkdir -p dir. */
static int make_dirs(const char *dir)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s", dir);
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			return error_set(errno, "%s: cannot create the folder: %s", p, strerror(errno));
		if (!c)
			return 0;
		*s = c;
	}
}

/* The checksum of a session file: the conversation's hash, the format
 * version and the state fields, seeded with the model id. */
static uint64_t checksum_of(const struct conversation *c, uint64_t model_id, bool has_state, uint32_t tokens,
			    uint64_t tokens_hash)
{
	struct {
		uint64_t conv, version, has_state, tokens, tokens_hash;
	} k = { conversation_hash(c, model_id), CONVERSATION_STORE_VERSION, has_state, tokens, tokens_hash };
	return XXH3_64bits_withSeed(&k, sizeof k, model_id);
}

static void hex64(char out[17], uint64_t v)
{
	snprintf(out, 17, "%016" PRIx64, v);
}

/* Parses 16 hex digits. */
static bool parse_hex64(const cJSON *v, uint64_t *out)
{
	if (!cJSON_IsString(v) || strlen(v->valuestring) != 16)
		return false;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v->valuestring, &end, 16);
	if (*end || errno || v->valuestring[0] == '-' || v->valuestring[0] == '+' || v->valuestring[0] == ' ')
		return false;
	*out = x;
	return true;
}

int conversation_store_save(const struct conversation_store *st, const char *name, const struct conversation *c,
			    const struct batch *b, int slot)
{
	int rc = conversation_store_name_check(name);
	if (rc || (rc = make_dirs(st->dir)))
		return rc;
	char state_path[PATH_MAX + 80], json_path[PATH_MAX + 80], state_file[CONVERSATION_NAME_MAX + 8];
	conversation_store_path(st, name, "state", state_path, sizeof state_path);
	conversation_store_path(st, name, "json", json_path, sizeof json_path);
	snprintf(state_file, sizeof state_file, "%s.state", name);
	bool has_state = false;
	uint32_t tokens = 0;
	uint64_t tokens_hash = 0;
	int state_rc = 0;
	char state_err[1024] = "";
	if (b) {
		const struct batch_slot *s = &b->slots[slot];
		int pos = b->f->seqs[slot].pos;
		state_rc = batch_save(b, slot, st->model_id, state_path);
		if (state_rc) {
			snprintf(state_err, sizeof state_err, "%s", error_message());
			error_clear();
		} else {
			has_state = true;
			tokens = (uint32_t)pos;
			tokens_hash = XXH3_64bits(s->tokens, (size_t)pos * sizeof *s->tokens);
		}
	}
	char id[17], sum[17], hash[17], when[32];
	hex64(id, st->model_id);
	hex64(sum, checksum_of(c, st->model_id, has_state, tokens, tokens_hash));
	hex64(hash, tokens_hash);
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	cJSON *o = cJSON_CreateObject(), *msgs = conversation_to_json(c), *state = NULL;
	bool ok = o && msgs && cJSON_AddStringToObject(o, "format", STORE_FORMAT) &&
		  cJSON_AddNumberToObject(o, "version", CONVERSATION_STORE_VERSION) &&
		  cJSON_AddStringToObject(o, "model_id", id) &&
		  cJSON_AddStringToObject(o, "model", st->model_dir ? st->model_dir : "") &&
		  cJSON_AddStringToObject(o, "saved", when);
	if (ok) {
		ok = cJSON_AddItemToObject(o, "messages", msgs);
		msgs = ok ? NULL : msgs;
	}
	ok = ok && cJSON_AddNumberToObject(o, "cut_token", c->cut_token);
	if (ok && has_state) {
		ok = (state = cJSON_AddObjectToObject(o, "state")) && cJSON_AddStringToObject(state, "file", state_file) &&
		     cJSON_AddNumberToObject(state, "tokens", tokens) && cJSON_AddStringToObject(state, "tokens_xxh3", hash);
	} else if (ok) {
		ok = cJSON_AddNullToObject(o, "state");
	}
	ok = ok && cJSON_AddStringToObject(o, "checksum", sum);
	char *text = ok ? cJSON_Print(o) : NULL;
	cJSON_Delete(o);
	cJSON_Delete(msgs);
	if (!text)
		return error_set(ENOMEM, "out of memory");
	size_t len = strlen(text);
	text[len] = '\n'; /* the NUL becomes a final newline */
	rc = file_write_atomic(json_path, text, len + 1);
	free(text);
	if (rc)
		return rc;
	if (state_rc)
		return error_set(-state_rc, "%s (the conversation is saved; the next start prefills it)", state_err);
	return 0;
}

/* Reads and checks NAME.json into c; -EINVAL with a message for a file to
 * refuse. */
static int read_json(const struct conversation_store *st, const char *path, struct conversation *c, bool *has_state,
		     char *state_file, size_t state_file_len, uint32_t *tokens, uint64_t *tokens_hash)
{
	cJSON *o = NULL;
	int rc = json_load(path, &o);
	if (rc == -ENOENT)
		return rc;
	if (rc) {
		char why[1024];
		snprintf(why, sizeof why, "%s", error_message());
		error_clear();
		return error_set(EINVAL, "%s (truncated or not JSON)", why);
	}
	const cJSON *format = cJSON_GetObjectItemCaseSensitive(o, "format");
	const cJSON *version = cJSON_GetObjectItemCaseSensitive(o, "version");
	const cJSON *state = cJSON_GetObjectItemCaseSensitive(o, "state");
	const cJSON *cut = cJSON_GetObjectItemCaseSensitive(o, "cut_token");
	uint64_t id = 0, sum = 0;
	if (!cJSON_IsObject(o) || !cJSON_IsString(format) || strcmp(format->valuestring, STORE_FORMAT)) {
		rc = error_set(EINVAL, "%s: not a colibri chat session", path);
	} else if (!cJSON_IsNumber(version) || version->valuedouble != CONVERSATION_STORE_VERSION) {
		rc = error_set(EINVAL, "%s: a session of format version %g; this colibri reads version %d", path,
			       cJSON_IsNumber(version) ? version->valuedouble : -1.0, CONVERSATION_STORE_VERSION);
	} else if (!parse_hex64(cJSON_GetObjectItemCaseSensitive(o, "model_id"), &id)) {
		rc = error_set(EINVAL, "%s: the session has no valid model_id", path);
	} else if (id != st->model_id) {
		rc = error_set(EINVAL, "%s: the session belongs to another model (id %016" PRIx64 "; this model is %016" PRIx64
				       ")", path, id, st->model_id);
	} else if (!cJSON_IsNumber(cut) || cut->valuedouble < -1 || cut->valuedouble > INT32_MAX ||
		   cut->valuedouble != (double)(int32_t)cut->valuedouble) {
		rc = error_set(EINVAL, "%s: cut_token is not a token id or -1", path);
	} else if (!parse_hex64(cJSON_GetObjectItemCaseSensitive(o, "checksum"), &sum)) {
		rc = error_set(EINVAL, "%s: the session has no valid checksum", path);
	}
	*has_state = false;
	*tokens = 0;
	*tokens_hash = 0;
	if (!rc && !cJSON_IsNull(state)) {
		const cJSON *file = cJSON_GetObjectItemCaseSensitive(state, "file");
		const cJSON *ntok = cJSON_GetObjectItemCaseSensitive(state, "tokens");
		char *slash = cJSON_IsString(file) ? strchr(file->valuestring, '/') : NULL;
		if (!cJSON_IsObject(state) || !cJSON_IsString(file) || slash || file->valuestring[0] == '.' ||
		    !cJSON_IsNumber(ntok) || ntok->valuedouble < 0 || ntok->valuedouble > INT32_MAX ||
		    ntok->valuedouble != (double)(uint32_t)ntok->valuedouble ||
		    !parse_hex64(cJSON_GetObjectItemCaseSensitive(state, "tokens_xxh3"), tokens_hash)) {
			rc = error_set(EINVAL, "%s: \"state\" is not {file, tokens, tokens_xxh3} or null", path);
		} else {
			*has_state = true;
			*tokens = (uint32_t)ntok->valuedouble;
			snprintf(state_file, state_file_len, "%s", file->valuestring);
		}
	}
	if (!rc)
		rc = conversation_from_json(c, cJSON_GetObjectItemCaseSensitive(o, "messages"), path);
	if (!rc) {
		c->cut_token = (int32_t)cut->valuedouble;
		if (sum != checksum_of(c, st->model_id, *has_state, *tokens, *tokens_hash))
			rc = error_set(EINVAL, "%s: the session is corrupt (checksum mismatch)", path);
	}
	cJSON_Delete(o);
	if (rc)
		conversation_free(c);
	return rc;
}

int conversation_store_load(const struct conversation_store *st, const char *name, struct conversation *c,
			    struct batch *b, int slot, struct conversation_load *r)
{
	memset(r, 0, sizeof *r);
	int rc = conversation_store_name_check(name);
	if (rc)
		return rc;
	char path[PATH_MAX + 80], state_path[PATH_MAX + 80], state_file[PATH_MAX] = "";
	conversation_store_path(st, name, "json", path, sizeof path);
	bool has_state = false;
	uint32_t tokens = 0;
	uint64_t tokens_hash = 0;
	rc = read_json(st, path, c, &has_state, state_file, sizeof state_file, &tokens, &tokens_hash);
	if (rc == -ENOENT) {
		error_clear();
		return 0;
	}
	r->found = true;
	if (rc == -ENOMEM)
		return rc;
	if (rc) {
		r->refused = true;
		snprintf(r->message, sizeof r->message, "%s", error_message());
		error_clear();
		if ((rc = file_put_aside(path, r->aside, sizeof r->aside)))
			return rc;
		/* Its state belongs to the refused conversation: aside too. */
		conversation_store_path(st, name, "state", state_path, sizeof state_path);
		if (access(state_path, F_OK) == 0 && file_put_aside(state_path, r->state_aside, sizeof r->state_aside))
			error_clear();
		return 0;
	}
	if (!b || !has_state)
		return 0;
	snprintf(state_path, sizeof state_path, "%s/%s", st->dir, state_file);
	rc = batch_load(b, slot, st->model_id, state_path);
	struct batch_slot *s = &b->slots[slot];
	if (rc == -ENOENT) {
		r->state_missing = true;
		snprintf(r->message, sizeof r->message, "%s", error_message());
	} else if (rc) {
		r->state_refused = true;
		snprintf(r->message, sizeof r->message, "%s", error_message());
		if (file_put_aside(state_path, r->state_aside, sizeof r->state_aside))
			error_clear();
	} else if ((uint32_t)s->n_tokens != tokens ||
		   XXH3_64bits(s->tokens, (size_t)s->n_tokens * sizeof *s->tokens) != tokens_hash) {
		/* A crash between the two renames of a save: a newer state. */
		r->state_stale = true;
		seq_state_reset(&b->f->seqs[slot]);
		s->n_tokens = 0;
	} else {
		r->restored = s->n_tokens;
	}
	error_clear();
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int conversation_store_list(const struct conversation_store *st, char ***names, int *n)
{
	*names = NULL;
	*n = 0;
	DIR *d = opendir(st->dir);
	if (!d)
		return errno == ENOENT ? 0 : error_set(errno, "%s: %s", st->dir, strerror(errno));
	char **v = NULL;
	int k = 0, cap = 0, rc = 0;
	for (struct dirent *e; !rc && (e = readdir(d));) {
		size_t len = strlen(e->d_name);
		if (len <= 5 || strcmp(e->d_name + len - 5, ".json") || e->d_name[0] == '.')
			continue;
		if (k == cap) {
			cap = cap ? 2 * cap : 16;
			char **w = realloc(v, (size_t)cap * sizeof *w);
			if (!w) {
				rc = error_set(ENOMEM, "out of memory");
				break;
			}
			v = w;
		}
		if (!(v[k] = strndup(e->d_name, len - 5)))
			rc = error_set(ENOMEM, "out of memory");
		else
			k++;
	}
	closedir(d);
	if (rc) {
		while (k > 0)
			free(v[--k]);
		free(v);
		return rc;
	}
	if (k)
		qsort(v, (size_t)k, sizeof *v, cmp_names);
	*names = v;
	*n = k;
	return 0;
}

