/*
 * test_run — the `run`, `tokenize` and `detokenize` commands end to end:
 * greedy output identical across thread counts, budgets and runs; --stats
 * reports speeds and expert statistics, over the run's window with the
 * start-up (resident weights, pinned set) apart; sampling with a seed
 * reproduces;
 * generation stops at EOS; a model without a tokenizer refuses text but
 * takes --tokens; tokenize/detokenize round-trip through the container;
 * a DeepSeek-V3 int4 container with its int8 MTP layer opens two frame
 * classes, top_k frames each at --ram min (within the budget, drafting)
 * and a frame per expert when everything fits, with the same greedy text;
 * with a frame for every expert, a second run pins all the first one used
 * and misses nothing; --repeat-penalty, --presence-penalty and --min-p
 * change what they should, also from generation_config.json;
 * --chat-template and --chat-template-file replace the model's template.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>

#include "engine/decode/session.h"
#include "planner/plan.h"
#include "tests/cli_util.h"
#include "tests/fixture_cache.h"

static char scratch[4096];
static char model[4200];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

/* The tests on real text use qwen3_moe_tok (the Qwen3 tokenizer from
 * tools/node_modules): skip with the reason when it is missing, else set
 * `model` to it with convert's defaults (int4), the build's shared
 * container (tests/fixture_cache.h). The runs on it may pin what other
 * runs used (usage.json), which changes no output; a test that counts
 * pins, hits or misses takes a private copy instead. */
static void need_tok_model(void)
{
	char hf[PATH_MAX];
	snprintf(hf, sizeof hf, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	if (access(hf, R_OK) != 0)
		cr_skip_test("fixture hf/qwen3_moe_tok is missing: tools/node_modules lacks the Qwen3 tokenizer "
			     "(run ./setup.sh)");
	fc_container(model, sizeof model, "hf/qwen3_moe_tok", "");
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(run, .init = setup, .fini = teardown);

/* Runs colibri with args; stdout into scratch/name. */
static char *run_out(const char *name, const char *args)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/%s", scratch, name);
	int rc = tu_sh("'%s' %s >'%s' 2>'%s.err'", tu_colibri(), args, out, out);
	cr_assert_eq(rc, 0, "colibri %s failed", args);
	char *s = tu_read(out, NULL);
	cr_assert_not_null(s);
	return s;
}

Test(run, greedy_identical_across_threads_and_budgets)
{
	need_tok_model();
	char args[8192];
	const char *variants[] = { "--threads 1", "--threads 2", "--threads 2 --ram min", "--threads 1 --batch 1" };
	char *first = NULL;
	for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
		snprintf(args, sizeof args, "run --model '%s' --prompt 'The quick brown fox' -n 24 --temp 0 %s",
			 model, variants[i]);
		char *out = run_out("greedy", args);
		cr_assert_gt(strlen(out), 1, "no text generated");
		if (!first)
			first = out;
		else {
			cr_expect_str_eq(out, first, "greedy output differs with %s", variants[i]);
			free(out);
		}
	}
	free(first);
}

Test(run, seeded_sampling_reproduces)
{
	need_tok_model();
	char args[8192];
	snprintf(args, sizeof args, "run --model '%s' --tokens 9707,1879 -n 16 --temp 0.9 --top-p 0.9 --top-k 50 --seed 7", model);
	char *a = run_out("s1", args);
	char *b = run_out("s2", args);
	cr_expect_str_eq(a, b, "same seed gave different text");
	free(a);
	free(b);
}

Test(run, stats_report)
{
	need_tok_model();
	char args[8192], path[4400];
	snprintf(args, sizeof args, "run --model '%s' --chat --prompt hi -n 8 --temp 0 --stats --stats-json '%s/stats.json'",
		 model, scratch);
	free(run_out("stats", args));
	snprintf(path, sizeof path, "%s/stats.err", scratch);
	char *err = tu_read(path, NULL);
	cr_assert_not_null(err);
	cr_expect(strstr(err, "prompt:") && strstr(err, "tok/s"), "no prompt speed in: %s", err);
	cr_expect(strstr(err, "decode:"), "no decode speed in: %s", err);
	cr_expect(strstr(err, "time to first token"), "no TTFT in: %s", err);
	cr_expect(strstr(err, "hits"), "no expert statistics in: %s", err);
	free(err);
	snprintf(path, sizeof path, "%s/stats.json", scratch);
	char *js = tu_read(path, NULL);
	cr_assert_not_null(js, "no --stats-json file");
	cr_expect(strstr(js, "\"expert_hits\""), "stats json lacks expert_hits: %s", js);
	free(js);
}

Test(run, stops_at_eos)
{
	/* The olmoe fixture has no tokenizer, so run prints ids: take the greedy
	 * first token, make it the EOS in a copy, and generation must stop there. */
	char m2[4400], args[8192], path[4400];
	snprintf(m2, sizeof m2, "%s/eosm", scratch);
	fc_container_copy(m2, "hf/olmoe", "");
	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7 -n 1 --temp 0", m2);
	char *first = run_out("eos0", args);
	int id = atoi(first);
	free(first);
	snprintf(path, sizeof path, "%s/generation_config.json", m2);
	char js[128];
	int len = snprintf(js, sizeof js, "{\"eos_token_id\": [%d]}", id);
	cr_assert_eq(tu_write(path, js, (size_t)len), 0);
	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7 -n 10 --temp 0 --stats", m2);
	char *out = run_out("eos1", args);
	snprintf(path, sizeof path, "%s/eos1.err", scratch);
	char *err = tu_read(path, NULL);
	cr_expect(strstr(err, "stopped at EOS") && strstr(err, "decode: 0 tokens"),
		  "generation did not stop at EOS %d: %s / %s", id, out, err);
	free(out);
	free(err);
}

/* generation_config.json's sampling applies however the model folder is
 * named: --model DIR, --model=DIR, and the default model (no --model; here
 * COLIBRI_DEFAULT_MODEL): seeds 7 and 8 then give other tokens, while an
 * explicit --temp 0 stays greedy (issue 39: --model=DIR and the default
 * model ran greedy, --seed doing nothing). */
Test(run, generation_config_however_the_model_is_named)
{
	char m2[4400], path[4400];
	snprintf(m2, sizeof m2, "%s/sampled", scratch);
	fc_container_copy(m2, "hf/olmoe", "");
	snprintf(path, sizeof path, "%s/generation_config.json", m2);
	const char *js = "{\"do_sample\": true, \"temperature\": 1.0}";
	cr_assert_eq(tu_write(path, js, strlen(js)), 0);
	static const char *const forms[] = { "--model '%s'", "--model='%s'", "" };
	for (int f = 0; f < 3; f++) {
		char model_arg[4500], args[8192], name[32];
		snprintf(model_arg, sizeof model_arg, forms[f], m2);
		static const char *const seeds[] = { "--seed 7", "--seed 8", "--seed 7 --temp 0", "--seed 8 --temp 0" };
		char *out[4];
		for (int k = 0; k < 4; k++) {
			snprintf(args, sizeof args, "run %s --tokens 5,6,7 -n 16 %s", model_arg, seeds[k]);
			snprintf(name, sizeof name, "gc%d%d", f, k);
			if (f == 2) {
				char cmd[8400];
				snprintf(cmd, sizeof cmd, "env COLIBRI_DEFAULT_MODEL='%s' '%s' %s >'%s/%s' 2>'%s/%s.err'", m2,
					 tu_colibri(), args, scratch, name, scratch, name);
				cr_assert_eq(tu_sh("%s", cmd), 0, "%s failed", cmd);
				char p[4500];
				snprintf(p, sizeof p, "%s/%s", scratch, name);
				out[k] = tu_read(p, NULL);
				cr_assert_not_null(out[k]);
			} else {
				out[k] = run_out(name, args);
			}
		}
		cr_expect(strcmp(out[0], out[1]) != 0, "%s: seeds 7 and 8 gave the same tokens (%s): sampling is off",
			  f == 2 ? "the default model" : forms[f], out[0]);
		cr_expect(strchr(out[2], ',') && strcmp(out[2], out[3]) == 0,
			  "%s: --temp 0 is not greedy whatever the seed: %s / %s", f == 2 ? "the default model" : forms[f],
			  out[2], out[3]);
		for (int k = 0; k < 4; k++)
			free(out[k]);
	}
}

/* A command line a command cannot run gets exit 2 and one line saying why
 * (issue 39: each dumped the whole help with no reason). */
Test(run, usage_errors_say_why)
{
	static const char *const cases[][2] = {
		{ "run -n 2", "no prompt" },
		{ "run --prompt hi stray", "unexpected argument \"stray\"" },
		{ "run --prompt hi --prompt-file /dev/null", "not several" },
		{ "run --prompt hi --grammar g --json-schema s", "not several" },
		{ "convert only-one", "needs a checkpoint" },
		{ "convert a b c", "two arguments" },
		{ "tokenize --text hi", "needs --model" },
		{ "tokenize --model m", "--text TEXT and --file F" },
		{ "detokenize --model m", "needs --tokens" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char err[4400];
		snprintf(err, sizeof err, "%s/usage%zu.err", scratch, i);
		int st = tu_sh("'%s' %s >/dev/null 2>'%s'", tu_colibri(), cases[i][0], err);
		char *text = tu_read(err, NULL);
		cr_expect_eq(st, 2, "colibri %s: exit %d, not 2", cases[i][0], st);
		cr_expect(text && strstr(text, cases[i][1]) && strstr(text, "--help"),
			  "colibri %s does not say why (%s): %s", cases[i][0], cases[i][1], text ? text : "");
		cr_expect(text && !strstr(text, "usage:"), "colibri %s still dumps the help: %s", cases[i][0],
			  text ? text : "");
		free(text);
	}
}

/* Whether some 24 bytes of s occur twice: the text repeats itself. */
static bool repeats(const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i + 24 <= n; i++)
		for (size_t j = i + 1; j + 24 <= n; j++)
			if (!memcmp(s + i, s + j, 24))
				return true;
	return false;
}

/* The sampling options of llama.cpp's names that run lacked (issue 39):
 * the default toy model repeats a phrase under greedy decoding, which
 * --repeat-penalty changes (transformers applies it greedy too), as
 * --presence-penalty does; --repeat-last-n 0 turns the penalty off again;
 * --min-p 1 leaves the most probable token alone, so sampling gives the
 * greedy text whatever the seed. generation_config.json's
 * repetition_penalty applies with do_sample false and its min_p with
 * sampling, unless an option says otherwise. Values out of range are
 * refused, naming the option. */
Test(run, repeat_penalty_min_p_and_penalties)
{
	char kjv[4200], m2[4400], path[4500], args[8192];
	fc_container(kjv, sizeof kjv, "models/kjv-moe-hf", "");
	static const char *const opts[] = {
		"--temp 0", "--temp 0 --repeat-penalty 1.3", "--temp 0 --repeat-penalty 1.3 --repeat-last-n 0",
		"--temp 0 --presence-penalty 1", "--temp 1 --min-p 1 --seed 7",
	};
	char *out[5];
	for (int k = 0; k < 5; k++) {
		char name[16];
		snprintf(name, sizeof name, "pen%d", k);
		snprintf(args, sizeof args, "run --model '%s' --prompt 'And it came to pass' -n 40 %s", kjv, opts[k]);
		out[k] = run_out(name, args);
	}
	cr_assert(repeats(out[0]), "the greedy text does not repeat, so it shows no penalty: %s", out[0]);
	cr_expect(strcmp(out[1], out[0]) != 0, "--repeat-penalty 1.3 left the greedy text as it was: %s", out[1]);
	cr_expect_str_eq(out[2], out[0], "--repeat-last-n 0 still penalises");
	cr_expect(strcmp(out[3], out[0]) != 0, "--presence-penalty 1 left the greedy text as it was: %s", out[3]);
	cr_expect_str_eq(out[4], out[0], "--min-p 1 sampled something other than the most probable token");

	/* The same from generation_config.json (its EOS ids kept): min_p 1
	 * makes sampling greedy, so the text is the penalised greedy one. */
	snprintf(m2, sizeof m2, "%s/kjv-penalised", scratch);
	fc_container_copy(m2, "models/kjv-moe-hf", "");
	snprintf(path, sizeof path, "%s/generation_config.json", m2);
	const char *js = "{\"do_sample\": true, \"temperature\": 1.0, \"min_p\": 1.0, \"repetition_penalty\": 1.3, "
			 "\"eos_token_id\": [4095, 4091]}";
	cr_assert_eq(tu_write(path, js, strlen(js)), 0);
	static const struct {
		const char *opts;
		int same_as;     /* the output above it must equal, or -1: differ from out[1] */
	} cfg[] = { { "--seed 7", 1 }, { "--seed 7 --repeat-penalty 1", 0 }, { "--seed 7 --min-p 0", -1 } };
	for (int k = 0; k < 3; k++) {
		char name[16];
		snprintf(name, sizeof name, "cfg%d", k);
		snprintf(args, sizeof args, "run --model '%s' --prompt 'And it came to pass' -n 40 %s", m2, cfg[k].opts);
		char *o = run_out(name, args);
		if (cfg[k].same_as >= 0)
			cr_expect_str_eq(o, out[cfg[k].same_as], "generation_config.json with %s", cfg[k].opts);
		else
			cr_expect(strcmp(o, out[1]) != 0, "generation_config.json with %s still takes its min_p", cfg[k].opts);
		free(o);
	}
	for (int k = 0; k < 5; k++)
		free(out[k]);

	/* The window: the model's own penalty looks back on the whole
	 * context, as transformers' processor does, and a --repeat-penalty
	 * given by hand on llama.cpp's 64 tokens. Past 64 tokens of history
	 * the two differ on this text. */
	static const char *const win[] = {
		"--seed 7", "--temp 0 --repeat-penalty 1.3 --repeat-last-n -1", "--temp 0 --repeat-penalty 1.3",
	};
	char *w[3];
	for (int k = 0; k < 3; k++) {
		char name[16];
		snprintf(name, sizeof name, "win%d", k);
		snprintf(args, sizeof args, "run --model '%s' --prompt 'And it came to pass' -n 120 %s", k ? kjv : m2,
			 win[k]);
		w[k] = run_out(name, args);
	}
	cr_expect_str_eq(w[0], w[1], "generation_config.json's penalty is not over the whole context");
	cr_expect_str_neq(w[2], w[1], "--repeat-penalty without --repeat-last-n looks back on more than 64 tokens");
	for (int k = 0; k < 3; k++)
		free(w[k]);

	static const char *const bad[][2] = {
		{ "--min-p 1.5", "--min-p" },		  { "--repeat-penalty 0", "--repeat-penalty" },
		{ "--repeat-last-n -2", "--repeat-last-n" }, { "--presence-penalty 3", "--presence-penalty" },
		{ "--frequency-penalty x", "--frequency-penalty" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char err[4400];
		snprintf(err, sizeof err, "%s/bad%zu.err", scratch, i);
		int st = tu_sh("'%s' run --prompt hi %s >/dev/null 2>'%s'", tu_colibri(), bad[i][0], err);
		char *text = tu_read(err, NULL);
		cr_expect(st != 0 && text && strstr(text, bad[i][1]), "colibri run %s: exit %d, %s", bad[i][0], st,
			  text ? text : "");
		free(text);
	}
}

Test(run, tokenize_roundtrip)
{
	need_tok_model();
	char args[8192];
	const char *text = "Hello, world! 你好 🙂";
	snprintf(args, sizeof args, "tokenize --model '%s' --text '%s'", model, text);
	char *ids = run_out("ids", args);
	ids[strcspn(ids, "\n")] = 0;
	cr_expect(strlen(ids) > 0);
	snprintf(args, sizeof args, "detokenize --model '%s' --tokens %s", model, ids);
	char *back = run_out("back", args);
	back[strcspn(back, "\n")] = 0;
	cr_expect_str_eq(back, text);
	free(ids);
	free(back);
	/* An id beyond the vocabulary is refused, naming it (issue 39: it
	 * printed nothing and exited 0). */
	cr_expect_neq(tu_sh("'%s' detokenize --model '%s' --tokens 1,99999999 >'%s/big' 2>'%s/big.err'", tu_colibri(), model,
			    scratch, scratch), 0, "detokenize of an id beyond the vocabulary succeeded");
	char path[4400];
	snprintf(path, sizeof path, "%s/big.err", scratch);
	char *err = tu_read(path, NULL);
	cr_expect(err && strstr(err, "99999999") && strstr(err, "vocabulary"), "unclear error: %s", err ? err : "");
	free(err);
}

/* --chat-template and --chat-template-file, llama.cpp's names (issue 39,
 * item 4; both were refused): the Jinja text replaces the model's Qwen3
 * template, so `--chat hi` becomes the prompt "<<hi>>" — for tokenize from a
 * file, for run from the text (its prompt count is <<hi>>'s, where Qwen3's
 * template makes 9 tokens). llama.cpp's built-in names (chatml) are refused
 * naming the option; the other refusals are checked in process
 * (test_cli_alias). */
Test(run, chat_template_options)
{
	need_tok_model();
	static const char tmpl[] = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
	char path[4400], args[8192];
	snprintf(path, sizeof path, "%s/t.jinja", scratch);
	cr_assert_eq(tu_write(path, tmpl, strlen(tmpl)), 0);
	snprintf(args, sizeof args, "tokenize --model '%s' --text '<<hi>>'", model);
	char *want = run_out("want", args);
	snprintf(args, sizeof args, "tokenize --model '%s' --chat --text hi --chat-template-file '%s'", model, path);
	char *got = run_out("got", args);
	cr_expect_str_eq(got, want, "--chat-template-file did not render the prompt");
	int n_want = 1;
	for (const char *c = want; *c; c++)
		n_want += *c == ',';
	snprintf(args, sizeof args, "run --model '%s' --chat --prompt hi --chat-template '%s' -n 1 --temp 0 --stats",
		 model, tmpl);
	free(run_out("run", args));
	snprintf(path, sizeof path, "%s/run.err", scratch);
	char *err = tu_read(path, NULL), line[64];
	snprintf(line, sizeof line, "prompt: %d tokens", n_want);
	cr_expect(err && strstr(err, line), "run --chat-template: no \"%s\" in %s", line, err ? err : "");
	free(err), free(want), free(got);
	snprintf(path, sizeof path, "%s/refused.err", scratch);
	cr_expect_neq(tu_sh("'%s' run --model '%s' --chat --prompt hi --chat-template chatml 2>'%s'", tu_colibri(), model,
			    path), 0, "--chat-template chatml was taken");
	err = tu_read(path, NULL);
	cr_expect(err && strstr(err, "--chat-template takes a Jinja template, not \"chatml\"") &&
		  strstr(err, "--chat-template-file FILE"), "unclear refusal: %s", err ? err : "");
	free(err);
}

Test(run, no_tokenizer)
{
	char m2[4400];
	fc_container(m2, sizeof m2, "hf/olmoe", "");
	cr_expect_neq(tu_sh("'%s' run --model '%s' --prompt hi -n 2 2>'%s/nt.err'", tu_colibri(), m2, scratch), 0);
	char path[4400];
	snprintf(path, sizeof path, "%s/nt.err", scratch);
	char *err = tu_read(path, NULL);
	cr_expect(strstr(err, "no tokenizer"), "unclear error: %s", err);
	free(err);
	char args[8192];
	snprintf(args, sizeof args, "run --model '%s' --tokens 1,2,3 -n 4 --temp 0", m2);
	char *out = run_out("nt", args);
	cr_expect(strchr(out, ','), "ids expected: %s", out);
	free(out);
	/* Malformed id lists are refused naming the flag. */
	const char *bad[] = { "", "1,2,", "1,,2", "1, 2", "-1", "x" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_neq(tu_sh("'%s' run --model '%s' --tokens '%s' -n 2 2>'%s/nt.err'", tu_colibri(), m2, bad[i],
				    scratch), 0, "--tokens '%s' accepted", bad[i]);
		err = tu_read(path, NULL);
		cr_expect(err && strstr(err, "--tokens"), "--tokens '%s': %s", bad[i], err);
		free(err);
	}
}

/* The --ram promise, at exactly the minimum `plan --ram min` states for the
 * same --ctx (issue 39, item 3: run refused what plan called enough): a
 * byte less is refused with that minimum in the message; at it the run
 * works and its peak resident set stays within the budget plus
 * SESSION_RAM_SLACK. The budget counts the loaded tokenizer (Qwen3's,
 * whose parse is most of the resident set) at PLAN_TOKENIZER_FACTOR times
 * its files, from the container alone, so plan and run agree. */
Test(run, ram_budget_holds)
{
	need_tok_model();
	char args[8192], path[4400];
	snprintf(path, sizeof path, "%s/plan.json", scratch);
	cr_assert_eq(tu_sh("'%s' plan --model '%s' --ram min --ctx 64 --json >'%s' 2>/dev/null", tu_colibri(), model,
			   path), 0);
	cJSON *j = cli_json_read(path);
	double min = cli_json_num(j, "budget.min_bytes");
	double tok = 0;
	const char *files[] = { "tokenizer.json", "tokenizer_config.json", "chat_template.jinja" };
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", model, files[i]);
		tok += stat(path, &st) == 0 ? (double)st.st_size : 0;
	}
	cr_expect_eq(cli_json_num(j, "scratch.tokenizer_bytes"), PLAN_TOKENIZER_FACTOR * tok);
	cJSON_Delete(j);

	snprintf(args, sizeof args, "'%s' run --model '%s' --prompt 'count to ten' -n 16 --temp 0 --ctx 64 --ram %.0fB "
		 "2>'%s/low.err'", tu_colibri(), model, min - 1, scratch);
	cr_assert_neq(tu_sh("%s", args), 0, "a byte below the minimum was accepted");
	snprintf(path, sizeof path, "%s/low.err", scratch);
	char *err = tu_read(path, NULL);
	char want[128];
	snprintf(want, sizeof want, "minimum of %.0f MiB (%.0f bytes)", ceil(min / 1048576.0), min);
	cr_expect(err && strstr(err, want), "the refusal does not state plan's minimum (%s): %s", want, err);
	free(err);
	snprintf(args, sizeof args, "run --model '%s' --prompt 'count to ten' -n 16 --temp 0 --ctx 64 --ram %.0fB "
		 "--stats-json '%s/b.json'", model, min, scratch);
	free(run_out("budget", args));
	snprintf(path, sizeof path, "%s/b.json", scratch);
	j = cli_json_read(path);
	double peak = cli_json_num(j, "peak_rss_bytes");
	cr_expect_eq(cli_json_num(j, "ram_budget_bytes"), min);
	bool san = cJSON_IsTrue(cJSON_GetObjectItem(j, "sanitizers"));
	cJSON_Delete(j);
	cr_log_info("budget %.1f MiB, peak resident set %.1f MiB", min / 1048576.0, peak / 1048576.0);
	if (san)
		cr_skip_test("built with AddressSanitizer: its shadow memory is not the engine's");
	cr_expect_leq(peak, min + SESSION_RAM_SLACK, "peak resident set %.1f MiB exceeds the minimum %.1f MiB + %llu MiB",
		      peak / 1048576.0, min / 1048576.0, SESSION_RAM_SLACK >> 20);
}

/* run follows the plan; explicit flags override it and the run says so. */
static double json_num(const cJSON *j, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(j, key);
	cr_assert(cJSON_IsNumber(v), "stats json lacks %s", key);
	return v->valuedouble;
}

/* The statistics' window is the run's: the second run pins what the first
 * learned, and that start-up load is reported apart (its bytes, time and
 * wait), not as the run's disk wait; without prefetch the run's bytes are
 * its missed experts' records exactly, and its wait fits in its wall time. */
Test(run, stats_window_puts_the_startup_apart)
{
	char path[4400], args[8192];
	snprintf(model, sizeof model, "%s/win-int4", scratch);
	fc_container_copy(model, "hf/qwen3_moe", "");
	for (int i = 0; i < 2; i++) {
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 16 --temp 0 --no-prefetch "
			 "--draft 0 --stats --stats-json '%s/win%d.json'", model, scratch, i);
		free(run_out("win", args));
	}
	snprintf(path, sizeof path, "%s/win1.json", scratch);
	cJSON *j = cli_json_read(path);
	const cJSON *cl = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "frame_classes"), 0);
	double record = json_num(cl, "frame_bytes");
	double pins = json_num(j, "startup_pinned_experts");
	cr_expect_gt(pins, 0, "the second run pinned nothing");
	cr_expect_eq(json_num(j, "startup_pin_bytes"), pins * record, "start-up bytes are not the pinned records");
	cr_expect_gt(json_num(j, "startup_resident_bytes"), 0);
	cr_expect_eq(json_num(j, "bytes_read"), json_num(j, "expert_misses") * record,
		     "the run's bytes are not its missed experts'");
	cr_expect_leq(json_num(j, "disk_wait_s"), json_num(j, "wall_s"), "waited longer than the run took");
	cr_expect_geq(json_num(j, "compute_s"), 0);
	cJSON_Delete(j);
	snprintf(path, sizeof path, "%s/win.err", scratch);
	char *err = tu_read(path, NULL);
	cr_expect(err && strstr(err, "start-up (before that): resident weights"), "no start-up line: %s", err);
	free(err);
}

/* A budget with a frame for every expert pins all the frames but one
 * step's need with the experts the earlier run used: the same run again
 * starts warm and misses only the coldest few, with the same tokens. */
Test(run, model_in_ram_starts_warm)
{
	char path[4400], args[8192];
	snprintf(model, sizeof model, "%s/warm-int4", scratch);
	fc_container_copy(model, "hf/qwen3_moe", "");
	char *out[2];
	for (int i = 0; i < 2; i++) {
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 24 --temp 0 --draft 0 "
			 "--stats-json '%s/warm%d.json'", model, scratch, i);
		out[i] = run_out("warm", args);
	}
	cr_expect_str_eq(out[1], out[0], "the warm run generated other tokens");
	double used = 0, pins, misses, spare = 0;
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "%s/warm%d.json", scratch, i);
		cJSON *j = cli_json_read(path);
		const cJSON *cl = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "frame_classes"), 0);
		cr_assert_geq(json_num(cl, "frames"), json_num(cl, "layers") * 8, "the budget does not hold every expert");
		if (i == 0) {
			used = json_num(j, "expert_misses"); /* cold: each used expert missed once */
			spare = json_num(cl, "frames") - 2;  /* one step: top-2 of one layer */
		}
		pins = json_num(j, "startup_pinned_experts");
		misses = json_num(j, "expert_misses");
		cJSON_Delete(j);
		free(out[i]);
	}
	cr_expect_gt(used, 8, "the first run used too few experts to tell");
	cr_expect_eq(pins, fmin(used, spare), "the warm run pinned %.0f of the %.0f experts used before", pins, used);
	cr_expect_eq(misses, used - pins, "the warm run missed %.0f experts, %.0f unpinned", misses, used - pins);
}

/* Prefetch reads start only while recent predictions are precise: on the
 * fixture (precision about 0.5) none start and the run reads exactly its
 * missed experts; with the bar at 0 (COLIBRI_PREFETCH_PRECISION) they do,
 * and the text is the same. */
Test(run, prefetch_reads_only_precise_predictions)
{
	char path[4400], args[8192];
	snprintf(model, sizeof model, "%s/pf-int4", scratch);
	fc_container_copy(model, "hf/qwen3_moe", "");
	char *text[2];
	double reads[2], bytes[2], misses[2], record = 0, precision = 0;
	for (int i = 0; i < 2; i++) {
		if (i)
			setenv("COLIBRI_PREFETCH_PRECISION", "0", 1);
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 24 --temp 0 --draft 0 --no-pin "
			 "--stats-json '%s/pf%d.json'", model, scratch, i);
		text[i] = run_out("pf", args);
		snprintf(path, sizeof path, "%s/pf%d.json", scratch, i);
		cJSON *j = cli_json_read(path);
		reads[i] = json_num(j, "prefetch_reads");
		bytes[i] = json_num(j, "bytes_read");
		misses[i] = json_num(j, "expert_misses");
		record = json_num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "frame_classes"), 0), "frame_bytes");
		if (!i)
			precision = json_num(j, "prefetch_precision_recent");
		cJSON_Delete(j);
	}
	unsetenv("COLIBRI_PREFETCH_PRECISION");
	cr_assert_lt(precision, 0.95, "the fixture's predictions are precise (%.2f): the test proves nothing", precision);
	cr_expect_eq(reads[0], 0, "imprecise predictions were read");
	cr_expect_eq(bytes[0], misses[0] * record, "read more than the missed experts");
	cr_expect_gt(reads[1], 0, "with the bar at 0 nothing was prefetched");
	cr_expect_str_eq(text[1], text[0], "prefetch changed the text");
	free(text[0]);
	free(text[1]);
}

/* DeepSeek-V4's hash-routed layers take their experts from the token id,
 * so those are read ahead exactly, whatever the routers' precision: with
 * the bar out of reach (COLIBRI_PREFETCH_PRECISION=2, no router prediction
 * is read) prefetch reads still start, every one is used (the budget holds
 * every expert, so none is evicted unused), and the text is what
 * --no-prefetch gives. */
Test(run, hash_layers_prefetch_exactly)
{
	char path[4400], args[8192];
	snprintf(model, sizeof model, "%s/v4-int4", scratch);
	fc_container_copy(model, "hf/deepseek_v4", "");
	setenv("COLIBRI_PREFETCH_PRECISION", "2", 1);
	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 16 --temp 0 --no-pin "
		 "--stats-json '%s/v4pf.json'", model, scratch);
	char *on = run_out("v4pf", args);
	unsetenv("COLIBRI_PREFETCH_PRECISION");
	snprintf(path, sizeof path, "%s/v4pf.json", scratch);
	cJSON *j = cli_json_read(path);
	double reads = json_num(j, "prefetch_reads"), used = json_num(j, "prefetch_reads_used");
	double wasted = json_num(j, "prefetch_reads_wasted");
	cJSON_Delete(j);
	cr_expect_gt(reads, 0, "the hash layers' experts were not read ahead");
	cr_expect_eq(wasted, 0, "%.0f of %.0f prefetch reads wasted", wasted, reads);
	cr_expect_eq(used, reads, "%.0f of %.0f prefetch reads used", used, reads);
	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 16 --temp 0 --no-pin --no-prefetch", model);
	char *off = run_out("v4nopf", args);
	cr_expect_str_eq(on, off, "prefetch changed the text");
	free(on);
	free(off);
}

Test(run, flags_override_the_plan)
{
	need_tok_model();
	char args[8192], path[4400];
	snprintf(args, sizeof args, "run --model '%s' --tokens 9707 -n 2 --temp 0 --io-depth 8 --threads 1 --stats", model);
	free(run_out("override", args));
	snprintf(path, sizeof path, "%s/override.err", scratch);
	char *err = tu_read(path, NULL);
	cr_assert_not_null(err);
	cr_expect(strstr(err, "--io-depth 8 overrides the plan"), "no override line for --io-depth: %s", err);
	cr_expect(strstr(err, "io depth 8"), "the store does not use the flag's depth: %s", err);
	free(err);
}

/* Reads the stats JSON at path: frames of each frame class into frames[]
 * (ascending record size), peak RSS and budget; returns the class count. */
static int stats_classes(const char *path, double frames[4], double bytes[4], double *peak, double *budget,
			 bool *sanitizers)
{
	char *js = tu_read(path, NULL);
	cr_assert_not_null(js, "no --stats-json file %s", path);
	cJSON *j = cJSON_Parse(js);
	cr_assert_not_null(j, "%s", js);
	const cJSON *cl = cJSON_GetObjectItem(j, "frame_classes");
	int n = cJSON_GetArraySize(cl);
	for (int i = 0; i < n && i < 4; i++) {
		frames[i] = cJSON_GetObjectItem(cJSON_GetArrayItem(cl, i), "frames")->valuedouble;
		bytes[i] = cJSON_GetObjectItem(cJSON_GetArrayItem(cl, i), "frame_bytes")->valuedouble;
	}
	*peak = cJSON_GetObjectItem(j, "peak_rss_bytes")->valuedouble;
	*budget = cJSON_GetObjectItem(j, "ram_budget_bytes")->valuedouble;
	*sanitizers = cJSON_IsTrue(cJSON_GetObjectItem(j, "sanitizers"));
	cJSON_Delete(j);
	free(js);
	return n;
}

/* DeepSeek-V3 at int4 keeps the MTP layer's experts at int8: the store
 * opens two frame classes. At --ram min each has one token's experts (the
 * true minimum), drafting through the MTP layer works within the budget
 * plus the slack, and the greedy text is the one an unlimited budget gives,
 * where the store opens a frame for every expert of both classes. */
Test(run, frame_classes_beside_mtp)
{
	char ds[4400], args[8192], path[4400];
	fc_container(ds, sizeof ds, "hf/deepseek_v3", "--quant int4");
	double frames[4], bytes[4], peak, budget;
	bool san;

	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 24 --temp 0 --draft 2 --ram min --stats "
		 "--stats-json '%s/min.json'", ds, scratch);
	char *at_min = run_out("ds-min", args);
	snprintf(path, sizeof path, "%s/min.json", scratch);
	cr_assert_eq(stats_classes(path, frames, bytes, &peak, &budget, &san), 2);
	cr_expect_lt(bytes[0], bytes[1]);
	cr_expect_eq(frames[0], 4, "top_k int4 frames at the minimum, not %.0f", frames[0]);
	cr_expect_eq(frames[1], 4, "top_k int8 frames at the minimum, not %.0f", frames[1]);
	cr_log_info("--ram min: budget %.1f MiB, peak resident set %.1f MiB", budget / 1048576.0, peak / 1048576.0);
	if (!san)
		cr_expect_leq(peak, budget + 32 * 1048576.0, "peak %.1f MiB over the %.1f MiB budget + 32 MiB",
			      peak / 1048576.0, budget / 1048576.0);
	/* The store line names top_k frames of each record size the manifest
	 * holds, the smaller first. */
	char want[256], wpath[4400];
	snprintf(wpath, sizeof wpath, "%s/want.txt", scratch);
	cr_assert_eq(tu_sh("/usr/bin/python3 -c \"import json,sys; m=json.load(open(sys.argv[1]+'/manifest.json')); "
			   "k=json.load(open(sys.argv[1]+'/config.json'))['num_experts_per_tok']; "
			   "s=sorted({l['record_bytes'] for l in m['experts']['layers']}); "
			   "print(' + '.join('%%d frames of %%d KiB' %% (k, b >> 10) for b in s), end='')\" '%s' >'%s'",
			   ds, wpath), 0);
	char *w = tu_read(wpath, NULL);
	cr_assert_not_null(w);
	snprintf(want, sizeof want, "%s", w);
	free(w);
	cr_assert(strstr(want, " + "), "two record sizes expected: \"%s\"", want);
	snprintf(path, sizeof path, "%s/ds-min.err", scratch);
	char *err = tu_read(path, NULL);
	cr_expect(err && strstr(err, want), "store line lacks \"%s\": %s", want, err);
	free(err);

	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 24 --temp 0 --draft 2 --ram 1G "
		 "--stats-json '%s/big.json'", ds, scratch);
	char *at_big = run_out("ds-big", args);
	snprintf(path, sizeof path, "%s/big.json", scratch);
	cr_assert_eq(stats_classes(path, frames, bytes, &peak, &budget, &san), 2);
	cr_expect_eq(frames[0], 2 * 16, "every int4 expert of the two MoE layers has a frame");
	cr_expect_eq(frames[1], 16, "every int8 MTP expert has a frame");
	cr_expect_str_eq(at_min, at_big, "greedy text differs between --ram min and 1G");
	free(at_min);
	free(at_big);
}

/* The context needs the prompt and -n, nothing more: drafting uses what
 * room is left and steps plainly at the end, with the same greedy text;
 * one position less is refused. */
Test(run, context_holds_prompt_and_n)
{
	need_tok_model();
	char ds[4400], args[8192];
	fc_container(ds, sizeof ds, "hf/deepseek_v3", "--quant int4");
	const char *models[] = { model, ds };
	for (int i = 0; i < 2; i++) {
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 12 --temp 0 --draft 2 --ctx 16", models[i]);
		char *tight = run_out("ctx-tight", args);
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 12 --temp 0 --draft 2 --ctx 64", models[i]);
		char *roomy = run_out("ctx-roomy", args);
		cr_expect_str_eq(tight, roomy, "%s: greedy text depends on --ctx", models[i]);
		free(tight);
		free(roomy);
		cr_expect_neq(tu_sh("'%s' run --model '%s' --tokens 5,6,7,8 -n 12 --temp 0 --ctx 15 2>'%s/ctx.err'",
				    tu_colibri(), models[i], scratch), 0, "--ctx 15 accepted for 16 positions");
	}
}

/* The model's positions bound the context (issue 39, item 2), on
 * deepseek_v3's fixture (256 positions, YaRN 4 x 64): --ctx beyond them
 * warns and goes on, as llama.cpp does past n_ctx_train (transformers
 * computes any position; the model was not trained there); without --ctx,
 * a run that needs more is refused, naming them; the default -n is a
 * quarter of the context at most (of --ctx 40, 10; of the model's 256, 64,
 * under 128). */
Test(run, context_beyond_the_model_warns)
{
	char ds[4400], args[8192], path[4400];
	fc_container(ds, sizeof ds, "hf/deepseek_v3", "--quant int4");
	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 4 --temp 0 --ctx 300", ds);
	free(run_out("beyond", args));
	snprintf(path, sizeof path, "%s/beyond.err", scratch);
	char *err = tu_read(path, NULL);
	cr_expect(err && strstr(err, "warning: --ctx 300 is beyond the 256 positions the model was trained for"), "%s",
		  err);
	free(err);
	snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 -n 4 --temp 0 --ctx 256", ds);
	free(run_out("within", args));
	snprintf(path, sizeof path, "%s/within.err", scratch);
	err = tu_read(path, NULL);
	cr_expect(err && !strstr(err, "beyond"), "%s", err);
	free(err);
	cr_expect_neq(tu_sh("'%s' run --model '%s' --tokens 5,6,7,8 -n 300 --temp 0 2>'%s/need.err'", tu_colibri(), ds,
			    scratch), 0, "304 positions run on a model of 256");
	snprintf(path, sizeof path, "%s/need.err", scratch);
	err = tu_read(path, NULL);
	cr_expect(err && strstr(err, "304 positions needed but the model has 256"), "%s", err);
	free(err);
	static const char *const pairs[][2] = { { "--ctx 40", "-n 10 --ctx 40" }, { "", "-n 64" } };
	for (int i = 0; i < 2; i++) {
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 --temp 0 %s", ds, pairs[i][0]);
		char *dflt = run_out("default-n", args);
		snprintf(args, sizeof args, "run --model '%s' --tokens 5,6,7,8 --temp 0 %s", ds, pairs[i][1]);
		char *given = run_out("given-n", args);
		cr_expect_str_eq(dflt, given, "the default -n of \"%s\" is not \"%s\"", pairs[i][0], pairs[i][1]);
		free(dflt);
		free(given);
	}
}
