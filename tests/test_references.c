/*
 * test_references — the results of transformers v5.15.0 itself run on the
 * fixtures (tools/hf_check.py --json-dir, committed in tests/ref/transformers/,
 * see its README.md), checked without Python or torch:
 *  - each result was made from the fixtures the current generator writes: its
 *    fixture_sha256, a sha256 over what `sha256sum` prints for the checkpoint's
 *    config.json and *.safetensors, the tokens, the reference logits and the
 *    MTP reference, is recomputed from build/fixtures (COLIBRI_FIXTURES); a
 *    difference names the files that changed and the command that remakes the
 *    results;
 *  - each says pass, its logits (and its MTP head's, where transformers ran
 *    it) finite, top-1 equal everywhere and within the bound it states, a
 *    bound no looser than hf_check's 1e-5; an MTP head not compared says why;
 *  - every family the engine parses (model_config_type_at, the table
 *    model_config_parse reads) has a result, and every fixture folder under
 *    build/fixtures/hf has one.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <glob.h>
#include <math.h>

#include "engine/model/model_config.h"
#include "tests/test_util.h"

#define RESULTS "tests/ref/transformers"
#define REMAKE "/usr/bin/python3 tools/hf_check.py --transformers TRANSFORMERS_V5.15.0/src " \
	       "--fixtures build/fixtures --json-dir " RESULTS " (see " RESULTS "/README.md)"

/* One committed result, named by its file's stem (the fixture's name). The
 * array is cr_malloc'd: Criterion hands parameters to the test processes. */
struct result_param {
	char name[96];
};

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The stems of the RESULTS folder's .json files, sorted; *n of them,
 * malloc'd (free each and the array). */
static char **result_names(int *n)
{
	char pat[PATH_MAX];
	glob_t g;
	snprintf(pat, sizeof pat, "%s/" RESULTS "/*.json", tu_repo());
	*n = 0;
	if (glob(pat, 0, NULL, &g) != 0)
		return NULL;
	char **names = calloc(g.gl_pathc, sizeof *names);
	for (size_t i = 0; names && i < g.gl_pathc; i++) {
		const char *base = strrchr(g.gl_pathv[i], '/') + 1;
		names[(*n)++] = strndup(base, strlen(base) - strlen(".json"));
	}
	globfree(&g);
	qsort(names, (size_t)*n, sizeof *names, name_cmp);
	return names;
}

static void free_params(struct criterion_test_params *p)
{
	cr_free(p->params);
}

/* Every committed result as a parameter: each is its own test case, so a
 * result whose fixture this machine lacks is skipped on its own. */
static struct criterion_test_params result_params(void)
{
	int n = 0;
	char **names = result_names(&n);
	struct result_param *p = cr_malloc(sizeof *p * (size_t)(n ? n : 1));
	for (int i = 0; i < n; i++) {
		snprintf(p[i].name, sizeof p[i].name, "%s", names[i]);
		free(names[i]);
	}
	free(names);
	return cr_make_param_array(struct result_param, p, (size_t)n, free_params);
}

ParameterizedTestParameters(references, made_from_current_fixtures)
{
	return result_params();
}

ParameterizedTestParameters(references, passes_within_its_bound)
{
	return result_params();
}

/* RESULTS/<name>.json parsed; the test fails if it cannot be read. */
static cJSON *load_result(const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/" RESULTS "/%s.json", tu_repo(), name);
	char *text = tu_read(path, NULL);
	cr_assert(text, "%s: cannot be read", path);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cr_assert(cJSON_IsObject(j), "%s: not a JSON object", path);
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "fixture");
	cr_assert(cJSON_IsString(f) && strcmp(f->valuestring, name) == 0, "%s: its \"fixture\" is not %s", path, name);
	return j;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The files a result hashes, relative to the fixtures folder, in
 * tools/hf_check.py fixture_files' order: hf/N/config.json, each hf/N .safetensors
 * (bytewise sorted), ref/N.tokens, ref/N.f32 and ref/N.mtp.f32 when present.
 * Appends them, space-separated and quoted, to list; returns how many. */
static int fixture_files(const char *fix, const char *name, char *list, size_t size, char files[][256], int max)
{
	int n = 0;
	char pat[PATH_MAX];
	glob_t g;
	snprintf(files[n++], 256, "hf/%s/config.json", name);
	snprintf(pat, sizeof pat, "%s/hf/%s/*.safetensors", fix, name);
	if (glob(pat, 0, NULL, &g) == 0) {
		char **v = g.gl_pathv;
		qsort(v, g.gl_pathc, sizeof *v, name_cmp);
		for (size_t i = 0; i < g.gl_pathc && n < max - 3; i++)
			snprintf(files[n++], 256, "hf/%s/%s", name, strrchr(v[i], '/') + 1);
		globfree(&g);
	}
	snprintf(files[n++], 256, "ref/%s.tokens", name);
	snprintf(files[n++], 256, "ref/%s.f32", name);
	snprintf(pat, sizeof pat, "%s/ref/%s.mtp.f32", fix, name);
	if (access(pat, F_OK) == 0)
		snprintf(files[n++], 256, "ref/%s.mtp.f32", name);
	list[0] = 0;
	for (int i = 0; i < n; i++) {
		size_t used = strlen(list);
		snprintf(list + used, size - used, " '%s'", files[i]);
	}
	return n;
}

ParameterizedTest(struct result_param *r, references, made_from_current_fixtures, .init = setup, .fini = teardown)
{
	const char *fix = tu_fixtures();
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/hf/%s", fix, r->name);
	if (access(dir, F_OK) != 0)
		cr_skip_test("%s: no fixture %s in %s, so its result cannot be checked here (make_fixtures.sh skips a "
			     "fixture whose inputs this machine lacks, e.g. qwen3_moe_tok without tools/node_modules; "
			     "its output says which)", r->name, dir, fix);
	cJSON *j = load_result(r->name);
	char files[64][256], list[16384], sums[PATH_MAX], total[PATH_MAX];
	int n = fixture_files(fix, r->name, list, sizeof list, files, 64);
	snprintf(sums, sizeof sums, "%s/sums", scratch);
	snprintf(total, sizeof total, "%s/total", scratch);
	cr_assert_eq(tu_sh("cd '%s' && sha256sum --%s > '%s' && sha256sum < '%s' > '%s'", fix, list, sums, sums, total),
		     0, "%s: sha256sum over%s failed in %s", r->name, list, fix);
	char *listing = tu_read(sums, NULL), *sum = tu_read(total, NULL);
	cr_assert(listing && sum && strlen(sum) >= 64);

	/* Which files differ, for the message: each line is "HEX  PATH". */
	const cJSON *want = cJSON_GetObjectItemCaseSensitive(j, "fixture_files");
	char changed[8192] = "";
	for (char *line = listing, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		const char *path = line + 66;
		const char *had = str(want, path);
		if (!had || strncmp(had, line, 64) != 0)
			snprintf(changed + strlen(changed), sizeof changed - strlen(changed), " %s%s", path,
				 had ? "" : " (new)");
	}
	for (const cJSON *f = want ? want->child : NULL; f; f = f->next) {
		bool listed = false;
		for (int i = 0; i < n; i++)
			listed |= strcmp(files[i], f->string) == 0;
		if (!listed)
			snprintf(changed + strlen(changed), sizeof changed - strlen(changed), " %s (gone)", f->string);
	}
	const char *had = str(j, "fixture_sha256");
	cr_assert(had, "%s: the result has no fixture_sha256", r->name);
	cr_expect(strncmp(had, sum, 64) == 0 && !changed[0],
		  "%s: the committed result was made from other fixtures than %s holds (changed:%s): the fixture "
		  "generator changed since; remake the results with %s", r->name, fix, changed[0] ? changed : " none listed",
		  REMAKE);
	free(listing);
	free(sum);
	cJSON_Delete(j);
}

/* A logits comparison of a result: finite, every top-1 equal, max |diff| /
 * max |ref| within the bound. */
static void expect_within(const char *what, const cJSON *c, double bound)
{
	cr_assert(cJSON_IsObject(c), "%s: no comparison", what);
	const cJSON *finite = cJSON_GetObjectItemCaseSensitive(c, "finite");
	cr_expect(cJSON_IsTrue(finite), "%s: transformers' logits had NaN or infinite values", what);
	double rel = num(c, "rel"), row_rel = num(c, "row_rel"), n = num(c, "n"), top1 = num(c, "top1");
	cr_expect(isfinite(rel) && rel >= 0 && rel <= bound, "%s: max |diff| / max |ref| %g, bound %g", what, rel,
		  bound);
	/* Each row's scale is at most the largest |ref|, so a row's relative
	 * difference is at least the global one: anything else is a bad file. */
	cr_expect(isfinite(row_rel) && row_rel >= rel, "%s: the largest row-relative difference %g is below rel %g",
		  what, row_rel, rel);
	cr_expect(n > 0 && top1 == n, "%s: top-1 agrees on %g of %g positions", what, top1, n);
}

ParameterizedTest(struct result_param *r, references, passes_within_its_bound)
{
	cJSON *j = load_result(r->name);
	const char *error = str(j, "error");
	cr_expect(!error, "%s: hf_check could not run it: %s", r->name, error ? error : "");
	cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "pass")), "%s: the result says fail", r->name);
	const cJSON *tf = cJSON_GetObjectItemCaseSensitive(j, "transformers");
	const char *version = str(tf, "version"), *commit = str(tf, "commit");
	cr_expect(version && strcmp(version, "5.15.0") == 0, "%s: made with transformers %s, not 5.15.0", r->name,
		  version ? version : "(none)");
	cr_expect(commit && strlen(commit) == 40, "%s: the transformers commit is not recorded", r->name);
	double bound = num(cJSON_GetObjectItemCaseSensitive(j, "bound"), "rel");
	cr_expect(bound > 0 && bound <= 1e-5, "%s: bound %g; hf_check's is 1e-5 and a result may not loosen it",
		  r->name, bound);
	const cJSON *logits = cJSON_GetObjectItemCaseSensitive(j, "logits");
	expect_within(r->name, logits, bound);
	cr_expect_eq(num(logits, "n"), num(j, "n_tokens"), "%s: logits compared at %g positions of %g tokens", r->name,
		     num(logits, "n"), num(j, "n_tokens"));

	const cJSON *mtp = cJSON_GetObjectItemCaseSensitive(j, "mtp");
	const char *status = str(mtp, "status");
	cr_assert(status, "%s: no MTP status", r->name);
	char what[160];
	snprintf(what, sizeof what, "%s MTP head", r->name);
	if (!strcmp(status, "compared") || !strcmp(status, "compared_with_override")) {
		expect_within(what, cJSON_GetObjectItemCaseSensitive(mtp, "logits"), bound);
		cr_expect_eq(num(cJSON_GetObjectItemCaseSensitive(mtp, "logits"), "n"), num(j, "n_tokens") - 1,
			     "%s: compared at %g rows of %g tokens", what,
			     num(cJSON_GetObjectItemCaseSensitive(mtp, "logits"), "n"), num(j, "n_tokens"));
		if (!strcmp(status, "compared_with_override"))
			cr_expect(str(mtp, "override") && str(mtp, "as_built"),
				  "%s: compared with an override that the result does not describe", what);
	} else {
		cr_expect(!strcmp(status, "not_in_transformers") || !strcmp(status, "no_reference") ||
			  !strcmp(status, "transformers_cannot_load"), "%s: unknown status %s", what, status);
		const char *why = str(mtp, "reason");
		cr_expect(why && strlen(why) > 20, "%s: %s without a reason", what, status);
		cr_expect(!cJSON_GetObjectItemCaseSensitive(mtp, "logits"), "%s: %s, yet logits are given", what, status);
	}
	cJSON_Delete(j);
}

/* What a result says of itself for the family check: its fixture, its
 * checkpoint's model_type (config.json's) and the family that selects. */
struct family_result {
	char name[96];
	char model_type[64];
	enum model_arch arch;
	bool known;
};

static int family_results(struct family_result *out, int max)
{
	int n = 0, count = 0;
	char **stems = result_names(&n);
	for (int i = 0; i < n; i++) {
		cJSON *j = load_result(stems[i]);
		if (count < max) {
			struct family_result *r = &out[count++];
			const char *mt = str(j, "model_type"), *t;
			snprintf(r->name, sizeof r->name, "%s", stems[i]);
			snprintf(r->model_type, sizeof r->model_type, "%s", mt ? mt : "");
			r->known = false;
			for (int k = 0; mt && (t = model_config_type_at(k, &r->arch)); k++)
				if (strcmp(t, mt) == 0) {
					r->known = true;
					break;
				}
		}
		cJSON_Delete(j);
		free(stems[i]);
	}
	free(stems);
	return count;
}

Test(references, every_family_has_a_result)
{
	static struct family_result res[256];
	int n = family_results(res, 256);
	for (int i = 0; i < n; i++)
		cr_expect(res[i].known, "%s: model_type \"%s\" is not one the engine parses", res[i].name,
			  res[i].model_type);
	enum model_arch a, b;
	const char *t;
	for (int k = 0; (t = model_config_type_at(k, &a)); k++) {
		int first = 0;
		while (model_config_type_at(first, &b) && b != a)
			first++;
		if (first == k) {
			/* One line per family, at its first model_type. */
			char spellings[256] = "", which[2048] = "";
			for (int i = 0; (t = model_config_type_at(i, &b)); i++)
				if (b == a)
					snprintf(spellings + strlen(spellings), sizeof spellings - strlen(spellings),
						 "%s%s", spellings[0] ? " / " : "", t);
			int have = 0;
			for (int i = 0; i < n; i++)
				if (res[i].known && res[i].arch == a) {
					have++;
					snprintf(which + strlen(which), sizeof which - strlen(which), " %s", res[i].name);
				}
			cr_expect(have > 0, "family %s has no result in " RESULTS ": give it a fixture in "
				  "tools/make_fixtures.sh and remake the results with %s", spellings, REMAKE);
			if (have)
				cr_log_info("family %s: %d results:%s", spellings, have, which);
		}
		t = model_config_type_at(k, &a);
		bool own = false, family = false;
		for (int i = 0; i < n; i++) {
			own |= strcmp(res[i].model_type, t) == 0;
			family |= res[i].known && res[i].arch == a;
		}
		/* Said, not warned: Criterion exits 1 after any warning, which
		 * tools/run_tests.py counts as the binary failing. */
		if (!own && family)
			cr_log_info("model_type %s has no fixture of its own: only its family's other layout is checked", t);
	}
}

Test(references, every_fixture_has_a_result)
{
	char hf[PATH_MAX];
	snprintf(hf, sizeof hf, "%s/hf", tu_fixtures());
	DIR *d = opendir(hf);
	if (!d)
		cr_skip_test("no fixtures in %s (run tools/make_fixtures.sh %s)", hf, tu_fixtures());
	int fixtures = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/" RESULTS "/%s.json", tu_repo(), e->d_name);
		fixtures++;
		cr_expect(access(path, F_OK) == 0, "fixture hf/%s has no result %s: remake the results with %s",
			  e->d_name, path, REMAKE);
	}
	closedir(d);
	cr_expect_gt(fixtures, 0, "%s holds no fixture", hf);
	cr_log_info("%d fixtures in %s, each with a result", fixtures, hf);
}
