/*
 * test_grammar — the GBNF grammar engine (engine/grammar/):
 *   - valid grammars parse (json, arithmetic, lists, chess moves, C
 *     identifiers, written here in llama.cpp's syntax) and match strings at
 *     the byte level: acceptance only at complete matches, rejection of
 *     non-members, multi-byte UTF-8 in classes and literals, code points
 *     split across advance calls, repetition bounds;
 *   - broken grammars: each error class with its line, column and message;
 *     left recursion (direct, indirect, behind a nullable prefix) refused,
 *     through a group or repetition at that construct's line and column;
 *   - stars over items that can match the empty string (`("a"? "b"?)*`)
 *     compile and match exactly their language: every string up to a
 *     length over a small alphabet against a POSIX regex; `[^]` is any
 *     code point and `[]` nothing, with a compiled class list never NULL;
 *     oversized repetitions and a stack explosion refused, never a hang;
 *   - token masks against a brute force (clone, advance by the token's
 *     bytes, check) on a hand-made vocabulary (tokens spanning elements,
 *     ending inside a code point, specials, EOS, empty tokens) and on the
 *     real Qwen3 vocabulary, whose mask time is logged;
 *   - random bytes as grammar text: an error or a grammar, never a crash.
 * The Qwen3 tests skip when tools/node_modules lacks the tokenizer.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <regex.h>
#include <time.h>

#include "tests/node_ref.h"
#include "tests/test_util.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_internal.h"
#include "engine/text/tokenizer.h"

static struct grammar *parse_ok(const char *text)
{
	char err[256];
	struct grammar *g = NULL;
	int rc = grammar_parse(&g, text, strlen(text), NULL, err, sizeof(err));
	cr_assert_eq(rc, 0, "grammar should parse: %s\n%s", err, text);
	return g;
}

enum { REJECT, PREFIX, ACCEPT };

/* Feeds str in pieces of step bytes: REJECT, PREFIX (admitted, incomplete) or ACCEPT. */
static int match_step(const struct grammar *g, const char *str, size_t len, size_t step)
{
	struct grammar_state *s;
	cr_assert_eq(grammar_state_new(&s, g), 0);
	int res = PREFIX;
	for (size_t i = 0; i < len; i += step) {
		size_t n = len - i < step ? len - i : step;
		int rc = grammar_state_advance(s, str + i, n);
		cr_assert(rc == 0 || rc == -EILSEQ, "advance: %d", rc);
		if (rc) {
			res = REJECT;
			break;
		}
	}
	if (res != REJECT && grammar_state_accepting(s))
		res = ACCEPT;
	grammar_state_free(s);
	return res;
}

/* Same answer whole, byte by byte and in threes. */
static int match(const struct grammar *g, const char *str)
{
	size_t len = strlen(str);
	int a = match_step(g, str, len, len ? len : 1);
	cr_assert_eq(match_step(g, str, len, 1), a, "byte-wise differs on '%s'", str);
	cr_assert_eq(match_step(g, str, len, 3), a, "3-byte steps differ on '%s'", str);
	return a;
}

#define ACCEPTS(g, s) cr_expect_eq(match(g, s), ACCEPT, "should accept '%s'", s)
#define REJECTS(g, s) cr_expect_eq(match(g, s), REJECT, "should reject '%s'", s)
#define PREFIXES(g, s) cr_expect_eq(match(g, s), PREFIX, "should be an incomplete prefix: '%s'", s)

static const char *json_gbnf =
	"# JSON, as in llama.cpp's grammars/json.gbnf (written anew)\n"
	"root   ::= object\n"
	"value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
	"\n"
	"object ::=\n"
	"  \"{\" ws (\n"
	"            string \":\" ws value\n"
	"    (\",\" ws string \":\" ws value)*\n"
	"  )? \"}\" ws\n"
	"\n"
	"array  ::=\n"
	"  \"[\" ws (\n"
	"            value\n"
	"    (\",\" ws value)*\n"
	"  )? \"]\" ws\n"
	"\n"
	"string ::=\n"
	"  \"\\\"\" (\n"
	"    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
	"    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
	"  )* \"\\\"\" ws\n"
	"\n"
	"number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
	"ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

Test(grammar, json_grammar)
{
	struct grammar *g = parse_ok(json_gbnf);
	ACCEPTS(g, "{}");
	ACCEPTS(g, "{\"a\": 1}");
	ACCEPTS(g, "{\"a\": [1, 2.5, -3e4, true, null], \"b\": {\"c\": \"d\\n\\u00e9\"}}");
	ACCEPTS(g, "{\"k\": \"h\xC3\xA9llo \xF0\x9F\x98\x80\"}");
	PREFIXES(g, "{\"a\": ");
	PREFIXES(g, "{\"a\": \"\xF0\x9F");
	REJECTS(g, "{\"a\" 1}");
	REJECTS(g, "{a: 1}");
	REJECTS(g, "[1]");
	REJECTS(g, "{\"a\": \"\\x\"}");
	REJECTS(g, "{\"a\": \"\x01\"}");
	REJECTS(g, "{\"a\": 01}");
	grammar_free(g);
}

Test(grammar, arithmetic_grammar)
{
	struct grammar *g = parse_ok(
		"root  ::= (expr \"=\" ws term \"\\n\")+\n"
		"expr  ::= term ([-+*/] ws term)*\n"
		"term  ::= ident | num | \"(\" ws expr \")\" ws\n"
		"ident ::= [a-z] [a-z0-9_]* ws\n"
		"num   ::= [0-9]+ ws\n"
		"ws    ::= [ \\t\\n]*\n");
	ACCEPTS(g, "1+2=3\n");
	ACCEPTS(g, "(a + b)*c = x1\ny=2\n");
	PREFIXES(g, "1+2=3");
	REJECTS(g, "1++2=3\n");
	REJECTS(g, "=3\n");
	grammar_free(g);
}

Test(grammar, list_chess_identifiers)
{
	struct grammar *list = parse_ok("root ::= item+\n# a list\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n");
	ACCEPTS(list, "- milk\n- eggs\n");
	REJECTS(list, "- \n");
	REJECTS(list, "* milk\n");
	grammar_free(list);

	struct grammar *chess = parse_ok(
		"root   ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
		"move   ::= (pawn | nonpawn | castle) [+#]?\n"
		"pawn   ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBRQ])?\n"
		"nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
		"castle ::= \"O-O\" \"-O\"?\n");
	ACCEPTS(chess, "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n");
	ACCEPTS(chess, "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd1#\n");
	REJECTS(chess, "1. e9 e5\n");
	grammar_free(chess);

	struct grammar *c = parse_ok("root ::= ident (\",\" ident){0,3}\nident ::= [a-zA-Z_] [a-zA-Z_0-9]*\n");
	ACCEPTS(c, "_x1,y,Z_9,w");
	REJECTS(c, "_x1,y,Z_9,w,v");
	REJECTS(c, "9x");
	grammar_free(c);
}

Test(grammar, utf8_classes_and_literals)
{
	/* α-ω is CE B1 .. CF 89; € is E2 82 AC; 😀 F0 9F 98 80 */
	struct grammar *g = parse_ok("root ::= [α-ω]+ \"€\" [\\U0001F600-\\U0001F64F]? .\n");
	ACCEPTS(g, "αβω€x");
	ACCEPTS(g, "λ€\xF0\x9F\x98\x80\xE4\xB8\xAD");
	PREFIXES(g, "λ\xE2\x82");
	PREFIXES(g, "\xCE");
	REJECTS(g, "\xC3\xA9");	/* é is outside α-ω */
	REJECTS(g, "\xCF\x8A");	/* ϊ U+03CA follows ω */
	REJECTS(g, "λ\xE2\x82\xAD");
	REJECTS(g, "\xC0\x80");	/* overlong */
	REJECTS(g, "\x80");
	grammar_free(g);

	/* A code point split across advance calls. */
	struct grammar *h = parse_ok("root ::= \"a\\u00e9b\"\n");
	struct grammar_state *s;
	cr_assert_eq(grammar_state_new(&s, h), 0);
	cr_assert_eq(grammar_state_advance(s, "a\xC3", 2), 0);
	cr_assert(!grammar_state_accepting(s));
	cr_assert_eq(grammar_state_advance(s, "\xA8", 1), -EILSEQ);	/* è, not é */
	cr_assert_eq(grammar_state_advance(s, "\xA9", 1), 0);	/* state was left unchanged */
	cr_assert(!grammar_state_accepting(s));
	cr_assert_eq(grammar_state_advance(s, "b", 1), 0);
	cr_assert(grammar_state_accepting(s));
	cr_assert(!grammar_state_dead(s));
	cr_assert_eq(grammar_state_advance(s, "b", 1), -EILSEQ);
	grammar_state_free(s);
	grammar_free(h);
}

Test(grammar, repetitions_and_escapes)
{
	struct grammar *g = parse_ok("root ::= \"a\"{2,3} x{2} (\"-\" x){1,} y*\nx ::= [0-9]\ny ::= \"\\x41\\t\\\"\\\\\"\n");
	ACCEPTS(g, "aa12-3");
	ACCEPTS(g, "aaa12-3-4A\t\"\\");
	PREFIXES(g, "a");
	REJECTS(g, "aaaa12-3");
	REJECTS(g, "aa1-3");
	grammar_free(g);

	struct grammar *n = parse_ok("root ::= (\"ab\" | \"c\")? \"d\"{0} [^a-c]\n");
	ACCEPTS(n, "abd");
	ACCEPTS(n, "x");
	ACCEPTS(n, "c\xE4\xB8\xAD");
	PREFIXES(n, "ab");
	REJECTS(n, "abb");
	REJECTS(n, "b");
	grammar_free(n);

	/* An empty class matches nothing: "a" is refused, as nothing can follow it. */
	struct grammar *d = parse_ok("root ::= \"a\" []\n");
	struct grammar_state *ds;
	cr_assert_eq(grammar_state_new(&ds, d), 0);
	cr_expect(!grammar_state_dead(ds));
	cr_expect_eq(grammar_state_advance(ds, "a", 1), -EILSEQ);
	cr_expect(!grammar_state_dead(ds), "a rejected advance leaves the state as it was");
	grammar_state_free(ds);
	grammar_free(d);
	d = parse_ok("root ::= []\n");
	cr_assert_eq(grammar_state_new(&ds, d), 0);
	cr_expect(grammar_state_dead(ds));
	cr_expect(!grammar_state_accepting(ds));
	grammar_state_free(ds);
	grammar_free(d);

	/* A root that cannot match anything but the empty string. */
	struct grammar *e = parse_ok("root ::= \"\"\n");
	ACCEPTS(e, "");
	REJECTS(e, "a");
	grammar_free(e);
}

static void expect_error(const char *text, const char *want)
{
	char err[256] = "";
	struct grammar *g = NULL;
	int rc = grammar_parse(&g, text, strlen(text), NULL, err, sizeof(err));
	cr_expect_eq(rc, -EINVAL, "should fail: %s", text);
	cr_expect_null(g);
	cr_expect(strstr(err, want) != NULL, "for %s\n  got:  %s\n  want: %s", text, err, want);
	grammar_free(g);
}

Test(grammar, errors_have_line_and_column)
{
	expect_error("", "line 1, column 1: empty grammar");
	expect_error("  # only a comment\n\n", "line 3, column 1: empty grammar");
	expect_error("root ::= foo\n", "line 1, column 10: undefined rule 'foo'");
	expect_error("start ::= \"a\"\n", "line 1, column 1: no rule named 'root'");
	expect_error("root ::= \"a\"\nx ::= \"abc\n", "line 2, column 7: unterminated string literal");
	expect_error("root ::= [a-z\n", "line 1, column 10: unterminated character class");
	expect_error("root ::= \"\\q\"\n", "line 1, column 11: bad escape '\\q'");
	expect_error("root ::= \"\\x4\"\n", "line 1, column 11: bad escape: expected 2 hex digits");
	expect_error("root ::= \"\\UFFFFFFFF\"\n", "line 1, column 11: bad escape: U+FFFFFFFF");
	expect_error("root ::= \"a\"{3,2}\n", "line 1, column 13: bad repetition bounds {3,2}");
	expect_error("root ::= \"a\"{1,99999}\n", "line 1, column 16: repetition bound above the limit");
	expect_error("root ::= \"a\"{x}\n", "line 1, column 14: expected a number");
	expect_error("root ::= \"a\"{2\n", "expected '}'");
	expect_error("root ::= *\n", "line 1, column 10: '*' with nothing to repeat");
	expect_error("root ::= (\"a\" | \"b\"\n", "line 1, column 10: unclosed '('");
	expect_error("root ::= \"a\" )\n", "line 1, column 14: unmatched ')'");
	expect_error("root = \"a\"\n", "line 1, column 6: expected '::='");
	expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' defined twice");
	expect_error("root ::= [z-a]\n", "line 1, column 11: bad character range");
	expect_error("root ::= \"a\" ; \"b\"\n", "line 1, column 14: unexpected ';'");
	expect_error("root ::= \"\xC3\xA9\" \xFF\n", "line 1, column 14: invalid UTF-8");
	expect_error("root ::= \"\xC3\"\n", "line 1, column 11: invalid UTF-8");
	/* A column counts characters, not bytes. */
	expect_error("root ::= \"é\" bar\n", "line 1, column 14: undefined rule 'bar'");
}

Test(grammar, left_recursion_refused)
{
	alarm(10); /* refused at once: a hang fails the test by SIGALRM (criterion's .timeout leaks under LSan) */
	expect_error("root ::= root \"a\" | \"b\"\n", "rule 'root' is left-recursive");
	expect_error("root ::= a\na ::= b \"x\"\nb ::= \"y\" | a\n", "line 2, column 1: rule 'a' is left-recursive");
	expect_error("root ::= e? root \"x\" | \"y\"\ne ::= \"z\"\n", "rule 'root' is left-recursive");
	expect_error("root ::= n m \"q\"\nn ::= \"\" | \"k\"\nm ::= (\"w\")* root\n", "is left-recursive");
	expect_error("root ::= (\"a\"* root)\n", "rule 'root' is left-recursive");
	/* Right recursion and recursion behind a consumed character are fine. */
	struct grammar *g = parse_ok("root ::= \"(\" root \")\" | \"x\" root | \"\"\n");
	ACCEPTS(g, "((x))");
	ACCEPTS(g, "xx(x)");
	PREFIXES(g, "(()");
	REJECTS(g, "())");
	grammar_free(g);
}

/* Left recursion through a group or a repetition is reported there, with
 * the rule it belongs to, not at the rule's first line. */
Test(grammar, left_recursion_names_the_construct)
{
	alarm(10); /* refused at once: a hang fails the test by SIGALRM (criterion's .timeout leaks under LSan) */
	expect_error("root ::= \"x\" | (\"y\" | root \"z\")*\n",
		     "line 1, column 16: rule 'root' is left-recursive through this repetition");
	expect_error("root ::= \"<\" item \">\"\nitem ::= \"a\" | (item \"b\")+\n",
		     "line 2, column 16: rule 'item' is left-recursive through this group");
	/* A nullable star whose item starts with the rule itself stays refused. */
	expect_error("root ::= x*\nx ::= root? \"a\"?\n", "is left-recursive through this repetition");
}

/*
 * Stars over items that can match the empty string: each grammar against an
 * equivalent POSIX extended regex on every string of up to len_max
 * characters over its alphabet (364 strings for three letters).
 */
Test(grammar, nullable_stars_match_their_language)
{
	alarm(10); /* a star that loops fails by SIGALRM (criterion's .timeout leaks under LSan) */
	static const struct {
		const char *gbnf, *ere, *alphabet;
	} cases[] = {
		{ "root ::= (\"a\"? \"b\"?)*", "^(a?b?)*$", "abc" },
		{ "root ::= ([a-z]* [ \\t]*)*", "^([a-z]*[ \t]*)*$", "a \t-" },
		{ "root ::= (\"a\"* | \"b\")* \"c\"", "^(a*|b)*c$", "abc" },
		{ "root ::= (\"x\" (\"a\"? \"b\"?)* \"y\")+", "^(x(a?b?)*y)+$", "abxy" },
		{ "root ::= item* \".\"\nitem ::= \"a\"? | \"bc\"", "^(a?|bc)*[.]$", "abc." },
		{ "root ::= ((\"a\"?)*)* (\"b\"?)+", "^((a?)*)*(b?)+$", "abc" },
		{ "root ::= (\"a\"? \"b\"?){2,} \"c\"", "^(a?b?){2,}c$", "abc" },
		{ "root ::= (\"\" | \"ab\")*", "^(ab)*$", "abc" },
		{ "root ::= (\"\")* \"a\"", "^a$", "ab" },
		{ "root ::= (x y)*\nx ::= \"a\"?\ny ::= \"b\" | \"\"", "^(a?b?)*$", "abc" },
		{ "root ::= (\"a\"? (\"b\" | \"c\"?))+ \"d\"?", "^(a?(b|c?))+d?$", "abcd" },
		{ "root ::= (\"a\" | s)*\ns ::= (\"b\"? \"c\"?)*", "^(a|(b?c?)*)*$", "abcd" },
		{ "root ::= r* \"b\"\nr ::= \"a\" r | \"\"", "^a*b$", "ab" },
		{ "root ::= (\"a\"? \"b\"?)* (\"c\" (\"a\"?)*)?", "^(a?b?)*(ca*)?$", "abc" },
	};
	const int len_max = 5;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct grammar *g = parse_ok(cases[c].gbnf);
		regex_t re;
		cr_assert_eq(regcomp(&re, cases[c].ere, REG_EXTENDED | REG_NOSUB), 0, "%s", cases[c].ere);
		size_t na = strlen(cases[c].alphabet);
		int digit[8] = { 0 };
		char str[8];
		int checked = 0;
		for (int len = 0; len <= len_max; len++) {
			memset(digit, 0, sizeof digit);
			for (;;) {
				for (int i = 0; i < len; i++)
					str[i] = cases[c].alphabet[digit[i]];
				str[len] = 0;
				bool want = regexec(&re, str, 0, NULL, 0) == 0;
				bool got = match(g, str) == ACCEPT;
				cr_expect_eq(got, want, "%s on '%s': grammar %s, regex %s", cases[c].gbnf, str,
					     got ? "accepts" : "rejects", want ? "matches" : "does not");
				checked++;
				int i = 0;
				while (i < len && (size_t)++digit[i] == na)
					digit[i++] = 0;
				if (i == len)
					break;
			}
		}
		cr_expect_gt(checked, 0);
		regfree(&re);
		grammar_free(g);
	}
}

/*
 * `[^]` negates nothing: any code point (as `.`); `[]` matches nothing. The
 * compiled class list is never a NULL array even when every class is
 * empty: clang's UBSan rejects NULL + 0 in class_finish and in the matcher
 * (GCC's does not, hence the direct check here; fuzz_grammar replays it).
 */
Test(grammar, negated_empty_class)
{
	struct grammar *g = parse_ok("root ::= [^]\n");
	cr_expect_not_null(g->ranges);
	ACCEPTS(g, "a");
	ACCEPTS(g, "\n");
	ACCEPTS(g, "\x01");
	ACCEPTS(g, "\xC3\xA9");
	ACCEPTS(g, "\xF4\x8F\xBF\xBF");	/* U+10FFFF */
	PREFIXES(g, "");
	REJECTS(g, "ab");
	grammar_free(g);
	g = parse_ok("root ::= \"<\" [^]* \">\"\n");
	ACCEPTS(g, "<>");
	ACCEPTS(g, "<a>b>");
	PREFIXES(g, "<\xE6\x97\xA5");
	grammar_free(g);
	g = parse_ok("root ::= []\n");
	cr_expect_not_null(g->ranges, "an empty class's ranges are a valid pointer");
	cr_expect_eq(g->n_classes, 1);
	cr_expect_eq(g->classes[0].n, 0);
	REJECTS(g, "a");
	grammar_free(g);
}

Test(grammar, stack_explosion_refused)
{
	alarm(10); /* refused at once: a hang fails the test by SIGALRM (criterion's .timeout leaks under LSan) */
	/*
	 * After n x's each of the 2^n strings of pending y/z is a stack three
	 * ways (topped by either alternative's "x", or by its next y/z):
	 * 3 * 2^10 = 3072 fit in GRAMMAR_STACKS_MAX, 3 * 2^11 do not.
	 */
	struct grammar *g = parse_ok("root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\"\n");
	struct grammar_state *s;
	cr_assert_eq(grammar_state_new(&s, g), 0);
	int rc = 0;
	int i;
	for (i = 0; i < 20 && rc == 0; i++)
		rc = grammar_state_advance(s, "x", 1);
	cr_expect_eq(rc, -E2BIG);
	cr_expect_eq(i, 11, "the 11th x should fail (failed at %d)", i);
	/* The state is still usable at its last good point. */
	cr_expect_eq(grammar_state_advance(s, "zy", 2), 0);
	grammar_state_free(s);
	grammar_free(g);
}

/* ---- token masks ---- */

static int brute_allowed(const struct grammar_state *s, size_t n, const char *const *tok,
			 const size_t *len, const bool *special, const int32_t *eos, size_t n_eos,
			 uint64_t *bits)
{
	int count = 0;
	memset(bits, 0, (n + 63) / 64 * 8);
	for (size_t i = 0; i < n; i++) {
		bool ok = false, is_eos = false;
		for (size_t k = 0; k < n_eos; k++)
			is_eos |= eos[k] == (int32_t)i;
		if (is_eos) {
			ok = grammar_state_accepting(s);
		} else if (tok[i] && len[i] > 0 && !(special && special[i])) {
			struct grammar_state *c;
			cr_assert_eq(grammar_state_clone(&c, s), 0);
			ok = grammar_state_advance(c, tok[i], len[i]) == 0;
			grammar_state_free(c);
		}
		if (ok) {
			bits[i / 64] |= 1ull << (i % 64);
			count++;
		}
	}
	return count;
}

static void expect_same_bits(const uint64_t *a, const uint64_t *b, size_t n,
			     const char *const *tok, const size_t *len, const char *where)
{
	for (size_t i = 0; i < n; i++) {
		int x = a[i / 64] >> (i % 64) & 1, y = b[i / 64] >> (i % 64) & 1;
		cr_expect_eq(x, y, "%s: token %zu '%.*s': mask %d, brute force %d", where, i,
			     tok[i] ? (int)len[i] : 0, tok[i] ? tok[i] : "", x, y);
		if (x != y)
			return;
	}
}

Test(grammar, mask_small_vocab)
{
	static const char *toks[] = {
		"{", "\"", "{\"", "\":", "a", "ab", "abc\"", "\xC3", "\xC3\xA9", "\xA9", "\xE2\x82",
		"", "<|end|>", "<eos>", " ", "}", "\"}", "1", "12", "\xC3\xA9\"}", "x\xF0\x9F",
	};
	size_t n = sizeof(toks) / sizeof(toks[0]);
	size_t len[32];
	bool special[32] = { 0 };
	for (size_t i = 0; i < n; i++)
		len[i] = strlen(toks[i]);
	special[12] = true;	/* <|end|> */
	int32_t eos[] = { 13 };
	struct grammar_vocab *v;
	cr_assert_eq(grammar_vocab_new(&v, n, toks, len, special, eos, 1), 0);
	cr_assert_eq(grammar_vocab_size(v), n);

	struct grammar *g = parse_ok("root ::= \"{\\\"\" [a-cé€x😀]* \"\\\":\" [0-9]+ \"}\"\n");
	struct grammar_state *s;
	cr_assert_eq(grammar_state_new(&s, g), 0);
	static const char *path[] = { "{", "\"", "a", "\xC3", "\xA9", "\xE2\x82", "\xAC", "\":", "1", "}" };
	uint64_t m[1], b[1];
	for (size_t step = 0; step <= sizeof(path) / sizeof(path[0]); step++) {
		int cm = grammar_allowed(s, v, m);
		int cb = brute_allowed(s, n, toks, len, special, eos, 1, b);
		cr_expect_eq(cm, cb, "step %zu: mask count %d, brute force %d", step, cm, cb);
		expect_same_bits(m, b, n, toks, len, "small vocab");
		cr_expect(!(m[0] >> 11 & 1), "the empty token is never allowed");
		cr_expect(!(m[0] >> 12 & 1), "a special token is never allowed");
		cr_expect_eq(m[0] >> 13 & 1, step == 10, "EOS exactly when accepting (step %zu)", step);
		if (step == 0) {
			cr_expect_eq(cm, 2, "'{' and '{\"'");
		}
		if (step == 3) {
			/* Inside the string after "a": a, ab, é (whole and first byte), € prefix, x😀 prefix... */
			cr_expect(m[0] >> 7 & 1, "a token ending inside é is allowed");
			cr_expect(m[0] >> 10 & 1, "a token ending inside € is allowed");
			cr_expect(m[0] >> 20 & 1, "a token ending inside 😀 is allowed");
			cr_expect(!(m[0] >> 9 & 1), "a lone continuation byte is not");
			cr_expect(m[0] >> 6 & 1, "abc\" spans the class and the closing literal");
		}
		if (step < sizeof(path) / sizeof(path[0]))
			cr_assert_eq(grammar_state_advance(s, path[step], strlen(path[step])), 0,
				     "step %zu", step);
	}
	cr_assert(grammar_state_accepting(s));
	cr_assert_eq(grammar_allowed(s, v, m), 1);
	cr_expect_eq(grammar_bits_first(m, n), 13, "only EOS is left: the forced token");
	grammar_state_free(s);
	grammar_free(g);
	grammar_vocab_free(v);
}

static struct tokenizer *qwen3(void)
{
	char dir[PATH_MAX], err[512];
	node_ref_require_model("tokenizer-qwen3");
	node_ref_model_dir(dir, sizeof(dir), "tokenizer-qwen3");
	struct tokenizer *t = NULL;
	cr_assert_eq(tokenizer_load(&t, dir, err, sizeof(err)), 0, "%s", err);
	return t;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct qvocab {
	size_t n;
	const char **tok;
	size_t *len;
	bool *special;
	int32_t eos[2];
	size_t n_eos;
};

static void qvocab_init(struct qvocab *q, const struct tokenizer *t)
{
	q->n = (size_t)tokenizer_vocab_size(t);
	q->tok = calloc(q->n, sizeof(*q->tok));
	q->len = calloc(q->n, sizeof(*q->len));
	q->special = calloc(q->n, sizeof(*q->special));
	cr_assert(q->tok && q->len && q->special);
	for (size_t i = 0; i < q->n; i++) {
		if (tokenizer_token_bytes(t, (int32_t)i, &q->tok[i], &q->len[i]) != 0)
			q->tok[i] = NULL;
		q->special[i] = tokenizer_token_is_special(t, (int32_t)i);
	}
	q->n_eos = 0;
	int32_t e = tokenizer_token_id(t, "<|im_end|>");
	if (e >= 0)
		q->eos[q->n_eos++] = e;
	e = tokenizer_token_id(t, "<|endoftext|>");
	if (e >= 0)
		q->eos[q->n_eos++] = e;
}

static void qvocab_free(struct qvocab *q)
{
	free(q->tok);
	free(q->len);
	free(q->special);
}

Test(grammar, token_bytes_of_qwen3)
{
	struct tokenizer *t = qwen3();
	const char *b;
	size_t n;
	int32_t *ids;
	size_t n_ids;
	cr_assert_eq(tokenizer_encode(t, " world\xC3\xA9", strlen(" world\xC3\xA9"), &ids, &n_ids), 0);
	/* The concatenated raw bytes of an encoding are the text. */
	char buf[64];
	size_t w = 0;
	for (size_t i = 0; i < n_ids; i++) {
		cr_assert_eq(tokenizer_token_bytes(t, ids[i], &b, &n), 0);
		cr_assert_lt(w + n, sizeof(buf));
		memcpy(buf + w, b, n);
		w += n;
	}
	cr_expect_eq(w, strlen(" world\xC3\xA9"));
	cr_expect(memcmp(buf, " world\xC3\xA9", w) == 0);
	free(ids);
	int32_t im_end = tokenizer_token_id(t, "<|im_end|>");
	cr_assert_eq(tokenizer_token_bytes(t, im_end, &b, &n), 0);
	cr_expect(n == 10 && memcmp(b, "<|im_end|>", 10) == 0);
	cr_expect_eq(tokenizer_token_bytes(t, -1, &b, &n), -EINVAL);
	cr_expect_eq(tokenizer_token_bytes(t, tokenizer_vocab_size(t), &b, &n), -EINVAL);
	tokenizer_free(t);
}

/* Mask vs brute force on Qwen3 after each prefix; logs the mask time. */
static void qwen3_check(const char *gbnf, const char *const *prefixes, size_t n_prefixes,
			bool log_time)
{
	struct tokenizer *t = qwen3();
	struct qvocab q;
	qvocab_init(&q, t);
	struct grammar_vocab *v;
	double t0 = now_ms();
	cr_assert_eq(grammar_vocab_from_tokenizer(&v, t, q.eos, q.n_eos), 0);
	double t_vocab = now_ms() - t0;
	struct grammar *g = parse_ok(gbnf);
	size_t words = (q.n + 63) / 64;
	uint64_t *m = malloc(words * 8), *b = malloc(words * 8);
	/* Under the sanitizers the first third of the prefixes: the same mask
	 * code on fewer grammar states (the optimised pass checks them all). */
	size_t n_checked = (size_t)tu_reps((int)n_prefixes);
	for (size_t k = 0; k < n_checked; k++) {
		struct grammar_state *s;
		cr_assert_eq(grammar_state_new(&s, g), 0);
		cr_assert_eq(grammar_state_advance(s, prefixes[k], strlen(prefixes[k])), 0, "prefix '%s'",
			     prefixes[k]);
		/* First call fills the state's cache; later calls show the steady state. */
		double c0 = now_ms();
		int cm = grammar_allowed(s, v, m);
		double cold = now_ms() - c0;
		double best = 1e9;
		for (int r = 0; r < tu_reps(5); r++) {
			c0 = now_ms();
			cr_assert_eq(grammar_allowed(s, v, m), cm);
			double dt = now_ms() - c0;
			best = dt < best ? dt : best;
		}
		int cb = brute_allowed(s, q.n, q.tok, q.len, q.special, q.eos, q.n_eos, b);
		cr_expect_eq(cm, cb, "prefix '%s': mask %d, brute force %d", prefixes[k], cm, cb);
		expect_same_bits(m, b, q.n, q.tok, q.len, prefixes[k]);
		if (log_time)
			cr_log_info("qwen3 mask after '%s': %d of %zu allowed, %.3f ms cold, %.3f ms warm "
				    "(vocab trie built in %.1f ms)",
				    prefixes[k], cm, q.n, cold, best, t_vocab);
		grammar_state_free(s);
	}
	free(m);
	free(b);
	grammar_free(g);
	grammar_vocab_free(v);
	qvocab_free(&q);
	tokenizer_free(t);
}

Test(grammar, qwen3_mask_matches_brute_force)
{
	static const char *prefixes[] = {
		"", "{", "{\"na", "{\"name\": ", "{\"name\": \"J\xC3", "{\"name\": \"Jo\", \"age\": 4",
		"{\"name\": \"Jo\", \"tags\": [\"a\", ", "{\"a\": {\"b\": [1, 2]}}",
	};
	qwen3_check(json_gbnf, prefixes, sizeof(prefixes) / sizeof(prefixes[0]), true);
}

Test(grammar, qwen3_mask_schema_like)
{
	static const char *gbnf =
		"root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \",\" ws \"\\\"age\\\"\" ws \":\" ws int ws \"}\"\n"
		"str ::= \"\\\"\" [^\"\\\\]{0,40} \"\\\"\"\n"
		"int ::= \"0\" | [1-9] [0-9]{0,5}\n"
		"ws ::= [ \\t\\n]{0,4}\n";
	static const char *prefixes[] = { "", "{ ", "{\"name\":", "{\"name\": \"Ann", "{\"name\": \"Ann\", \"age\": 7" };
	qwen3_check(gbnf, prefixes, sizeof(prefixes) / sizeof(prefixes[0]), true);
}

Test(grammar, qwen3_allow_everything)
{
	struct tokenizer *t = qwen3();
	struct qvocab q;
	qvocab_init(&q, t);
	struct grammar_vocab *v;
	cr_assert_eq(grammar_vocab_from_tokenizer(&v, t, q.eos, q.n_eos), 0);
	struct grammar *g = parse_ok("root ::= .*\n");
	struct grammar_state *s;
	cr_assert_eq(grammar_state_new(&s, g), 0);
	size_t words = (q.n + 63) / 64;
	uint64_t *m = malloc(words * 8);
	int cm = grammar_allowed(s, v, m);
	/* Every non-special token whose bytes can start valid UTF-8, plus EOS (accepting). */
	int want = 0;
	for (size_t i = 0; i < q.n; i++) {
		bool eos = false;
		for (size_t k = 0; k < q.n_eos; k++)
			eos |= q.eos[k] == (int32_t)i;
		bool ok = eos;
		if (!eos && q.tok[i] && q.len[i] && !q.special[i]) {
			struct grammar_state *c;
			cr_assert_eq(grammar_state_clone(&c, s), 0);
			ok = grammar_state_advance(c, q.tok[i], q.len[i]) == 0;
			grammar_state_free(c);
			/* A token refused by ".*" must be invalid UTF-8 on its own. */
			if (!ok) {
				unsigned char c0 = (unsigned char)q.tok[i][0];
				cr_expect((c0 >= 0x80 && c0 < 0xC2) || c0 > 0xF4 || q.len[i] > 1,
					  "token %zu refused by .*", i);
			}
		}
		int bit = m[i / 64] >> (i % 64) & 1;
		cr_expect_eq(bit, ok, "token %zu", i);
		want += ok;
	}
	cr_expect_eq(cm, want);
	cr_log_info("qwen3 allow-everything mask: %d of %zu tokens allowed", cm, q.n);
	free(m);
	grammar_state_free(s);
	grammar_free(g);
	grammar_vocab_free(v);
	qvocab_free(&q);
	tokenizer_free(t);
}

Test(grammar, fuzz_grammar_text)
{
	static const char alphabet[] = "root::=|()*+?{},0123456789\"[]^-.#\\xuU \n\tabz\xC3\xA9";
	uint64_t x = 0x9E3779B97F4A7C15ull;
	char buf[96], err[256];
	int parsed = 0;
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = 0;
		if (iter % 2 == 0)
			n = (size_t)snprintf(buf, sizeof(buf), "root ::= ");
		size_t len = n + (iter % 61);
		for (; n < len; n++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[n] = iter % 3 == 0 ? (char)(x >> 24) : alphabet[(x >> 24) % (sizeof(alphabet) - 1)];
		}
		struct grammar *g = NULL;
		int rc = grammar_parse(&g, buf, n, NULL, err, sizeof(err));
		cr_assert(rc == 0 || rc == -EINVAL, "rc %d", rc);
		if (rc == 0) {
			parsed++;
			struct grammar_state *s;
			int r2 = grammar_state_new(&s, g);
			cr_assert(r2 == 0 || r2 == -E2BIG);
			if (r2 == 0) {
				for (int k = 0; k < 8; k++) {
					x ^= x << 13, x ^= x >> 7, x ^= x << 17;
					char c = alphabet[(x >> 24) % (sizeof(alphabet) - 1)];
					grammar_state_advance(s, &c, 1);
				}
				grammar_state_free(s);
			}
			grammar_free(g);
		} else {
			cr_assert(strncmp(err, "line ", 5) == 0, "error without a position: %s", err);
		}
	}
	cr_log_info("fuzz: %d of 20000 random grammars parsed", parsed);
}
