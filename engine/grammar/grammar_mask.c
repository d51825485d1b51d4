/*
 * grammar_mask — token masks: which ids of a vocabulary a grammar state
 * admits next.
 *
 * The vocabulary's byte strings are kept as a trie laid out in preorder
 * (nodes sorted like the strings), each node holding its byte, its depth and
 * the index one past its subtree. A mask is one linear pass over that array:
 * a node's state is its parent's state stepped by the node's byte (a cached
 * look-up in the workspace most of the time); a dead node skips its whole
 * subtree, so shared prefixes are walked once and rejected prefixes never
 * again. Cost: O(live trie nodes) look-ups; memory: the trie (about 1 node
 * per vocabulary byte, 32 bytes each) and one state per depth.
 *
 * Inside a string most tokens leave the state as it was, so walking them
 * byte by byte is wasted work: each node also records which ASCII bytes
 * occur below it, and a subtree whose bytes all map the current set to
 * itself (gram_ws_fix) is allowed whole without being walked. Sets are
 * only tested for that on subtrees of SUBTREE_MIN nodes or more, because
 * computing a set's fixed bytes costs 127 steps.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_internal.h"
#include "engine/text/tokenizer.h"

struct grammar_vocab {
	size_t n_ids;
	uint8_t *byte;		/* [n_nodes] */
	uint16_t *depth;	/* [n_nodes], 1 for the root's children */
	uint32_t *skip;		/* [n_nodes] one past the subtree */
	uint32_t *tok_off;	/* [n_nodes + 1] ids ending at node i: ids[tok_off[i] ..] */
	uint64_t (*below)[2];	/* [n_nodes] ASCII bytes of the strict subtree; bit 0: a NUL
				   byte or a prefix that is not valid UTF-8 */
	uint8_t *high;		/* [n_nodes] the strict subtree has bytes >= 0x80 */
	int32_t *ids;
	uint32_t n_nodes;
	uint32_t depth_max;
	int32_t *eos;		/* [n_eos] */
	size_t n_eos;
};

struct tok_ref {
	const uint8_t *b;
	uint32_t len;
	int32_t id;
};

static int ref_cmp(const void *x, const void *y)
{
	const struct tok_ref *a = x, *b = y;
	uint32_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->b, b->b, n);
	if (c)
		return c;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

#define SUBTREE_MIN 32
#define DEPTH_LIMIT 65535	/* longer tokens are left out of the trie (never allowed) */

int grammar_vocab_new(struct grammar_vocab **out, size_t n_ids, const char *const *tokens,
		      const size_t *lens, const bool *special, const int32_t *eos, size_t n_eos)
{
	*out = NULL;
	struct grammar_vocab *v = calloc(1, sizeof(*v));
	struct tok_ref *refs = malloc((n_ids ? n_ids : 1) * sizeof(*refs));
	if (!v || !refs)
		goto nomem;
	v->n_ids = n_ids;
	v->eos = malloc((n_eos ? n_eos : 1) * sizeof(*v->eos));
	if (!v->eos)
		goto nomem;
	if (n_eos)
		memcpy(v->eos, eos, n_eos * sizeof(*eos));
	v->n_eos = n_eos;
	size_t n = 0, total = 0;
	for (size_t i = 0; i < n_ids; i++) {
		bool is_eos = false;
		for (size_t k = 0; k < n_eos; k++)
			is_eos |= eos[k] == (int32_t)i;
		if (!tokens[i] || lens[i] == 0 || lens[i] > DEPTH_LIMIT || is_eos ||
		    (special && special[i]))
			continue;
		refs[n++] = (struct tok_ref){ (const uint8_t *)tokens[i], (uint32_t)lens[i],
					      (int32_t)i };
		total += lens[i];
	}
	qsort(refs, n, sizeof(*refs), ref_cmp);
	if (total >= UINT32_MAX)
		goto nomem;
	v->byte = malloc(total + 1);
	v->depth = malloc((total + 1) * sizeof(*v->depth));
	v->skip = malloc((total + 1) * sizeof(*v->skip));
	v->tok_off = calloc(total + 2, sizeof(*v->tok_off));
	v->ids = malloc((n ? n : 1) * sizeof(*v->ids));
	v->below = calloc(total + 1, sizeof(*v->below));
	v->high = calloc(total + 1, 1);
	uint32_t *open = malloc((DEPTH_LIMIT + 2) * sizeof(*open));	/* node at each depth on the path */
	if (!v->byte || !v->depth || !v->skip || !v->tok_off || !v->ids || !v->below || !v->high || !open) {
		free(open);
		goto nomem;
	}
	/* Nodes in sorted order: a string adds the bytes past its common prefix with the previous. */
	uint32_t nn = 0, path = 0;	/* path: depth of the previous string */
	uint32_t *count = v->tok_off + 1;	/* count[i] ids at node i, prefix-summed below */
	for (size_t i = 0; i < n; i++) {
		const struct tok_ref *r = &refs[i];
		uint32_t lcp = 0;
		if (i > 0) {
			const struct tok_ref *q = &refs[i - 1];
			while (lcp < q->len && lcp < r->len && q->b[lcp] == r->b[lcp])
				lcp++;
		}
		for (uint32_t d = lcp; d < path; d++)
			v->skip[open[d + 1]] = nn;
		for (uint32_t d = lcp; d < r->len; d++) {
			v->byte[nn] = r->b[d];
			v->depth[nn] = (uint16_t)(d + 1);
			open[d + 1] = nn;
			nn++;
		}
		path = r->len;
		if (path > v->depth_max)
			v->depth_max = path;
		count[open[r->len]]++;
	}
	for (uint32_t d = 0; d < path; d++)
		v->skip[open[d + 1]] = nn;
	free(open);
	v->n_nodes = nn;
	for (uint32_t i = 0; i < nn; i++)
		v->tok_off[i + 1] += v->tok_off[i];
	/* UTF-8 validity of each node's prefix, read from the root. */
	uint8_t *bad = calloc(nn + 1, 1);
	uint8_t *need = malloc(v->depth_max + 2);	/* continuation bytes still due, per depth */
	if (!bad || !need) {
		free(bad);
		free(need);
		goto nomem;
	}
	need[0] = 0;
	for (uint32_t i = 0; i < nn; i++) {
		uint32_t d = v->depth[i];
		uint8_t b = v->byte[i], due = need[d - 1];
		if (due == 0xFF) {
			bad[i] = 1;
		} else if (due > 0) {
			bad[i] = (b & 0xC0) != 0x80;
			due--;
		} else if (b == 0) {
			bad[i] = 1;
		} else if (b >= 0x80) {
			/*
			 * Lead bytes whose second byte is restricted (E0, ED, F0, F4)
			 * count as bad too: bad[] only turns the shortcut off, so a
			 * coarse check is enough and the matcher decides.
			 */
			due = b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE1 && b <= 0xEF && b != 0xED ? 2 :
			      b >= 0xF1 && b <= 0xF3 ? 3 : 0;
			bad[i] = due == 0;
		}
		need[d] = bad[i] ? 0xFF : due;
	}
	free(need);
	/* Children come after their parent, so one backward pass fills below[]. */
	for (uint32_t i = nn; i-- > 0;) {
		for (uint32_t j = i + 1; j < v->skip[i]; j = v->skip[j]) {
			uint8_t b = v->byte[j];
			unsigned bit = b < 0x80 && !bad[j] ? b : 0;
			v->below[i][0] |= v->below[j][0];
			v->below[i][1] |= v->below[j][1];
			if (b < 0x80 || bad[j])
				v->below[i][bit / 64] |= 1ull << (bit % 64);
			v->high[i] |= v->high[j] | (b >= 0x80);
		}
	}
	free(bad);
	/* Sorted order puts every id of node i after those of earlier nodes. */
	for (size_t i = 0; i < n; i++)
		v->ids[i] = refs[i].id;
	free(refs);
	*out = v;
	return 0;
nomem:
	free(refs);
	grammar_vocab_free(v);
	return -ENOMEM;
}

int grammar_vocab_from_tokenizer(struct grammar_vocab **out, const struct tokenizer *tok,
				 const int32_t *eos, size_t n_eos)
{
	*out = NULL;
	size_t n = (size_t)tokenizer_vocab_size(tok);
	const char **b = calloc(n ? n : 1, sizeof(*b));
	size_t *lens = calloc(n ? n : 1, sizeof(*lens));
	bool *special = calloc(n ? n : 1, sizeof(*special));
	int rc = -ENOMEM;
	if (b && lens && special) {
		for (size_t i = 0; i < n; i++) {
			if (tokenizer_token_bytes(tok, (int32_t)i, &b[i], &lens[i]) != 0)
				b[i] = NULL, lens[i] = 0;
			special[i] = tokenizer_token_is_special(tok, (int32_t)i);
		}
		rc = grammar_vocab_new(out, n, b, lens, special, eos, n_eos);
	}
	free(b);
	free(lens);
	free(special);
	return rc;
}

void grammar_vocab_free(struct grammar_vocab *v)
{
	if (!v)
		return;
	free(v->byte);
	free(v->depth);
	free(v->skip);
	free(v->tok_off);
	free(v->ids);
	free(v->below);
	free(v->high);
	free(v->eos);
	free(v);
}

size_t grammar_vocab_size(const struct grammar_vocab *v)
{
	return v->n_ids;
}

int grammar_allowed(struct grammar_state *s, const struct grammar_vocab *v, uint64_t *bits)
{
	memset(bits, 0, (v->n_ids + 63) / 64 * sizeof(*bits));
	uint32_t set0;
	struct gram_part p0;
	struct gram_ws *w;
	int rc = gram_state_set(s, &set0, &p0, &w);
	if (rc)
		return rc;
	int count = 0;
	if (grammar_state_accepting(s))
		for (size_t k = 0; k < v->n_eos; k++) {
			int32_t id = v->eos[k];
			if (id >= 0 && (size_t)id < v->n_ids && !(bits[id / 64] >> (id % 64) & 1)) {
				bits[id / 64] |= 1ull << (id % 64);
				count++;
			}
		}
	if (!w->ascii) {
		w->ascii = calloc(256, sizeof(*w->ascii));
		if (!w->ascii)
			return -ENOMEM;
	}
	if (w->cap_walk < v->depth_max + 1) {
		/* Sized once per vocabulary: later masks do not allocate here. */
		free(w->walk_set);
		free(w->walk_part);
		w->walk_set = malloc((v->depth_max + 1) * sizeof(*w->walk_set));
		w->walk_part = malloc((v->depth_max + 1) * sizeof(*w->walk_part));
		w->cap_walk = w->walk_set && w->walk_part ? v->depth_max + 1 : 0;
		if (!w->cap_walk)
			return -ENOMEM;
	}
	uint32_t *set = w->walk_set;
	struct gram_part *part = w->walk_part;
	set[0] = set0;
	part[0] = p0;
	bool nomem = false;
	for (uint32_t i = 0; i < v->n_nodes;) {
		uint32_t d = v->depth[i];
		struct gram_part p = part[d - 1];
		uint32_t next = gram_ws_byte(w, set[d - 1], &p, v->byte[i]);
		if (next == 0) {
			if (w->err)
				break;
			i = v->skip[i];
			continue;
		}
		set[d] = next;
		part[d] = p;
		for (uint32_t k = v->tok_off[i]; k < v->tok_off[i + 1]; k++) {
			int32_t id = v->ids[k];
			bits[id / 64] |= 1ull << (id % 64);
			count++;
		}
		if (p.n == 0 && p0.n == 0 && v->skip[i] - i >= SUBTREE_MIN && next == set[d - 1]) {
			/* Only a set that just mapped to itself is worth testing. */
			const uint64_t *fix = gram_ws_fix(w, next);
			if (!fix) {
				nomem = !w->err;
				break;
			}
			bool whole = !(v->below[i][0] & 1) && !(v->below[i][0] & ~fix[0] & ~1ull) &&
				     !(v->below[i][1] & ~fix[1]) && (!v->high[i] || (fix[0] & 1));
			if (whole) {
				for (uint32_t k = v->tok_off[i + 1]; k < v->tok_off[v->skip[i]]; k++) {
					int32_t id = v->ids[k];
					bits[id / 64] |= 1ull << (id % 64);
					count++;
				}
				i = v->skip[i];
				continue;
			}
		}
		i++;
	}
	return w->err ? w->err : nomem ? -ENOMEM : count;
}

int32_t grammar_bits_first(const uint64_t *bits, size_t n_ids)
{
	for (size_t k = 0; k < (n_ids + 63) / 64; k++)
		if (bits[k]) {
			size_t id = k * 64 + (size_t)__builtin_ctzll(bits[k]);
			return id < n_ids ? (int32_t)id : -1;
		}
	return -1;
}
