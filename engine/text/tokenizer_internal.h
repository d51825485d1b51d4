/*
 * tokenizer_internal — the layout of struct tokenizer and the functions that
 * the tokenizer_*.c files share. Not part of the public API.
 *
 * Files: tokenizer_load.c reads tokenizer.json's model and added tokens,
 * tokenizer_components.c its normalizer, pre-tokenizer and decoder,
 * tokenizer_config.c tokenizer_config.json; tokenizer.c runs the encode
 * pipeline and decode; tokenizer_bpe.c holds the hash maps and the merge
 * loop; tokenizer_pretok.c the normalizers and pre-tokenizers at run time;
 * tokenizer_nfc.c (+ generated tokenizer_nfc_data.c) NFC; tokenizer_stream.c
 * UTF-8 handling and the streaming decoder.
 */
#ifndef COLIBRI_TOKENIZER_INTERNAL_H
#define COLIBRI_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <cjson/cJSON.h>

#include "engine/text/tokenizer.h"

/* A growable byte buffer, used only for per-call scratch and at load time. */
struct tok_buf {
	char *data;
	size_t len, cap;
};

int tok_buf_reserve(struct tok_buf *b, size_t cap);
int tok_buf_append(struct tok_buf *b, const void *p, size_t n);
void tok_buf_free(struct tok_buf *b);

/* String -> id map, open addressing; keys live in an arena that outlives it. */
struct tok_strmap {
	const char *arena;
	struct tok_strmap_slot {
		uint32_t off, len;	/* key bytes in arena; len UINT32_MAX = empty */
		int32_t id;
	} *slots;			/* [cap] */
	uint32_t cap;			/* power of two, >= 2 * entries */
};

int tok_strmap_init(struct tok_strmap *m, const char *arena, size_t entries);
void tok_strmap_free(struct tok_strmap *m);
/* Inserts or overwrites; the map never grows past the size given at init. */
void tok_strmap_put(struct tok_strmap *m, uint32_t off, uint32_t len, int32_t id);
int32_t tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len);

/* (left id, right id) -> (rank, merged id). */
struct tok_mergemap {
	struct tok_merge_slot {
		uint64_t key;		/* left << 32 | right; UINT64_MAX = empty */
		uint32_t rank;
		int32_t id;
	} *slots;			/* [cap] */
	uint32_t cap;
};

int tok_mergemap_init(struct tok_mergemap *m, size_t entries);
void tok_mergemap_free(struct tok_mergemap *m);
/* A pair listed twice keeps its last rank, as the reference's map collection does. */
void tok_mergemap_put(struct tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
const struct tok_merge_slot *tok_mergemap_get(const struct tok_mergemap *m, int32_t a, int32_t b);

enum {
	TOK_FLAG_PRESENT = 1,
	TOK_FLAG_ADDED = 2,
	TOK_FLAG_SPECIAL = 4,
};

struct tok_token {
	uint32_t str_off, str_len;	/* vocabulary string or added content, in strs */
	uint32_t dec_off, dec_len;	/* decoded bytes, in dec */
	uint8_t flags;
};

struct tok_added {
	int32_t id;
	uint32_t off, len;		/* content, in strs */
	bool special, lstrip, rstrip, single_word;
};

/* Byte trie over added-token contents for leftmost-longest matching. */
struct tok_trie_node {
	int32_t child, sibling;		/* node indices, -1 = none */
	int32_t added;			/* index into added[], -1 = not an end */
	uint8_t byte;
};

enum tok_norm_kind { TOK_NORM_NFC, TOK_NORM_PREPEND, TOK_NORM_REPLACE };

struct tok_norm {
	enum tok_norm_kind kind;
	char *a, *b;			/* PREPEND: a; REPLACE: a -> b */
	size_t a_len, b_len;
};

enum tok_pre_kind { TOK_PRE_SPLIT, TOK_PRE_BYTE_LEVEL, TOK_PRE_METASPACE };

enum tok_split_behavior {
	TOK_SPLIT_REMOVED,
	TOK_SPLIT_ISOLATED,
	TOK_SPLIT_MERGED_PREVIOUS,
	TOK_SPLIT_MERGED_NEXT,
	TOK_SPLIT_CONTIGUOUS,
};

enum tok_prepend { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

struct tok_pre {
	enum tok_pre_kind kind;
	pcre2_code *re;			/* SPLIT; BYTE_LEVEL with use_regex; NULL otherwise */
	enum tok_split_behavior behavior;
	bool invert;
	bool add_prefix_space;		/* BYTE_LEVEL */
	char rep[8];			/* METASPACE replacement, UTF-8 */
	size_t rep_len;
	enum tok_prepend prepend;	/* METASPACE */
	bool split;			/* METASPACE */
};

#define TOK_NORM_MAX 8
#define TOK_PRE_MAX 8

struct tokenizer {
	char *strs;			/* arena of vocabulary strings and added contents */
	char *dec;			/* arena of decoded token bytes */
	struct tok_token *tokens;	/* [n_ids] */
	int32_t n_ids;
	size_t dec_max;			/* longest decoded token, bytes */

	struct tok_strmap vocab;	/* model vocabulary */
	struct tok_strmap added_map;	/* added-token contents */
	struct tok_mergemap merges;

	struct tok_added *added;	/* [n_added] */
	size_t n_added;
	struct tok_trie_node *trie;	/* [n_trie]; children of the root in trie_root */
	size_t n_trie;
	int32_t trie_root[256];

	struct tok_norm norm[TOK_NORM_MAX];
	size_t n_norm;
	struct tok_pre pre[TOK_PRE_MAX];
	size_t n_pre;

	bool byte_level;		/* a ByteLevel pre-tokenizer maps bytes to symbols */
	int32_t byte_id[256];		/* BPE symbol of each byte when byte_level */
	bool byte_fallback;
	int32_t fallback_id[256];	/* id of "<0xNN>", -1 if absent */
	bool ignore_merges;
	bool fuse_unk;
	int32_t unk_id;
	size_t strip_leading;		/* decoder strips this many leading spaces */

	int32_t bos_id, eos_id;
	char *bos_str, *eos_str, *chat_template;
	bool add_bos;
};

/* tokenizer_load.c: the first error wins; later calls keep the message. */
void tok_err(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* tokenizer_components.c: normalizer, pre_tokenizer, decoder of tokenizer.json at path. */
struct cJSON;
int tok_load_components(struct tokenizer *t, const struct cJSON *root, const char *path,
			char *err, size_t err_len);

/* tokenizer_config.c: bos/eos, add_bos_token, chat template; absent file is fine. */
int tok_load_config(struct tokenizer *t, const char *model_dir, char *err, size_t err_len);

/* tokenizer_pretok.c: compiles pattern (PCRE2 UTF + UCP, JIT when available). */
pcre2_code *tok_regex_compile(const char *pattern, size_t len, bool literal,
			      char *msg, size_t msg_len);
extern const char tok_gpt2_pattern[];

/* Per-call scratch of one encode. */
struct tok_piece {
	size_t off, len;
};

struct tok_encoder {
	const struct tokenizer *tok;
	pcre2_match_data *md;
	struct tok_buf norm[2];		/* normalizer ping-pong buffers */
	struct tok_buf text[2];		/* pre-tokenizer rebuilt text */
	struct tok_piece *pieces[2];
	size_t n_pieces[2], cap_pieces[2];
	struct tok_span {
		size_t off, len;
		bool match;
	} *spans;			/* one Split's matches and gaps */
	size_t n_spans, cap_spans;
	struct tok_buf ids;		/* int32_t ids being produced */
	/* BPE scratch, sized to the longest piece seen */
	struct tok_sym {
		int32_t id, prev, next;
	} *syms;
	struct tok_heap_item {
		uint32_t rank, pos;
		int32_t id;
	} *heap;
	size_t cap_syms, cap_heap;
	struct tok_buf tmp;
};

int tok_normalize(struct tok_encoder *e, const char *s, size_t len, const char **out, size_t *out_len);
/* Splits s into pieces; *base receives the text the pieces index into. */
int tok_pretokenize(struct tok_encoder *e, const char *s, size_t len, bool at_start,
		    const char **base, const struct tok_piece **pieces, size_t *n);
int tok_bpe_piece(struct tok_encoder *e, const uint8_t *p, size_t len);
int tok_emit(struct tok_encoder *e, int32_t id);

/* tokenizer_nfc.c: NFC of valid UTF-8 s; *out = s itself when already NFC. */
int tok_nfc(struct tok_buf *buf, const char *s, size_t len, const char **out, size_t *out_len);

struct nfc_decomp {
	uint32_t cp, a, b;		/* b == 0: singleton */
};
struct nfc_comp {
	uint32_t a, b, cp;
};
struct nfc_ccc {
	uint32_t lo, hi, ccc;
};
struct nfc_range {
	uint32_t lo, hi;
};
extern const struct nfc_decomp nfc_decomp_table[];
extern const size_t nfc_decomp_table_count;
extern const struct nfc_comp nfc_comp_table[];
extern const size_t nfc_comp_table_count;
extern const struct nfc_ccc nfc_ccc_table[];
extern const size_t nfc_ccc_table_count;
extern const struct nfc_range nfc_unstable_table[];
extern const size_t nfc_unstable_table_count;

/* tokenizer_stream.c: UTF-8 helpers. */
enum tok_utf8 { TOK_UTF8_VALID, TOK_UTF8_INCOMPLETE, TOK_UTF8_INVALID };
/* Classifies the sequence at p; *n = its length, or the maximal invalid subpart. */
enum tok_utf8 tok_utf8_next(const uint8_t *p, size_t avail, size_t *n);
/* Decodes one code point of valid UTF-8 at p; returns its length. */
size_t tok_utf8_decode(const uint8_t *p, uint32_t *cp);
size_t tok_utf8_encode(uint32_t cp, char *out);
/* Byte offset of the first invalid byte, or len when s is valid UTF-8. */
size_t tok_utf8_check(const char *s, size_t len);
/*
 * Copies src to dst replacing each maximal invalid subpart by U+FFFD; when
 * !final an incomplete sequence at the end is left unconsumed. dst needs
 * 3 * len bytes. Returns the bytes written; *consumed the bytes read.
 */
size_t tok_utf8_lossy(char *dst, const uint8_t *src, size_t len, bool final, size_t *consumed);

/* GPT-2 byte <-> unicode mapping used by ByteLevel. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);	/* -1 when cp is not in the mapping */

/* JSON field readers shared by the loaders: absent or mistyped fields give
 * the default (bool) or NULL. */
static inline const cJSON *tj_get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static inline bool tj_bool(const cJSON *o, const char *k, bool def)
{
	const cJSON *v = tj_get(o, k);
	return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static inline const char *tj_str(const cJSON *o, const char *k)
{
	const cJSON *v = tj_get(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

#endif
