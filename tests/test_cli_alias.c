/*
 * test_cli_alias — llama.cpp's option names (engine/cli/cli_alias.h) and
 * `--model FILE.gguf` (engine/cli/model_cache.h), issue 39, item 4.
 *
 *  - The rewrite, in process on option tables shaped like run's, serve's
 *    and tokenize's: values are never rewritten (`-p "-m"` stays a prompt),
 *    nothing after "--" is, `--alias=value` and `--ctx_size` forms work, an
 *    alias the command does not have and an unknown `-xyz` are refused by
 *    name, and each alias parses (getopt_long) to what our name parses to.
 *    MPI ranks 1.. (lenient) drop what they do not take. --chat-template
 *    and --chat-template-file are ours too, passed as they are, and what
 *    session_chat_template refuses is refused with a message naming the
 *    option or the file.
 *  - End to end: every command that runs a model refuses `-fa` by name
 *    (each calls the rewrite); run's aliases give run's output byte for
 *    byte, the seed visibly applied; `-c 4` fails as `--ctx 4` does; `-ngl
 *    99` runs with its note (it was `--n must be an integer ... "gl"`);
 *    serve's -np and --alias reach --parallel and --model-id.
 *  - A GGUF as --model is converted once into the cache, with a line saying
 *    where, then reused (the same output, the container untouched), and
 *    converted again when the file changes, and tokenize takes it as run
 *    does; a failed conversion leaves nothing in the cache, and the
 *    container check names the way out for a GGUF.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "base/error.h"
#include "engine/cli/cli_alias.h"
#include "engine/decode/session.h"
#include "tests/cli_util.h"
#include "tests/fixture_cache.h"
#include "tests/stderr_capture.h"

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(cli_alias, .init = setup, .fini = teardown);

/* Option tables shaped like the commands' (the real ones are static in
 * engine/cli/cmd_*.c; the end-to-end tests below run those). */
static const struct option run_opts[] = {
	SESSION_LONG_OPTIONS,
	{ "prompt", required_argument, 0, 2000 },    { "prompt-file", required_argument, 0, 2001 },
	{ "temp", required_argument, 0, 2002 },      { "top-k", required_argument, 0, 2003 },
	{ "seed", required_argument, 0, 2004 },      { "chat", no_argument, 0, 2005 },
	{ "system", required_argument, 0, 2006 },    { "grammar", required_argument, 0, 2007 },
	{ "grammar-text", required_argument, 0, 2008 }, { "json-schema", required_argument, 0, 2009 },
	{ "help", no_argument, 0, 'h' },             { 0, 0, 0, 0 },
};
static const struct option serve_opts[] = {
	SESSION_LONG_OPTIONS,
	{ "host", required_argument, 0, 3000 },     { "port", required_argument, 0, 3001 },
	{ "parallel", required_argument, 0, 3002 }, { "model-id", required_argument, 0, 3003 },
	{ "help", no_argument, 0, 'h' },            { 0, 0, 0, 0 },
};
static const struct option tokenize_opts[] = {
	{ "model", required_argument, 0, 'm' }, { "text", required_argument, 0, 't' },
	{ "file", required_argument, 0, 'f' },  { "chat", no_argument, 0, 'c' },
	{ "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 },
};
static const struct option worker_opts[] = { SESSION_LONG_OPTIONS, { 0, 0, 0, 0 } };

struct line {
	int argc;
	char **argv;
	int rc;
	char text[2048];   /* the rewritten arguments after argv[0], '|'-separated */
	char *err;         /* what the rewrite printed */
};

/* Rewrites "cmd" followed by the NULL-terminated arguments. */
static struct line rewrite(const char *cmd, const char *shortopts, const struct option *opts, ...)
{
	static char *args[64];
	struct line l = { 0 };
	va_list ap;
	va_start(ap, opts);
	args[l.argc++] = (char *)"cmd";
	for (const char *a; (a = va_arg(ap, const char *));)
		args[l.argc++] = (char *)a;
	va_end(ap);
	args[l.argc] = NULL;
	l.argv = args;
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	l.rc = cli_alias_apply(cmd, &l.argc, &l.argv, shortopts, opts);
	l.err = stderr_capture_end(&cap);
	for (int i = 1; !l.rc && i < l.argc; i++) {
		size_t n = strlen(l.text);
		snprintf(l.text + n, sizeof l.text - n, "%s%s", i > 1 ? "|" : "", l.argv[i]);
	}
	cr_assert(l.rc || l.argv[l.argc] == NULL, "the line is not NULL-terminated");
	return l;
}

#define REWRITE(cmd, so, opts, ...) rewrite(cmd, so, opts, __VA_ARGS__, (const char *)NULL)

static void expect_line(struct line l, const char *want)
{
	cr_expect_eq(l.rc, 0, "refused: %s", l.err);
	cr_expect_str_eq(l.text, want);
	free(l.err);
}

static void expect_refused(struct line l, const char *want)
{
	cr_expect_eq(l.rc, 2, "accepted as %s", l.text);
	cr_expect(strstr(l.err, want), "the message does not name %s: %s", want, l.err);
	free(l.err);
}

Test(cli_alias, values_are_never_rewritten)
{
	expect_line(REWRITE("run", "n:h", run_opts, "-m", "D", "-p", "-m", "-n", "-c", "-c", "512", "-t", "2", "-s", "7"),
		    "--model|D|--prompt|-m|-n|-c|--ctx|512|--threads|2|--seed|7");
	/* Our own options' values too: --prompt takes the next argument whole. */
	expect_line(REWRITE("run", "n:h", run_opts, "--prompt", "-ngl", "--system", "-fa", "-n5", "positional"),
		    "--prompt|-ngl|--system|-fa|-n5|positional");
	/* After "--" nothing is an option. */
	expect_line(REWRITE("run", "n:h", run_opts, "-c", "8", "--", "-m", "-ngl", "--ctx-size"),
		    "--ctx|8|--|-m|-ngl|--ctx-size");
}

Test(cli_alias, equals_and_underscore_forms)
{
	expect_line(REWRITE("run", "n:h", run_opts, "--ctx-size=512", "--n-predict=9", "--predict", "3",
			    "--temperature=0.5", "--ctx_size", "64", "--top_k=40", "--system-prompt=be brief"),
		    "--ctx|512|-n|9|-n|3|--temp|0.5|--ctx|64|--top-k=40|--system|be brief");
	/* An alias whose value is empty or missing. */
	expect_refused(REWRITE("run", "n:h", run_opts, "--prompt", "x", "-c"), "-c needs a value");
	expect_refused(REWRITE("run", "n:h", run_opts, "--jinja=yes"), "--jinja takes no value");
}

Test(cli_alias, grammar_schema_jinja_gpu_layers)
{
	/* llama.cpp's --grammar is GBNF text, ours a file: "::=" tells them apart. */
	expect_line(REWRITE("run", "n:h", run_opts, "--grammar", "root ::= \"a\"", "--grammar", "g.gbnf",
			    "--grammar-file", "h.gbnf", "--grammar=root ::= [0-9]"),
		    "--grammar-text|root ::= \"a\"|--grammar|g.gbnf|--grammar|h.gbnf|--grammar-text|root ::= [0-9]");
	/* -j is JSON text (ours reads a value starting with '{' as the schema);
	 * -jf a file, even one named like JSON. */
	expect_line(REWRITE("run", "n:h", run_opts, "-j", "{}", "-jf", "s.json", "--json-schema-file", "{odd}.json"),
		    "--json-schema|{}|--json-schema|s.json|--json-schema|./{odd}.json");
	/* --jinja is a no-op, -ngl N is dropped with a note naming it. */
	struct line l = REWRITE("run", "n:h", run_opts, "--jinja", "-ngl", "99", "--n-gpu-layers=all", "-p", "x");
	cr_expect(strstr(l.err, "-ngl 99 ignored") && strstr(l.err, "--n-gpu-layers all ignored") &&
		  strstr(l.err, "no GPU offload"), "no note for -ngl: %s", l.err);
	expect_line(l, "--prompt|x");
	/* --chat-template and --chat-template-file are our names too (session
	 * options): they pass unchanged, values included; what a value may be
	 * is session_chat_template's business (test_run). */
	expect_line(REWRITE("run", "n:h", run_opts, "--chat-template", "chatml", "--chat-template={{ x }}"),
		    "--chat-template|chatml|--chat-template={{ x }}");
	expect_line(REWRITE("serve", "h", serve_opts, "--chat-template-file", "t.jinja"), "--chat-template-file|t.jinja");
}

Test(cli_alias, per_command_and_unknown)
{
	/* -np and --alias are serve's; run refuses them by their meaning. */
	expect_line(REWRITE("serve", "h", serve_opts, "-np", "2", "--alias", "m", "-a=x", "-m", "D", "-c", "4096",
			    "--host", "0.0.0.0", "--port", "8080"),
		    "--parallel|2|--model-id|m|-a=x|--model|D|--ctx|4096|--host|0.0.0.0|--port|8080");
	expect_refused(REWRITE("run", "n:h", run_opts, "-np", "4"), "-np (llama.cpp's name) is our --parallel");
	expect_refused(REWRITE("serve", "h", serve_opts, "-n", "4"), "unknown option -n");
	expect_refused(REWRITE("serve", "h", serve_opts, "--grammar", "root ::= \"a\""), "unknown option --grammar");
	/* llama-tokenize's -p and -f are tokenize's --text and --file. */
	expect_line(REWRITE("tokenize", "h", tokenize_opts, "-m", "D", "-p", "hi", "-f", "x.txt", "--file", "y"),
		    "--model|D|--text|hi|--file|x.txt|--file|y");
	/* getopt would read -ngl as -n "gl"; any -xy... no alias is named. */
	expect_refused(REWRITE("run", "n:h", run_opts, "-fa", "-p", "x"), "unknown option -fa");
	expect_refused(REWRITE("run", "n:h", run_opts, "-cnv"), "unknown option -cnv");
	/* MPI ranks 1..: what they do not take goes, quietly, with its value. */
	struct line l = REWRITE(NULL, "", worker_opts, "-np", "4", "-m", "D", "-p", "x", "-ngl", "9", "-fa",
				"--chat-template", "t", "-t", "3");
	cr_expect_str_eq(l.err, "", "a rank printed: %s", l.err);
	/* The chat template is a session option the ranks take and ignore. */
	expect_line(l, "--model|D|-fa|--chat-template|t|--threads|3");
}

/* What getopt_long makes of a line: "val=optarg;" for each option. */
static void parsed(const char *shortopts, const struct option *opts, struct line l, char *out, size_t n)
{
	out[0] = 0;
	int ch, saved_opterr = opterr;
	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(l.argc, l.argv, shortopts, opts, NULL)) != -1) {
		size_t k = strlen(out);
		snprintf(out + k, n - k, "%d=%s;", ch, optarg ? optarg : "");
	}
	opterr = saved_opterr;
	free(l.err);
}

Test(cli_alias, each_alias_parses_as_our_name)
{
	static const char *const pairs[][4] = {
		{ "-m", "D", "--model", "D" },           { "-p", "hi", "--prompt", "hi" },
		{ "-f", "p.txt", "--prompt-file", "p.txt" }, { "--file", "p.txt", "--prompt-file", "p.txt" },
		{ "--n-predict", "9", "-n", "9" },       { "--predict", "9", "-n", "9" },
		{ "-c", "512", "--ctx", "512" },         { "--ctx-size", "512", "--ctx", "512" },
		{ "-t", "2", "--threads", "2" },         { "-s", "7", "--seed", "7" },
		{ "--temperature", "0.5", "--temp", "0.5" }, { "-sys", "S", "--system", "S" },
		{ "--system-prompt", "S", "--system", "S" }, { "--grammar-file", "g", "--grammar", "g" },
		{ "-j", "{}", "--json-schema", "{}" },   { "--json-schema-file", "s", "--json-schema", "s" },
	};
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		char a[512], b[512];
		parsed("n:h", run_opts, REWRITE("run", "n:h", run_opts, pairs[i][0], pairs[i][1], "--chat"), a, sizeof a);
		parsed("n:h", run_opts, REWRITE("run", "n:h", run_opts, pairs[i][2], pairs[i][3], "--chat"), b, sizeof b);
		cr_expect_str_eq(a, b, "%s %s parses otherwise than %s %s", pairs[i][0], pairs[i][1], pairs[i][2],
				 pairs[i][3]);
	}
	static const char *const serve_pairs[][4] = {
		{ "-np", "2", "--parallel", "2" }, { "-a", "m", "--model-id", "m" }, { "--alias", "m", "--model-id", "m" },
	};
	for (size_t i = 0; i < sizeof serve_pairs / sizeof serve_pairs[0]; i++) {
		char a[512], b[512];
		parsed("h", serve_opts, REWRITE("serve", "h", serve_opts, serve_pairs[i][0], serve_pairs[i][1]), a, sizeof a);
		parsed("h", serve_opts, REWRITE("serve", "h", serve_opts, serve_pairs[i][2], serve_pairs[i][3]), b, sizeof b);
		cr_expect_str_eq(a, b, "%s parses otherwise than %s", serve_pairs[i][0], serve_pairs[i][2]);
	}
}

/* session_chat_template's refusals, which come before it touches the
 * tokenizer (run's end to end: test_run): llama.cpp's template names, an
 * empty --chat-template, a missing or empty file, both options at once;
 * neither option is nothing to do. */
Test(cli_alias, chat_template_values_refused)
{
	struct session_options o;
	session_options_default(&o);
	cr_expect_eq(session_chat_template(&o, NULL), 0);
	char empty[4200], missing[4200];
	snprintf(empty, sizeof empty, "%s/empty.jinja", scratch);
	snprintf(missing, sizeof missing, "%s/none.jinja", scratch);
	cr_assert_eq(tu_write(empty, " \n", 2), 0);
	static const char *const names[] = { "chatml", "llama3", "" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		o.chat_template = names[i];
		char want[64];
		snprintf(want, sizeof want, "takes a Jinja template, not \"%s\"", names[i]);
		error_clear();
		cr_expect_eq(session_chat_template(&o, NULL), -EINVAL, "%s taken", names[i]);
		cr_expect(strstr(error_message(), want) && strstr(error_message(), "--chat-template-file FILE"), "%s",
			  error_message());
	}
	o.chat_template = "{{ messages[0].content }}";
	o.chat_template_file = empty;
	error_clear();
	cr_expect_eq(session_chat_template(&o, NULL), -EINVAL);
	cr_expect(strstr(error_message(), "not both"), "%s", error_message());
	o.chat_template = NULL;
	error_clear();
	cr_expect_eq(session_chat_template(&o, NULL), -EINVAL);
	cr_expect(strstr(error_message(), empty) && strstr(error_message(), "empty"), "%s", error_message());
	o.chat_template_file = missing;
	error_clear();
	cr_expect_eq(session_chat_template(&o, NULL), -ENOENT);
	cr_expect(strstr(error_message(), "--chat-template-file") && strstr(error_message(), missing), "%s",
		  error_message());
	error_clear();
}

/* The container of the small GGUF fixture, converted with convert's
 * defaults (the build's shared cache); its source path into gguf. */
static void gguf_fixture(char *gguf, size_t gn, char *model, size_t mn)
{
	snprintf(gguf, gn, "%s/gguf/olmoe_blocks.q4_k_m.gguf", tu_fixtures());
	if (access(gguf, R_OK) != 0)
		cr_skip_test("%s is missing (run tools/make_fixtures.sh)", gguf);
	if (model)
		fc_container(model, mn, "gguf/olmoe_blocks.q4_k_m.gguf", "");
}

/* colibri's stdout for args (exit status into *rc); stderr into *err. */
static char *run_cmd(const char *name, int *rc, char **err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static char *run_cmd(const char *name, int *rc, char **err, const char *fmt, ...)
{
	char args[8192], out[4400], cache[4200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(out, sizeof out, "%s/%s", scratch, name);
	snprintf(cache, sizeof cache, "%s/cache", scratch);
	*rc = cli_run(cache, out, "%s", args);
	*err = cli_read_err(out);
	char *s = tu_read(out, NULL);
	cr_assert(s && *err);
	return s;
}

Test(cli_alias, every_model_command_rewrites)
{
	static const char *const cmds[] = { "run", "chat", "serve", "web", "plan", "tokenize", "detokenize", "logits" };
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		int rc;
		char *err, *out = run_cmd("cmd", &rc, &err, "%s -m /nonexistent -fa 1", cmds[i]);
		char want[64];
		snprintf(want, sizeof want, "colibri %s: unknown option -fa", cmds[i]);
		cr_expect(rc == 2 && strstr(err, want), "%s: exit %d, %s", cmds[i], rc, err);
		free(out);
		free(err);
	}
}

Test(cli_alias, run_aliases_give_the_same_output)
{
	char gguf[4096], model[4200];
	gguf_fixture(gguf, sizeof gguf, model, sizeof model);
	int rc;
	char *e1, *e2, *e3;
	char *ours = run_cmd("ours", &rc, &e1, "run --model '%s' --prompt 'In the beginning' -n 6 --seed 7 --temp 0.9 "
				 "--threads 1 --ctx 64", model);
	cr_assert_eq(rc, 0, "%s", e1);
	/* -ngl used to be read as -n "gl". */
	char *theirs = run_cmd("theirs", &rc, &e2, "run -m '%s' -p 'In the beginning' --n-predict 6 -s 7 --temperature "
				   "0.9 -t 1 -c 64 -ngl 99 --jinja", model);
	cr_assert_eq(rc, 0, "%s", e2);
	cr_expect_str_eq(theirs, ours, "llama.cpp's names gave other text");
	cr_expect(strstr(e2, "-ngl 99 ignored"), "no note for -ngl: %s", e2);
	char *other = run_cmd("seed8", &rc, &e3, "run -m '%s' -p 'In the beginning' -n 6 -s 8 --temp 0.9 -t 1", model);
	cr_expect(rc == 0 && strcmp(other, ours), "-s 8 gave -s 7's text: the seed is not applied");
	free(ours), free(theirs), free(other), free(e1), free(e2), free(e3);
	/* The same setting fails the same way. */
	char *a = run_cmd("ctx_a", &rc, &e1, "run -m '%s' -p 'In the beginning' -n 6 -c 4", model);
	int rc2;
	char *b = run_cmd("ctx_b", &rc2, &e2, "run --model '%s' --prompt 'In the beginning' -n 6 --ctx 4", model);
	cr_expect(rc != 0 && rc == rc2 && !strcmp(e1, e2), "-c 4: %d %s; --ctx 4: %d %s", rc, e1, rc2, e2);
	free(a), free(b), free(e1), free(e2);
	/* serve refuses bad values under our names before loading anything. */
	a = run_cmd("np", &rc, &e1, "serve -m '%s' -np 0", model);
	cr_expect(rc != 0 && strstr(e1, "--parallel"), "serve -np 0: %d %s", rc, e1);
	b = run_cmd("alias", &rc, &e2, "serve -m '%s' --alias 'no spaces'", model);
	cr_expect(rc != 0 && strstr(e2, "--model-id \"no spaces\""), "serve --alias: %d %s", rc, e2);
	free(a), free(b), free(e1), free(e2);
}

/* The container folder a "converting X into DIR, once" line names. */
static void converted_into(const char *err, char *dir, size_t n)
{
	const char *p = strstr(err, " into ");
	const char *q = p ? strstr(p, ", once") : NULL;
	cr_assert(p && q, "no line saying where: %s", err);
	snprintf(dir, n, "%.*s", (int)(q - p - 6), p + 6);
}

static double mtime(const char *dir, const char *file)
{
	char p[8400];
	struct stat sb;
	snprintf(p, sizeof p, "%s/%s", dir, file);
	cr_assert_eq(stat(p, &sb), 0, "%s missing", p);
	return (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
}

Test(cli_alias, gguf_model_converted_once)
{
	char fixture[4096], model[4200], gguf[4200], dir[8192];
	gguf_fixture(fixture, sizeof fixture, model, sizeof model);
	snprintf(gguf, sizeof gguf, "%s/m.gguf", scratch);
	cr_assert_eq(tu_sh("cp '%s' '%s'", fixture, gguf), 0);
	int rc;
	char *e0, *e1, *e2, *e3;
	char *want = run_cmd("want", &rc, &e0, "run --model '%s' --tokens 1,2,3 -n 6 --temp 0", model);
	cr_assert_eq(rc, 0, "%s", e0);
	char *first = run_cmd("first", &rc, &e1, "run -m '%s' --tokens 1,2,3 -n 6 --temp 0", gguf);
	cr_assert_eq(rc, 0, "%s", e1);
	converted_into(e1, dir, sizeof dir);
	char where[4300];
	snprintf(where, sizeof where, "%s/cache/models/gguf/", scratch);
	cr_expect(!strncmp(dir, where, strlen(where)) && strstr(dir, "/m"), "converted into %s, not the cache", dir);
	cr_expect(strstr(e1, "convert: [####################] 100%"), "no progress bar: %s", e1);
	cr_expect_str_eq(first, want, "the cached container is not the GGUF's");
	double made = mtime(dir, "manifest.json");
	char *second = run_cmd("second", &rc, &e2, "run --model='%s' --tokens 1,2,3 -n 6 --temp 0", gguf);
	cr_assert_eq(rc, 0, "%s", e2);
	cr_expect(!strstr(e2, "converting") && strstr(e2, "using its container"), "not reused: %s", e2);
	cr_expect_eq(mtime(dir, "manifest.json"), made, "the container was written again");
	cr_expect_str_eq(second, want);
	/* A file that changed (a new download) is converted again. */
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = 1700000000 } };
	cr_assert_eq(utimensat(AT_FDCWD, gguf, ts, 0), 0);
	char *third = run_cmd("third", &rc, &e3, "run --model '%s' --tokens 1,2,3 -n 6 --temp 0", gguf);
	cr_expect(rc == 0 && strstr(e3, "converting"), "a changed file was not converted again: %s", e3);
	free(want), free(first), free(second), free(third), free(e0), free(e1), free(e2), free(e3);
	/* llama-tokenize's line reuses the container too. */
	want = run_cmd("tok_want", &rc, &e0, "tokenize --model '%s' --text 'In the beginning'", model);
	cr_assert_eq(rc, 0, "%s", e0);
	first = run_cmd("tok", &rc, &e1, "tokenize -m '%s' -p 'In the beginning'", gguf);
	cr_expect(rc == 0 && strstr(e1, "using its container"), "%s", e1);
	cr_expect_str_eq(first, want);
	free(want), free(first), free(e0), free(e1);
}

Test(cli_alias, gguf_failed_conversion_leaves_nothing)
{
	char fixture[4096], gguf[4200];
	gguf_fixture(fixture, sizeof fixture, NULL, 0);
	snprintf(gguf, sizeof gguf, "%s/cut.gguf", scratch);
	/* The header whole, the tensor data cut short. */
	cr_assert_eq(tu_sh("head -c 1500000 '%s' > '%s'", fixture, gguf), 0);
	int rc;
	char *err, *out = run_cmd("cut", &rc, &err, "run --model '%s' --tokens 1,2,3 -n 2", gguf);
	cr_expect(rc != 0 && strstr(err, "cut.gguf"), "exit %d: %s", rc, err);
	/* Only the lock file may stay. */
	cr_expect_eq(tu_sh("test -z \"$(find '%s/cache/models/gguf' -mindepth 2 ! -name lock)\"", scratch), 0,
		     "the failed conversion left files in the cache");
	free(out);
	free(err);
	/* Where a GGUF reaches the container check, the message names the way out. */
	cr_expect_eq(session_check_model(fixture), -ENOTDIR);
	cr_expect(strstr(error_message(), "a GGUF file") && strstr(error_message(), "colibri convert"), "%s",
		  error_message());
}
