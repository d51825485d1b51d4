/*
 * test_constrain — `colibri run --grammar` end to end: on the trained
 * default model (kjv-moe, its own 4096-token BPE) and on a random model with
 * Qwen3's 151k-token vocabulary, greedy and sampled, the output is always a
 * sentence of the grammar (checked here with the grammar engine itself, on
 * the bytes printed); the tokens the grammar forces run in fewer forwards
 * with the same output; a grammar that admits everything changes nothing;
 * drafting under a grammar gives the greedy output without drafting; a
 * broken grammar is refused with its line and column before anything is
 * printed; a schema too large or too wide for the matcher is refused at
 * once, before the model loads.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/strbuf.h"
#include "engine/grammar/grammar.h"
#include "tests/cli_util.h"
#include "tests/family_model.h"
#include "tests/fixture_cache.h"

static char ws[4096];
static char cache[4200];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	snprintf(cache, sizeof cache, "%s/cache", ws);
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(constrain, .init = setup, .fini = teardown);

/* The default model (a trained toy) converted with convert's defaults: the
 * build's shared container, which the runs here only read. */
static void kjv_model(char *out, size_t n)
{
	fc_container(out, n, "models/kjv-moe-hf", "");
}

/* The random qwen3_moe_tok fixture (Qwen3's tokenizer) at int4, shared as
 * well, or false when the fixture lacks it (tools/node_modules missing). */
static bool qwen_model(char *out, size_t n)
{
	char probe[PATH_MAX];
	snprintf(probe, sizeof probe, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	if (access(probe, R_OK) != 0)
		return false;
	fc_container(out, n, "hf/qwen3_moe_tok", "--quant int4");
	return true;
}

/* Writes text to ws/name and returns the path (static buffer per call site). */
static void put_file(const char *name, const char *text, char *path, size_t n)
{
	snprintf(path, n, "%s/%s", ws, name);
	cr_assert_eq(tu_write(path, text, strlen(text)), 0);
}

/* Runs `colibri run` with args on model; stdout (less the final newline)
 * into a malloc'd string. */
static char *gen(const char *model, const char *tag, const char *args)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/%s.out", ws, tag);
	int rc = cli_run(cache, out, "run --model '%s' --threads 2 %s", model, args);
	char *err = cli_read_err(out);
	cr_assert_eq(rc, 0, "run %s failed: %s", args, err ? err : "");
	free(err);
	size_t len = 0;
	char *text = tu_read(out, &len);
	cr_assert(text && len > 0 && text[len - 1] == '\n', "run %s: no output line", args);
	text[len - 1] = '\0';
	return text;
}

/* Whether text is a complete sentence of the GBNF grammar g. */
static bool in_language(const char *gbnf, const char *text)
{
	struct grammar *g = NULL;
	struct grammar_state *s = NULL;
	char err[256];
	cr_assert_eq(grammar_parse(&g, gbnf, strlen(gbnf), NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(grammar_state_new(&s, g), 0);
	bool ok = grammar_state_advance(s, text, strlen(text)) == 0 && grammar_state_accepting(s);
	grammar_state_free(s);
	grammar_free(g);
	return ok;
}

/* Grammars whose sentences fit in the tokens each run generates, so every
 * run must end at EOS with a whole sentence. */
static const char *const grammars[] = {
	"root ::= \"Yea\" | \"Nay\"",
	"# a record\n"
	"root ::= \"{\" ws \"\\\"name\\\":\" ws str \",\" ws \"\\\"age\\\":\" ws num \"}\"\n"
	"str  ::= \"\\\"\" [A-Za-z ]{1,12} \"\\\"\"\n"
	"num  ::= [1-9] [0-9]{0,2}\n"
	"ws   ::= \" \"?\n",
	"root ::= item (\", \" item){0,3} \".\"\nitem ::= (\"the\" | \"lord\" | \"god\" | [a-z]{1,5})",
	"root ::= [\\u03b1-\\u03c9]{2,5} \"!\"",
	"root ::= \"verse \" [1-9] [0-9]? \": \" ([A-Z] [a-z]{0,8} \" \"){1,4} \"amen\"",
};

/* Each grammar under n_sampling of the samplings (greedy first). */
static void check_grammars(const char *model, const char *name, size_t n_sampling)
{
	for (size_t i = 0; i < sizeof grammars / sizeof grammars[0]; i++) {
		char path[4400], tag[64], args[4600];
		snprintf(tag, sizeof tag, "g%zu.gbnf", i);
		put_file(tag, grammars[i], path, sizeof path);
		const char *sampling[] = { "--temp 0", "--temp 1.5 --seed 2 --top-k 0", "--temp 1 --seed 1",
					   "--temp 1 --seed 3 --top-p 0.9" };
		for (size_t k = 0; k < (size_t)tu_reps((int)n_sampling); k++) {
			snprintf(tag, sizeof tag, "%s-g%zu-s%zu", name, i, k);
			snprintf(args, sizeof args, "--prompt 'And God said' -n 96 %s --grammar '%s'", sampling[k], path);
			char *text = gen(model, tag, args);
			cr_log_info("%s grammar %zu %s: %s", name, i, sampling[k], text);
			cr_expect(in_language(grammars[i], text), "%s, grammar %zu, %s: \"%s\" is not a sentence of it",
				  name, i, sampling[k], text);
			free(text);
		}
	}
}

Test(constrain, output_follows_the_grammar_trained_model)
{
	char m[4400];
	kjv_model(m, sizeof m);
	check_grammars(m, "kjv", 4);
}

Test(constrain, output_follows_the_grammar_qwen3_vocabulary)
{
	char m[4400];
	if (!qwen_model(m, sizeof m))
		cr_skip_test("fixture hf/qwen3_moe_tok is missing (run ./setup.sh)");
	/* Greedy and the widest sampling: the point here is the 151k
	 * vocabulary's token boundaries, whose masks are the same whatever
	 * picks among them; the trained model runs all four samplings. */
	check_grammars(m, "qwen3", 2);
}

/* The forced tokens of a record grammar ("{\"name\": \"" and the like) go
 * through the forwards of the sampled tokens before them: the same text, in
 * as many fewer forwards as tokens were forced. */
Test(constrain, forced_tokens_save_forwards)
{
	char m[4400], path[4400];
	kjv_model(m, sizeof m);
	put_file("rec.gbnf", grammars[1], path, sizeof path);
	char a[4800], b[4800];
	snprintf(a, sizeof a, "--prompt 'And God said' -n 96 --temp 0 --grammar '%s' --stats-json '%s/a.json'", path, ws);
	snprintf(b, sizeof b, "--prompt 'And God said' -n 96 --temp 0 --grammar '%s' --no-forced-batch "
		 "--stats-json '%s/b.json'", path, ws);
	char *ta = gen(m, "batched", a), *tb = gen(m, "plain", b);
	cr_expect_str_eq(ta, tb, "forced batching changed the output");
	char ja[4400], jb[4400];
	snprintf(ja, sizeof ja, "%s/a.json", ws);
	snprintf(jb, sizeof jb, "%s/b.json", ws);
	cJSON *sa = cli_json_read(ja), *sb = cli_json_read(jb);
	double forced = cli_json_num(sa, "grammar_forced"), saved = cli_json_num(sa, "grammar_forwards_saved");
	double fa = cli_json_num(sa, "decode_forwards"), fb = cli_json_num(sb, "decode_forwards");
	cr_log_info("record grammar: %.0f forced tokens; %.0f forwards batched, %.0f plain", forced, fa, fb);
	cr_expect_geq(forced, 5, "the record's literals are forced: %.0f", forced);
	cr_expect_eq(cli_json_num(sb, "grammar_forced"), forced, "the same tokens are forced either way");
	cr_expect_eq(saved, forced);
	cr_expect_eq(fa + saved, fb, "forwards %.0f batched + %.0f saved != %.0f plain", fa, saved, fb);
	cr_expect_eq(cli_json_num(sb, "grammar_forwards_saved"), 0);
	cJSON_Delete(sa);
	cJSON_Delete(sb);
	free(ta);
	free(tb);
}

/* A grammar that admits every text leaves greedy output as it is. */
Test(constrain, permissive_grammar_changes_nothing)
{
	char m[4400];
	kjv_model(m, sizeof m);
	const char *prompts[] = { "And God said", "In the beginning", "Blessed are" };
	for (size_t i = 0; i < 3; i++) {
		char a[512], b[512], tag[32];
		snprintf(a, sizeof a, "--prompt '%s' -n 48 --temp 0", prompts[i]);
		snprintf(b, sizeof b, "--prompt '%s' -n 48 --temp 0 --grammar-text 'root ::= [^\\x00]*'", prompts[i]);
		snprintf(tag, sizeof tag, "free%zu", i);
		char *ta = gen(m, tag, a);
		snprintf(tag, sizeof tag, "any%zu", i);
		char *tb = gen(m, tag, b);
		cr_expect_str_eq(tb, ta, "\"%s\": a grammar admitting everything changed the output", prompts[i]);
		free(ta);
		free(tb);
	}
}

/* Drafting with the MTP head under a grammar: the drafts are masked, the
 * verification too, and the greedy output is that of plain steps. */
Test(constrain, drafting_under_a_grammar_is_exact)
{
	const struct family_chat *fc = NULL;
	for (size_t f = 0; f < FAMILY_CHATS; f++)
		if (!strcmp(family_chats[f].family, "deepseek_v3"))
			fc = &family_chats[f];
	cr_assert_not_null(fc);
	char m[PATH_MAX + 64];
	family_model(ws, fc, m, sizeof m);
	const char *g = "root ::= ([a-z]{1,4} \" \"){2,6} \"end\"";
	char *first = NULL;
	const char *drafts[] = { "0", "1", "3", "auto" };
	for (size_t i = 0; i < 4; i++) {
		char args[512], tag[32];
		snprintf(args, sizeof args, "--prompt 'hello there' -n 40 --temp 0 --draft %s --grammar-text '%s'", drafts[i],
			 g);
		snprintf(tag, sizeof tag, "draft%s", drafts[i]);
		char *t = gen(m, tag, args);
		cr_expect(in_language(g, t), "--draft %s: \"%s\" is not a sentence of the grammar", drafts[i], t);
		if (!first) {
			first = t;
			continue;
		}
		cr_expect_str_eq(t, first, "--draft %s changed the constrained output", drafts[i]);
		free(t);
	}
	free(first);
}

/* A grammar that does not compile: the option or file named with the line
 * and column, a failing exit, nothing on stdout; left recursion at once. */
Test(constrain, broken_grammar_is_refused)
{
	char m[4400], path[4400], out[4400];
	kjv_model(m, sizeof m);
	const struct {
		const char *text, *want;
	} bad[] = {
		{ "root ::= \"a", "line 1, column" },
		{ "root ::= \"a\"\nitem ::= [a-", "line 2, column" },
		{ "root ::= undefined-rule", "undefined-rule" },
		{ "root ::= root \"a\" | \"b\"", "left" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(out, sizeof out, "%s/bad%zu", ws, i);
		put_file("bad.gbnf", bad[i].text, path, sizeof path);
		int rc = cli_run(cache, out, "run --model '%s' --prompt x -n 4 --grammar '%s'", m, path);
		char *err = cli_read_err(out);
		size_t len = 1;
		char *text = tu_read(out, &len);
		cr_expect_neq(rc, 0, "grammar %zu accepted", i);
		cr_expect(err && strstr(err, path) && strstr(err, bad[i].want), "grammar %zu: \"%s\" lacks the file and \"%s\"", i,
			  err ? err : "", bad[i].want);
		cr_expect_eq(len, 0, "grammar %zu: output printed", i);
		free(err);
		free(text);
	}
	int rc = cli_run(cache, out, "run --model '%s' --prompt x -n 4 --grammar-text 'root ::= (\"a\"'", m);
	char *err = cli_read_err(out);
	cr_expect(rc != 0 && err && strstr(err, "--grammar-text: line 1, column"), "%s", err ? err : "");
	free(err);
}

/* --json-schema: the output parses, with the schema's members in their
 * types and ranges, on both vocabularies, greedy and sampled; a schema that
 * is not JSON is refused naming the option. */
Test(constrain, json_schema_output_validates)
{
	const char *schema = "{\"type\":\"object\",\"properties\":{\"answer\":{\"enum\":[\"yes\",\"no\"]},"
			     "\"count\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
			     "\"who\":{\"type\":\"string\",\"maxLength\":8}},"
			     "\"required\":[\"answer\",\"count\",\"who\"],\"additionalProperties\":false}";
	char path[4400], m[2][4400];
	put_file("s.json", schema, path, sizeof path);
	kjv_model(m[0], sizeof m[0]);
	int models = qwen_model(m[1], sizeof m[1]) ? 2 : 1;
	const char *sampling[] = { "--temp 0", "--temp 1 --seed 5", "--temp 1.2 --seed 6" };
	for (int k = 0; k < models; k++)
		for (size_t i = 0; i < (size_t)tu_reps(3); i++) {
			char args[4800], tag[32];
			snprintf(args, sizeof args, "--prompt 'Answer as JSON:' -n 256 %s --json-schema '%s'", sampling[i], path);
			snprintf(tag, sizeof tag, "js%d-%zu", k, i);
			char *text = gen(m[k], tag, args);
			cr_log_info("json schema, model %d, %s: %s", k, sampling[i], text);
			cJSON *j = cJSON_Parse(text);
			cr_assert(j, "model %d, %s: not JSON: %s", k, sampling[i], text);
			const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "answer");
			const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "count");
			const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "who");
			cr_expect(cJSON_IsString(a) && (!strcmp(a->valuestring, "yes") || !strcmp(a->valuestring, "no")),
				  "%s", text);
			cr_expect(cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble <= 9 &&
					  c->valuedouble == (int)c->valuedouble, "%s", text);
			cr_expect(cJSON_IsString(w) && strlen(w->valuestring) <= 8 * 4, "%s", text);
			cr_expect_eq(cJSON_GetArraySize(j), 3, "%s", text);
			cJSON_Delete(j);
			free(text);
		}
	char out[4400];
	snprintf(out, sizeof out, "%s/badschema", ws);
	int rc = cli_run(cache, out, "run --model '%s' --prompt x -n 4 --json-schema '{\"type\":'", m[0]);
	char *err = cli_read_err(out);
	cr_expect(rc != 0 && err && strstr(err, "--json-schema: not valid JSON"), "%s", err ? err : "");
	free(err);
}

/* Issue 40, defect 1: a schema too large to compile cheaply (20,000
 * properties) or too wide for the matcher (a pattern of 5,000 alternatives)
 * is refused naming the limit before the model is looked at (the model
 * path does not exist), in well under a second; it used to take 101 s and
 * then fail with "too many parse stacks". */
static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

Test(constrain, json_schema_too_large_refused_at_once)
{
	struct strbuf b[2] = { { 0 }, { 0 } };
	strbuf_printf(&b[0], "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < 20000; i++)
		strbuf_printf(&b[0], "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
	strbuf_printf(&b[0], "}}");
	strbuf_printf(&b[1], "{\"type\":\"string\",\"pattern\":\"^(");
	for (int i = 0; i < 5000; i++)
		strbuf_printf(&b[1], "%sa%d", i ? "|" : "", i);
	strbuf_printf(&b[1], ")$\"}");
	const char *limit[2] = { "2048", "4096" };
	for (int i = 0; i < 2; i++) {
		char path[4400], out[4400], name[16];
		snprintf(name, sizeof name, "wide%d.json", i);
		put_file(name, b[i].p, path, sizeof path);
		snprintf(out, sizeof out, "%s/wide%d", ws, i);
		double t0 = mono_s();
		int rc = cli_run(cache, out, "run --model '%s/no-model' --prompt x -n 4 --json-schema '%s'", ws, path);
		double dt = mono_s() - t0;
		char *err = cli_read_err(out);
		cr_expect(rc != 0 && err && strstr(err, path) && strstr(err, limit[i]), "%d: rc %d: %s", i, rc,
			  err ? err : "");
		cr_expect_lt(dt, 1.0, "%d: refused after %.2f s", i, dt);
		free(err);
		strbuf_free(&b[i]);
	}
}
