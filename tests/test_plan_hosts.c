/*
 * test_plan_hosts — `colibri plan --hosts FILE` (planner/plan_hosts.h):
 * - plan_hosts_estimate on a synthetic model against the per-token
 *   formulas of plan_hosts.h written out again here (misses of the share
 *   that does not fit, slowest rank's disk, network by placement_net_s);
 * - the command on a converted fixture: --placement 1,1 splits the experts
 *   evenly whatever the disks; a "profile" entry takes its bandwidth from
 *   the profile file's point for this model, so 0.5 GB/s beside 1.5 GB/s
 *   gives a 1:3 split; and a clear error, naming the file, for bad JSON, a
 *   missing field, weights that do not match the rank count, a profile that
 *   does not exist and one that holds two disks without "disk".
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>

#include "planner/placement.h"
#include "planner/plan_hosts.h"
#include "tests/cli_util.h"
#include "tests/test_util.h"

static char scratch[4096];
static char model[4200];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(plan_hosts, .init = setup, .fini = teardown, .timeout = 120);

/* Converts the glm4_moe fixture (a dense layer, MoE layers, an MTP layer)
 * into scratch/glm. */
static void convert_model(void)
{
	snprintf(model, sizeof model, "%s/glm", scratch);
	cr_assert_eq(tu_sh("'%s' convert --quiet --quant int4 '%s/hf/glm4_moe' '%s'", tu_colibri(), tu_fixtures(), model),
		     0, "convert glm4_moe failed");
}

/* Writes hosts text into scratch/name and returns the path (static). */
static const char *write_file(const char *name, const char *text)
{
	static char path[2][4400];
	static int which;
	char *p = path[which++ & 1];
	snprintf(p, sizeof path[0], "%s/%s", scratch, name);
	cr_assert_eq(tu_write(p, text, strlen(text)), 0, "cannot write %s", p);
	return p;
}

/* Runs `colibri plan --model M args`; returns its exit status, stdout in
 * *out and stderr in *err (malloc'd). */
static int plan(char **out, char **err, const char *args)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/plan.out", scratch);
	int rc = cli_run(scratch, path, "plan --model '%s' %s", model, args);
	*out = tu_read(path, NULL);
	*err = cli_read_err(path);
	cr_assert_not_null(*out);
	cr_assert_not_null(*err);
	return rc;
}

/* The "rank R host H: N experts" lines of a plan's text, into experts[]. */
static int rank_lines(const char *text, int *experts, int max)
{
	int n = 0;
	for (int r = 0; r < max; r++)
		experts[r] = -1;
	for (const char *line = text; line && *line;) {
		int r, e;
		char h[64];
		if (sscanf(line, "rank %d host %63[^:]: %d experts", &r, h, &e) == 3 && r >= 0 && r < max) {
			experts[r] = e;
			n++;
		}
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	return n;
}

/* A failing plan: non-zero status, and stderr holding every one of the
 * NULL-terminated strings. */
static void expect_error(const char *args, const char *const *want)
{
	char *out, *err;
	int rc = plan(&out, &err, args);
	cr_expect_neq(rc, 0, "plan %s succeeded:\n%s", args, out);
	for (const char *const *w = want; *w; w++)
		cr_expect(strstr(err, *w) != NULL, "plan %s: stderr lacks \"%s\":\n%s", args, *w, err);
	free(out);
	free(err);
}

Test(plan_hosts, estimate_matches_the_formulas)
{
	/* 4 MoE rows of 8 experts (row 1 dense), top-2, 1 MiB records; rank 1
	 * holds half its experts in RAM, rank 0 all of its own. */
	enum { ROWS = 5, E = 8, K = 2 };
	const uint64_t rec = 1 << 20, fixed = 100 << 20;
	uint64_t records[ROWS] = { rec, 0, rec, rec, rec };
	struct plan_hosts h = { .n = 2 };
	double w[2] = { 1, 3 };
	uint8_t owner[ROWS * E];
	placement_build(owner, ROWS, E, 2, w);
	int own[2] = { 0 };
	for (int l = 0; l < ROWS; l++)
		for (int e = 0; e < E; e++)
			own[owner[l * E + e]] += records[l] != 0;
	cr_assert_eq(own[0] + own[1], 4 * E);
	h.hosts[0] = (struct plan_host){ .host = "a", .ram_bytes = fixed + own[0] * rec, .disk_gbps = 1.0,
					 .net_gbps = 1.25, .rtt_us = 50 };
	h.hosts[1] = (struct plan_host){ .host = "b", .ram_bytes = fixed + own[1] * rec / 2, .disk_gbps = 2.0,
					 .net_gbps = 0.5, .rtt_us = 200 };
	struct plan_hosts_model m = { .n_rows = ROWS, .n_experts = E, .top_k = K, .hidden = 64,
				      .record_bytes = records, .fixed_bytes = fixed, .compute_s = 0.001 };
	struct plan_hosts_estimate est;
	plan_hosts_estimate(&est, &h, owner, &m);
	cr_expect_eq(est.n_moe_layers, 4);
	cr_expect_eq(est.ranks[0].experts, own[0]);
	cr_expect_eq(est.ranks[1].experts, own[1]);
	cr_expect_float_eq(est.ranks[0].miss, 0.0, 1e-12);
	cr_expect_float_eq(est.ranks[1].miss, 0.5, 1e-12);
	/* Rank 1 reads K experts per layer in proportion to its share, half of
	 * them missing, at 2 GB/s. */
	double bytes1 = K * (double)rec * own[1] / E * 0.5;
	cr_expect_float_eq(est.ranks[1].disk_s, bytes1 / 2e9, 1e-12);
	cr_expect_float_eq(est.disk_s, bytes1 / 2e9, 1e-12);
	cr_expect_eq(est.slowest, 1);
	double share = (double)own[1] / (4 * E);
	cr_expect_float_eq(est.share_remote, share, 1e-12);
	/* The slowest link: rank 1's 200 us at 0.5 GB/s. */
	double row = 64 * 4.0, net = 4 * (200e-6 + (row + K * 8.0 + K * share * row) / 0.5e9);
	cr_expect_float_eq(est.net_s, net, 1e-12);
	cr_expect_float_eq(est.token_s, bytes1 / 2e9 + 0.001 + net, 1e-12);
	cr_expect_float_eq(est.tok_s, 1 / est.token_s, 1e-9);
	/* Rank 0 alone holds own[0] of the 32 experts in RAM and reads the rest at 1 GB/s. */
	double miss0 = 1.0 - (double)own[0] / (4 * E);
	cr_expect_float_eq(est.single_miss, miss0, 1e-12);
	cr_expect_float_eq(est.single_disk_s, 4 * K * (double)rec * miss0 / 1e9, 1e-12);
	/* A rank without a disk bandwidth that has to read makes the speed unknown. */
	h.hosts[1].disk_gbps = 0;
	plan_hosts_estimate(&est, &h, owner, &m);
	cr_expect_lt(est.ranks[1].disk_s, 0);
	cr_expect_lt(est.tok_s, 0);
}

Test(plan_hosts, placement_1_1_splits_evenly)
{
	convert_model();
	const char *hosts = write_file("hosts.json", "[{\"host\":\"a\",\"ram\":\"1G\",\"disk_gbps\":1.0},"
						     "{\"host\":\"b\",\"ram\":1073741824,\"disk_gbps\":3.0}]");
	char args[4600], *out, *err;
	snprintf(args, sizeof args, "--hosts '%s' --placement 1,1", hosts);
	cr_assert_eq(plan(&out, &err, args), 0, "plan --placement 1,1 failed:\n%s", err);
	int experts[2];
	cr_assert_eq(rank_lines(out, experts, 2), 2, "no rank lines in:\n%s", out);
	cr_expect_eq(experts[0], experts[1], "--placement 1,1 gave %d and %d experts", experts[0], experts[1]);
	cr_expect(strstr(out, "placement: weights") != NULL, "the rule is not named:\n%s", out);
	free(out);
	free(err);
	/* The same in --json, and every routed expert of the model is placed once. */
	snprintf(args, sizeof args, "--hosts '%s' --placement 1,1 --json", hosts);
	cr_assert_eq(plan(&out, &err, args), 0, "plan --json failed:\n%s", err);
	cJSON *j = cJSON_Parse(out);
	cr_assert_not_null(j, "not JSON:\n%s", out);
	const cJSON *ranks = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "hosts"), "ranks");
	cr_assert_eq(cJSON_GetArraySize(ranks), 2);
	double e0 = cli_json_num(cJSON_GetArrayItem(ranks, 0), "experts");
	double e1 = cli_json_num(cJSON_GetArrayItem(ranks, 1), "experts");
	cr_expect_eq(e0, experts[0]);
	cr_expect_eq(e0 + e1, cli_json_num(j, "model.moe_layers") * cli_json_num(j, "model.n_experts"));
	cr_expect_gt(cli_json_num(j, "hosts.per_token.network_s"), 0);
	cJSON_Delete(j);
	free(out);
	free(err);
}

Test(plan_hosts, profile_gives_the_bandwidth)
{
	convert_model();
	/* One point per block size from 4 KiB to 4 MiB, so whatever the
	 * model's frame, the nearest point reads 0.5 GB/s. */
	char prof[8192];
	int w = snprintf(prof, sizeof prof, "{\"version\":1,\"disks\":{\"259:0\":{\"name\":\"nvme0n1\",\"points\":[");
	for (int i = 0; i <= 10; i++)
		w += snprintf(prof + w, sizeof prof - (size_t)w,
			      "%s{\"block_bytes\":%d,\"depth\":8,\"buffered\":false,\"seconds\":1,\"gbps\":0.5,"
			      "\"iops\":1000,\"p50_us\":100,\"p99_us\":200,\"measured\":\"2026-01-01T00:00:00Z\"}",
			      i ? "," : "", 4096 << i);
	snprintf(prof + w, sizeof prof - (size_t)w, "]}}}\n");
	const char *ppath = write_file("disks.json", prof);
	char hosts_text[5000];
	snprintf(hosts_text, sizeof hosts_text,
		 "[{\"host\":\"a\",\"ram\":\"1G\",\"profile\":\"%s\"},{\"host\":\"b\",\"ram\":\"1G\",\"disk_gbps\":1.5}]",
		 ppath);
	const char *hosts = write_file("hosts.json", hosts_text);
	char args[4600], *out, *err;
	snprintf(args, sizeof args, "--hosts '%s' --json", hosts);
	cr_assert_eq(plan(&out, &err, args), 0, "plan with a profile failed:\n%s", err);
	cJSON *j = cJSON_Parse(out);
	cr_assert_not_null(j, "not JSON:\n%s", out);
	const cJSON *ranks = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "hosts"), "ranks");
	const cJSON *r0 = cJSON_GetArrayItem(ranks, 0), *r1 = cJSON_GetArrayItem(ranks, 1);
	cr_assert_not_null(r1);
	cr_expect_float_eq(cli_json_num(r0, "disk_gbps"), 0.5, 1e-9);
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "disk_source")), "profile");
	double e0 = cli_json_num(r0, "experts"), e1 = cli_json_num(r1, "experts");
	/* Stride scheduling: every layer's count within one of E * w / sum(w). */
	double layers = cli_json_num(j, "model.moe_layers"), n = cli_json_num(j, "model.n_experts");
	cr_expect(fabs(e0 - layers * n * 0.25) <= layers, "%g experts on the 0.5 GB/s rank, not about %g", e0,
		  layers * n * 0.25);
	cr_expect_eq(e0 + e1, layers * n);
	/* --placement auto weighs RAM too; every expert fits both ranks, so
	 * the disks alone decide. */
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "hosts"), "placement")),
			 "disk bandwidth and RAM");
	cJSON_Delete(j);
	free(out);
	free(err);
}

Test(plan_hosts, bad_json)
{
	convert_model();
	const char *hosts = write_file("bad.json", "[{\"host\":\"a\",\"ram\":\"1G\",");
	char args[4600];
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "malformed JSON", NULL });
	hosts = write_file("obj.json", "{\"host\":\"a\"}");
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "array", NULL });
	hosts = write_file("empty.json", "[]");
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "0 entries", NULL });
	snprintf(args, sizeof args, "--hosts '%s/absent.json'", scratch);
	expect_error(args, (const char *const[]){ "absent.json", "cannot read", NULL });
}

Test(plan_hosts, missing_field)
{
	convert_model();
	const char *hosts = write_file("hosts.json", "[{\"host\":\"a\",\"ram\":\"1G\",\"disk_gbps\":1},"
						     "{\"host\":\"b\",\"disk_gbps\":1}]");
	char args[4600];
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "entry 1", "\"ram\"", NULL });
	hosts = write_file("hosts2.json", "[{\"host\":\"a\",\"ram\":\"1G\"}]");
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "entry 0", "disk_gbps", "profile", NULL });
	hosts = write_file("hosts3.json", "[{\"host\":\"a\",\"ram\":\"lots\",\"disk_gbps\":1}]");
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "entry 0", "\"ram\"", "lots", NULL });
}

Test(plan_hosts, weights_must_match_the_ranks)
{
	convert_model();
	const char *hosts = write_file("hosts.json", "[{\"host\":\"a\",\"ram\":\"1G\",\"disk_gbps\":1},"
						     "{\"host\":\"b\",\"ram\":\"1G\",\"disk_gbps\":1}]");
	char args[4600];
	snprintf(args, sizeof args, "--hosts '%s' --placement 1,2,3", hosts);
	expect_error(args, (const char *const[]){ hosts, "3 weights for 2 ranks", NULL });
	snprintf(args, sizeof args, "--hosts '%s' --placement 1,-2", hosts);
	expect_error(args, (const char *const[]){ "--placement", NULL });
}

Test(plan_hosts, profile_errors)
{
	convert_model();
	char text[5000], args[4600], prof[4400];
	snprintf(prof, sizeof prof, "%s/nowhere/disks.json", scratch);
	snprintf(text, sizeof text, "[{\"host\":\"a\",\"ram\":\"1G\",\"profile\":\"%s\"}]", prof);
	const char *hosts = write_file("hosts.json", text);
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ hosts, "entry 0", prof, "cannot read the disk profile", NULL });
	/* Two disks and no "disk" to choose one. */
	static const char pt[] = "{\"block_bytes\":65536,\"depth\":8,\"gbps\":1.0}";
	char two[1024];
	snprintf(two, sizeof two, "{\"version\":1,\"disks\":{\"8:0\":{\"points\":[%s]},\"8:16\":{\"points\":[%s]}}}", pt,
		 pt);
	const char *tpath = write_file("two.json", two);
	snprintf(text, sizeof text, "[{\"host\":\"a\",\"ram\":\"1G\",\"profile\":\"%s\"}]", tpath);
	hosts = write_file("hosts.json", text);
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	expect_error(args, (const char *const[]){ tpath, "2 disks", "\"disk\"", NULL });
	/* Naming one of them works. */
	snprintf(text, sizeof text, "[{\"host\":\"a\",\"ram\":\"1G\",\"profile\":\"%s\",\"disk\":\"8:16\"}]", tpath);
	hosts = write_file("hosts.json", text);
	snprintf(args, sizeof args, "--hosts '%s'", hosts);
	char *out, *err;
	cr_expect_eq(plan(&out, &err, args), 0, "plan with \"disk\" failed:\n%s", err);
	free(out);
	free(err);
}
