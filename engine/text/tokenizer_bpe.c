/*
 * tokenizer_bpe — the BPE model: the vocabulary and merge hash maps, the
 * GPT-2 byte <-> unicode mapping, and the merge loop that turns one
 * pre-tokenized piece into ids.
 *
 * The merge loop is the reference algorithm of the `tokenizers` library:
 * symbols in a linked list, candidate merges in a min-heap ordered by
 * (rank, position), a popped candidate applied only if the pair it was made
 * for is still there. A piece of n symbols costs O(n log n); nothing is
 * cached between pieces, so memory stays bounded by the longest piece.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "engine/text/tokenizer_internal.h"

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ULL;	/* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
	return h ^ (h >> 29);
}

static uint32_t pow2_at_least(size_t n)
{
	uint32_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

int tok_strmap_init(struct tok_strmap *m, const char *arena, size_t entries)
{
	m->arena = arena;
	m->cap = pow2_at_least(entries * 2);
	m->slots = malloc(sizeof(*m->slots) * m->cap);
	if (!m->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->cap; i++)
		m->slots[i].len = UINT32_MAX;
	return 0;
}

void tok_strmap_free(struct tok_strmap *m)
{
	free(m->slots);
	m->slots = NULL;
}

void tok_strmap_put(struct tok_strmap *m, uint32_t off, uint32_t len, int32_t id)
{
	uint32_t i = (uint32_t)hash_bytes(m->arena + off, len) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		struct tok_strmap_slot *s = &m->slots[i];
		if (s->len == UINT32_MAX ||
		    (s->len == len && memcmp(m->arena + s->off, m->arena + off, len) == 0)) {
			s->off = off;
			s->len = len;
			s->id = id;
			return;
		}
	}
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len)
{
	if (!m->slots)
		return -1;
	uint32_t i = (uint32_t)hash_bytes(key, len) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		const struct tok_strmap_slot *s = &m->slots[i];
		if (s->len == UINT32_MAX)
			return -1;
		if (s->len == len && memcmp(m->arena + s->off, key, len) == 0)
			return s->id;
	}
}

static uint64_t hash_pair(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return k;
}

int tok_mergemap_init(struct tok_mergemap *m, size_t entries)
{
	m->cap = pow2_at_least(entries + entries / 2);
	m->slots = malloc(sizeof(*m->slots) * m->cap);
	if (!m->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->cap; i++)
		m->slots[i].key = UINT64_MAX;
	return 0;
}

void tok_mergemap_free(struct tok_mergemap *m)
{
	free(m->slots);
	m->slots = NULL;
}

void tok_mergemap_put(struct tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	uint32_t i = (uint32_t)hash_pair(key) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		struct tok_merge_slot *s = &m->slots[i];
		if (s->key == key || s->key == UINT64_MAX) {
			s->key = key;
			s->rank = rank;
			s->id = id;
			return;
		}
	}
}

const struct tok_merge_slot *tok_mergemap_get(const struct tok_mergemap *m, int32_t a, int32_t b)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	uint32_t i = (uint32_t)hash_pair(key) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		const struct tok_merge_slot *s = &m->slots[i];
		if (s->key == key)
			return s;
		if (s->key == UINT64_MAX)
			return NULL;
	}
}

/*
 * GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order, so every byte is a visible char.
 */
static bool byte_is_printable(unsigned b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b)
{
	if (byte_is_printable(b))
		return b;
	if (b <= 0x20)
		return 256 + b;			/* 33 control bytes and space */
	if (b <= 0xA0)
		return 256 + 33 + (b - 0x7F);	/* DEL, C1 controls, NBSP */
	return 256 + 67;			/* 0xAD, soft hyphen */
}

int tok_cp_to_byte(uint32_t cp)
{
	if (cp < 256)
		return byte_is_printable(cp) ? (int)cp : -1;
	if (cp <= 256 + 0x20)
		return (int)(cp - 256);
	if (cp < 256 + 67)
		return (int)(0x7F + cp - (256 + 33));
	return cp == 256 + 67 ? 0xAD : -1;
}

static void heap_push(struct tok_heap_item *h, size_t *n, struct tok_heap_item it)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		struct tok_heap_item p = h[parent];
		if (p.rank < it.rank || (p.rank == it.rank && p.pos <= it.pos))
			break;
		h[i] = p;
		i = parent;
	}
	h[i] = it;
}

static struct tok_heap_item heap_pop(struct tok_heap_item *h, size_t *n)
{
	struct tok_heap_item top = h[0], last = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct tok_heap_item best = last;
		if (l < *n && (h[l].rank < best.rank || (h[l].rank == best.rank && h[l].pos < best.pos))) {
			m = l;
			best = h[l];
		}
		if (l + 1 < *n && (h[l + 1].rank < best.rank ||
				   (h[l + 1].rank == best.rank && h[l + 1].pos < best.pos)))
			m = l + 1;
		if (m == i)
			break;
		h[i] = h[m];
		i = m;
	}
	if (*n > 0)
		h[i] = last;
	return top;
}

static void push_pair(const struct tokenizer *t, struct tok_encoder *e, size_t *nh, int32_t pos)
{
	struct tok_sym *s = e->syms;
	if (pos < 0 || s[pos].next < 0)
		return;
	const struct tok_merge_slot *m = tok_mergemap_get(&t->merges, s[pos].id, s[s[pos].next].id);
	if (m)
		heap_push(e->heap, nh, (struct tok_heap_item){ m->rank, (uint32_t)pos, m->id });
}

/* Appends one initial symbol, applying the unknown-token rules of the reference. */
static void add_symbol(const struct tokenizer *t, struct tok_encoder *e, size_t *n, int32_t id)
{
	if (id < 0) {
		if (t->unk_id < 0)
			return;	/* no unk token: the reference drops the character */
		if (t->fuse_unk && *n > 0 && e->syms[*n - 1].id == t->unk_id)
			return;
		id = t->unk_id;
	}
	e->syms[*n] = (struct tok_sym){ id, (int32_t)*n - 1, -1 };
	if (*n > 0)
		e->syms[*n - 1].next = (int32_t)*n;
	(*n)++;
}

static size_t initial_symbols(const struct tokenizer *t, struct tok_encoder *e,
			      const uint8_t *p, size_t len)
{
	size_t n = 0;
	if (t->byte_level) {
		for (size_t i = 0; i < len; i++)
			add_symbol(t, e, &n, t->byte_id[p[i]]);
		return n;
	}
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t cl = tok_utf8_decode(p + i, &cp);
		int32_t id = tok_strmap_get(&t->vocab, (const char *)p + i, cl);
		if (id < 0 && t->byte_fallback) {
			bool all = true;
			for (size_t k = 0; k < cl; k++)
				all = all && t->fallback_id[p[i + k]] >= 0;
			if (all) {
				for (size_t k = 0; k < cl; k++)
					add_symbol(t, e, &n, t->fallback_id[p[i + k]]);
				i += cl;
				continue;
			}
		}
		add_symbol(t, e, &n, id);
		i += cl;
	}
	return n;
}

/* With ignore_merges, a piece that is itself a vocabulary entry is one token. */
static int32_t whole_piece_id(const struct tokenizer *t, struct tok_encoder *e,
			      const uint8_t *p, size_t len)
{
	if (!t->byte_level)
		return tok_strmap_get(&t->vocab, (const char *)p, len);
	e->tmp.len = 0;
	if (tok_buf_reserve(&e->tmp, len * 2))
		return -2;
	for (size_t i = 0; i < len; i++)
		e->tmp.len += tok_utf8_encode(tok_byte_to_cp(p[i]), e->tmp.data + e->tmp.len);
	return tok_strmap_get(&t->vocab, e->tmp.data, e->tmp.len);
}

int tok_bpe_piece(struct tok_encoder *e, const uint8_t *p, size_t len)
{
	const struct tokenizer *t = e->tok;
	if (len == 0)
		return 0;
	if (t->ignore_merges) {
		int32_t id = whole_piece_id(t, e, p, len);
		if (id == -2)
			return -ENOMEM;
		if (id >= 0)
			return tok_emit(e, id);
	}
	/* Byte fallback can turn one byte into one symbol: len bounds the count. */
	if (array_grow((void **)&e->syms, &e->cap_syms, len, sizeof(*e->syms)) ||
	    array_grow((void **)&e->heap, &e->cap_heap, 3 * len, sizeof(*e->heap)))
		return -ENOMEM;
	size_t n = initial_symbols(t, e, p, len);
	size_t nh = 0;
	for (size_t i = 0; i + 1 < n; i++)
		push_pair(t, e, &nh, (int32_t)i);
	struct tok_sym *s = e->syms;
	while (nh > 0) {
		struct tok_heap_item top = heap_pop(e->heap, &nh);
		int32_t pos = (int32_t)top.pos, nx = s[pos].next;
		if (s[pos].id < 0 || nx < 0)
			continue;
		/* Merges only grow symbols, so an unchanged result id means an unchanged pair. */
		const struct tok_merge_slot *m = tok_mergemap_get(&t->merges, s[pos].id, s[nx].id);
		if (!m || m->id != top.id)
			continue;
		s[pos].id = top.id;
		s[pos].next = s[nx].next;
		s[nx].id = -1;
		if (s[pos].next >= 0)
			s[s[pos].next].prev = pos;
		push_pair(t, e, &nh, s[pos].prev);
		push_pair(t, e, &nh, pos);
	}
	for (int32_t i = n ? 0 : -1; i >= 0; i = s[i].next) {
		int rc = tok_emit(e, s[i].id);
		if (rc)
			return rc;
	}
	return 0;
}
