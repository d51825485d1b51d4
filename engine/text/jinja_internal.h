/*
 * jinja_internal — what the files of the Jinja subset share: the arena,
 * the value type, tokens, the syntax tree and the render context. Not part
 * of the public API (jinja.h).
 *
 * Memory: a template's tokens and tree live in its parse arena; every value
 * a render makes lives in that render's arena, all freed at once when the
 * render ends. Values are passed by value (16 bytes); strings are
 * immutable, lists and dicts are mutable only where Jinja allows it
 * (namespace attributes, the dicts and lists a render builds).
 */
#ifndef COLIBRI_JINJA_INTERNAL_H
#define COLIBRI_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/text/jinja.h"

/* ---- arena ---- */

struct ja_chunk;

/* Bump allocator; bytes counts what was handed out, checked against bytes_max. */
struct ja_arena {
	struct ja_chunk *head;
	size_t bytes, bytes_max;
	bool over;	/* an allocation was refused for bytes_max */
};

/* n zeroed bytes, 16-aligned; NULL when over bytes_max or out of memory
 * (the arena tells which through ja_over). */
void *ja_alloc(struct ja_arena *a, size_t n);
bool ja_over(const struct ja_arena *a);
void ja_free_all(struct ja_arena *a);

/* ---- values ---- */

enum jv_kind {
	JV_UNDEF,	/* Jinja's Undefined: prints "", false, iterates empty */
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,
	JV_LIST,	/* also tuples (jv.flags & JV_TUPLE) */
	JV_DICT,
	JV_NS,	/* namespace(): a dict whose attributes set can assign */
	JV_MACRO,
	JV_LOOP,	/* the loop variable of a for */
	JV_FUNC,	/* a global function: u.i is an enum jfunc */
	JV_METHOD,	/* a method bound to its object */
};

/* jv.flags */
enum { JV_TUPLE = 1 };

/* Why a value is undefined (jv.flags of a JV_UNDEF), for the message when it is used. */
enum { JV_UNDEF_NAME = 0, JV_UNDEF_ATTR = 1, JV_UNDEF_UNSAFE = 2, JV_UNDEF_PARAM = 3 };

struct jstr {
	size_t len;
	char p[];	/* len bytes and a NUL */
};

struct jlist {
	size_t n, cap;
	struct jv *v;
};

struct jdict {
	size_t n, cap;
	struct jv *k, *v;	/* insertion order, as Python's dicts */
};

struct jv {
	uint8_t kind;
	uint8_t flags;
	uint8_t owner;	/* JV_UNDEF from an attribute: the kind of the object */
	union {
		bool b;
		int64_t i;
		double f;
		const struct jstr *s;
		struct jlist *l;
		struct jdict *d;
		const struct jmacro *m;
		struct jloop *lp;
		const struct jmethod *me;
		const char *name;	/* JV_UNDEF: the name or attribute */
	} u;
};

struct jnode;
struct jscope;

struct jmacro {
	const struct jnode *node;
	struct jscope *closure;	/* the scope the macro was defined in */
};

struct jloop {
	size_t index0, length;
	const struct jlist *items;
	unsigned depth;
};

struct jmethod {
	struct jv self;
	int id;	/* enum jmethod_id */
};

enum jfunc { JF_RANGE, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME };

/* ---- tokens ---- */

enum jtok_type {
	JT_EOF,
	JT_DATA,
	JT_VAR_BEGIN,
	JT_VAR_END,
	JT_BLOCK_BEGIN,
	JT_BLOCK_END,
	JT_NAME,
	JT_STRING,
	JT_INT,
	JT_FLOAT,
	JT_OP,
};

/* Operators that are two characters; single ones are their character. */
enum { JOP_FLOORDIV = 256, JOP_POW, JOP_EQ, JOP_NE, JOP_GE, JOP_LE };

struct jtoken {
	uint8_t type;
	int op;	/* JT_OP */
	int line, col;
	const char *s;	/* JT_DATA, JT_STRING (decoded), JT_NAME: NUL-terminated, in the arena */
	size_t len;
	int64_t i;
	double f;
};

/* Splits src into tokens (normalised newlines, whitespace control applied),
 * ending with JT_EOF; 0 or -EINVAL / -ENOMEM with err filled. *toks is
 * malloc'd (the caller frees it; the strings it points to are in a). */
int jinja_lex(struct ja_arena *a, const char *src, size_t len, struct jtoken **toks, size_t *n,
	      struct jinja_error *err);

/* ---- syntax tree ---- */

enum jn_type {
	/* statements */
	JN_DATA,	/* value: the text */
	JN_OUTPUT,	/* a: the expression printed */
	JN_IF,	/* a: test, kids: body, kids2: else (an elif is a JN_IF there) */
	JN_FOR,	/* a: target, b: iterable, c: filter or NULL, kids: body, kids2: else */
	JN_SET,	/* a: target (NAME, TUPLE of NAMEs, NSREF), b: value */
	JN_SET_BLOCK,	/* a: target, kids: body, kids2: filters (JN_FILTER with a NULL input) */
	JN_MACRO,	/* name, names: parameters, kids2: defaults of the last n2, kids: body */
	JN_BREAK,
	JN_CONTINUE,
	JN_WITH,	/* names: targets, kids2: values, kids: body */
	JN_SCOPE,	/* kids: body ({% generation %}) */
	JN_FILTER_BLOCK,	/* kids: body, kids2: filters */
	/* expressions */
	JN_CONST,	/* value */
	JN_NAME,	/* name */
	JN_NSREF,	/* name.attr as an assignment target */
	JN_LIST,	/* kids */
	JN_TUPLE,	/* kids */
	JN_DICT,	/* kids: keys, kids2: values */
	JN_GETATTR,	/* a.name */
	JN_GETITEM,	/* a[b]; b may be a JN_SLICE */
	JN_SLICE,	/* a:b:c, each may be NULL */
	JN_CALL,	/* a(kids..., names[i]=kids2[i]...) */
	JN_FILTER,	/* a | name(kids..., names=kids2); op: enum jfilter_id */
	JN_TEST,	/* a is name(kids...); op: enum jtest_id */
	JN_NOT,
	JN_NEG,
	JN_POS,
	JN_BINOP,	/* a op b; op: '+', '-', '*', '/', '%', JOP_FLOORDIV, JOP_POW */
	JN_AND,
	JN_OR,
	JN_COMPARE,	/* a, then ops[i] kids[i]...; ops are JOP_*, '<', '>', 'i' (in), 'n' (not in) */
	JN_CONCAT,	/* kids joined with ~ */
	JN_COND,	/* b if a else c (c may be NULL) */
};

/* JN_MACRO.op bits: what the body refers to. */
enum { JN_MACRO_VARARGS = 1, JN_MACRO_KWARGS = 2 };

struct jnode {
	uint8_t type;
	int op;
	int line, col;
	struct jv value;
	const char *name, *attr;
	struct jnode *a, *b, *c;
	struct jnode **kids, **kids2;
	size_t n, n2;
	const char **names;
	size_t n_names;
	int *ops;
};

int jinja_parse_tokens(struct ja_arena *a, const struct jtoken *toks, size_t n, struct jnode **root,
		       struct jinja_error *err);

/* Nesting of blocks and expressions a template may have. */
#define JINJA_PARSE_DEPTH_MAX 100

/* The parser's state, shared by jinja_parse.c (statements) and
 * jinja_parse_expr.c (expressions). Functions return NULL after a failure,
 * which p->rc and p->err describe. */
struct jparser {
	struct ja_arena *a;
	const struct jtoken *t;
	size_t n, i;
	struct jinja_error *err;
	int rc;
	unsigned depth;
	struct jnode *macro;	/* the innermost macro being parsed, or NULL */
	unsigned loops;	/* for loops around the current statement, inside the current macro */
	const struct jtoken *open[JINJA_PARSE_DEPTH_MAX];	/* the tags of the blocks being parsed */
	const char *const *open_ends[JINJA_PARSE_DEPTH_MAX];	/* and the tags that would close them */
	unsigned n_open;
};

/* A growable array of node pointers (or names) in the parse arena. */
struct jvec {
	void **v;
	size_t n, cap;
};

const struct jtoken *jp_cur(const struct jparser *p);
const struct jtoken *jp_peek(const struct jparser *p);
void jp_next(struct jparser *p);
bool jp_is_name(const struct jparser *p, const char *name);
bool jp_is_op(const struct jparser *p, int op);
bool jp_skip_name(struct jparser *p, const char *name);
bool jp_skip_op(struct jparser *p, int op);
int jp_expect_op(struct jparser *p, int op);
int jp_expect_type(struct jparser *p, int type);
int jp_fail(struct jparser *p, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct jnode *jp_node(struct jparser *p, int type, const struct jtoken *at);
int jvec_push(struct jparser *p, struct jvec *v, void *x);
int jp_enter(struct jparser *p);
void jp_leave(struct jparser *p);

struct jnode *jp_expression(struct jparser *p, bool with_condexpr);
/* extra_end: a name that also ends the tuple ("in", "recursive"), or NULL. */
struct jnode *jp_tuple(struct jparser *p, bool simplified, bool with_condexpr, const char *extra_end,
		       bool explicit_parens, bool with_namespace);
struct jnode *jp_primary(struct jparser *p, bool with_namespace);
/* Filters after node (node NULL for a set or filter block). */
struct jnode *jp_filter(struct jparser *p, struct jnode *node, bool start_inline);
/* Call arguments "(...)" into n's kids / kids2 / names. */
int jp_call_args(struct jparser *p, struct jnode *n);

struct jinja_template {
	struct ja_arena arena;
	struct jnode *root;	/* a JN_SCOPE holding the top-level statements */
};

/* ---- rendering ---- */

/* Growable output; every append is checked against the output limit. */
struct jbuf {
	char *p;
	size_t len, cap;
};

/* Variables of one frame: the template, a loop iteration, a macro call. Names
 * point into the tree or the input JSON, which outlive the render. */
struct jscope {
	struct jscope *parent;
	size_t n, cap;
	const char **names;
	struct jv *vals;
};

/* Evaluation may recurse this deep (expressions, blocks, macro bodies) before
 * the render stops, which keeps the C stack bounded. */
#define JR_EVAL_DEPTH_MAX 1000

struct jrender {
	struct ja_arena a;
	struct jinja_error *err;
	const struct jinja_limits *lim;
	uint64_t steps;
	unsigned depth;	/* nested evaluation, against JR_EVAL_DEPTH_MAX */
	unsigned calls;	/* nested macro calls, against lim->depth_max */
	int line, col;	/* the node being evaluated */
	int loop_ctl;	/* JN_BREAK / JN_CONTINUE pending, else 0 */
	unsigned loop_depth;
	time_t now;
	int rc;	/* the first error: -EINVAL, -E2BIG or -ENOMEM */
};

/* Records the first error (code -EINVAL, -E2BIG, -ENOMEM) at the current node; returns -1. */
int jr_fail(struct jrender *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same for a failed allocation: -E2BIG when the memory limit was hit, else -ENOMEM. */
int jr_oom(struct jrender *r);

/* Value constructors and helpers (jinja_value.c). Allocation failures go
 * through jr_oom and give a JV_UNDEF with r->rc set; callers check r->rc
 * or the returned pointer. */
struct jv jv_undef(const char *name);
struct jv jv_none(void);
struct jv jv_bool(bool b);
struct jv jv_int(int64_t i);
struct jv jv_float(double f);
struct jv jv_str(struct jrender *r, const char *s, size_t len);	/* copies */
struct jv jv_str_from(const struct jstr *s);
const struct jstr *jstr_new(struct ja_arena *a, const char *s, size_t len);
struct jlist *jlist_new(struct jrender *r, size_t cap);
int jlist_push(struct jrender *r, struct jlist *l, struct jv v);
struct jdict *jdict_new(struct jrender *r);
int jdict_set(struct jrender *r, struct jdict *d, struct jv k, struct jv v);
/* The value for a string key, or NULL. */
struct jv *jdict_get(const struct jdict *d, const char *key, size_t len);
struct jv *jdict_find(const struct jdict *d, struct jv key);
struct jv jv_list(struct jlist *l, bool tuple);
struct jv jv_dict(struct jdict *d);

bool jv_truthy(struct jv v);
/* Python ==; recursion bounded by the depth limit (-1 with r->rc on error). */
int jv_equal(struct jrender *r, struct jv a, struct jv b);
/* Python a < b into *lt; op names the operator for the TypeError. 0 or -1. */
int jv_less(struct jrender *r, struct jv a, struct jv b, const char *op, bool *lt);
/* "str", "int", ... as Python's type names; "dict object" style via jv_owner_name. */
const char *jv_type_name(struct jv v);
/* Appends Python's str(v) (repr for items of lists and dicts). 0 or -1. */
int jv_write_str(struct jrender *r, struct jbuf *b, struct jv v);
int jv_write_repr(struct jrender *r, struct jbuf *b, struct jv v, unsigned depth);
/* str(v) as a value (strings are returned as they are). */
struct jv jv_to_str(struct jrender *r, struct jv v);
/* Python's repr of a double: shortest round-trip digits. buf >= 32 bytes. */
void jv_float_repr(char *buf, size_t n, double f);
/* The error for using an undefined value (Jinja's UndefinedError). Returns -1. */
int jv_undef_fail(struct jrender *r, struct jv v);
/* Values nest at most this deep (lists in lists...); deeper is an error. */
#define JV_NEST_MAX 512

/* JSON to a value; nesting is bounded by cJSON's own limit. */
struct jv jv_from_json(struct jrender *r, const cJSON *j, unsigned depth);

int jbuf_put(struct jrender *r, struct jbuf *b, const char *s, size_t n);
int jbuf_putc(struct jrender *r, struct jbuf *b, char c);
/* The buffer's bytes as a string value; the buffer is freed. */
struct jv jbuf_take(struct jrender *r, struct jbuf *b);

/* UTF-8 (jinja_value.c): code point count, the byte offset of code point i,
 * decoding one character (invalid bytes count as one character each). */
size_t utf8_count(const char *s, size_t len);
size_t utf8_offset(const char *s, size_t len, size_t i);
size_t utf8_next(const char *s, size_t len, uint32_t *cp);
void utf8_put(char out[4], uint32_t cp, size_t *n);
/* Bytes of the Python whitespace character at s (str.isspace()), or 0. */
size_t jpy_space_len(const char *s, size_t n);
/* Bytes of the line break at s, as str.splitlines() breaks (\n \r \r\n \v \f \x1c-\x1e U+0085
 * U+2028 U+2029), or 0. */
size_t jpy_line_break(const char *s, size_t n);

/* tojson with Hugging Face's options (jinja_json.c). indent < 0: none;
 * indent_str overrides indent when set. */
struct jtojson {
	int indent;
	const struct jstr *indent_str;
	bool ensure_ascii, sort_keys;
	const struct jstr *item_sep, *key_sep;	/* separators=(a, b), NULL: Python's defaults */
};
int jv_tojson(struct jrender *r, struct jbuf *b, struct jv v, const struct jtojson *o);

/* Evaluation (jinja_eval.c, jinja_expr.c). */
int jr_eval(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv *out);
int jr_exec_body(struct jrender *r, struct jscope *s, struct jnode *const *body, size_t n, struct jbuf *out);
struct jscope *jscope_new(struct jrender *r, struct jscope *parent);
/* Looks a name up through the scopes; NULL when unbound. */
struct jv *jscope_lookup(struct jscope *s, const char *name);
int jscope_set(struct jrender *r, struct jscope *s, const char *name, struct jv v);
/* Calls a macro, a global function or a bound method. */
int jr_call(struct jrender *r, struct jscope *s, struct jv callee, const struct jv *args, size_t n_args,
	    const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out);
/* Jinja's environment.getattr / getitem. */
int jr_getattr(struct jrender *r, struct jv obj, const char *name, struct jv *out);
int jr_getitem(struct jrender *r, struct jv obj, struct jv key, struct jv *out);
/* The items of an iterable (list, tuple, dict keys, string characters; Undefined: none). */
int jr_iterate(struct jrender *r, struct jv v, struct jlist **out);
/* Python's binary operators (op as in JN_BINOP) and "item in seq". */
int jr_binop(struct jrender *r, int op, struct jv a, struct jv b, struct jv *out);
int jr_contains(struct jrender *r, struct jv item, struct jv seq, bool *out);
/* One step of work: -1 with -E2BIG once steps_max is reached. */
int jr_step(struct jrender *r);

/* Filters and tests (jinja_filters.c): ids resolved at parse time. */
int jinja_filter_id(const char *name);
int jinja_test_id(const char *name);
int jr_filter(struct jrender *r, struct jscope *s, int id, struct jv in, const struct jv *args, size_t n_args,
	      const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out);
int jr_test(struct jrender *r, struct jscope *s, int id, struct jv in, const struct jv *args, size_t n_args,
	    bool *out);

/* Methods (jinja_methods.c): the bound method for obj.name, or 0 when there is none. */
int jr_method_lookup(struct jrender *r, struct jv obj, const char *name, struct jv *out);
int jr_method_call(struct jrender *r, const struct jmethod *m, const struct jv *args, size_t n_args,
		   const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out);
/* loop.<name>, or 0 when the loop has no such attribute. */
int jr_loop_attr(struct jrender *r, const struct jloop *lp, const char *name, struct jv *out);

/* Python string helpers shared by filters and methods (jinja_methods.c). */
struct jv jpy_strip(struct jrender *r, const struct jstr *s, const struct jstr *chars, bool left, bool right);
struct jv jpy_replace(struct jrender *r, const struct jstr *s, const struct jstr *old, const struct jstr *new_,
		     int64_t count);
struct jv jpy_case(struct jrender *r, const struct jstr *s, int how);	/* 'l' 'u' 'c' 't' */
/* Python slice of a list/tuple/string with Python's index rules. */
int jr_slice(struct jrender *r, struct jv obj, struct jv start, struct jv stop, struct jv step, struct jv *out);

#endif
