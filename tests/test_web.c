/*
 * test_web — the web dashboard of `colibri serve` (engine/serve/web/,
 * docs/DASHBOARD.md) in a real browser: a server on the qwen3_moe_tok
 * fixture (tests/serve_util.h) with --stats-json and --ram min (experts
 * come and go, so the disk card moves all along), and headless Chromium
 * driven by tests/web/dashboard.mjs (puppeteer-core from tools/node_modules),
 * which checks that the page loads without console errors, that state
 * events arrive, that a chat answer streams and Stop ends one, that the
 * runtime panel's numbers equal /metrics, that the throughput card shows
 * the decode rate while an answer streams and says idle otherwise, that the
 * disk card's "since start" never falls (issue 39, item 7), and that
 * hovering the expert map names the cell. This file then stops the server
 * and checks that the routed count of every map cell the page drew equals
 * the expert_usage of the --stats-json report: the map shows exactly the
 * experts the run used. Screenshots go to BUILD/test-artifacts/web/ (the
 * README's picture is tools/dashboard_shot.sh's). Skipped with a reason
 * where node, Chromium (COLIBRI_CHROMIUM, else chromium in PATH) or
 * puppeteer-core is missing. The suite runs it against build/colibri and
 * build-asan/colibri.
 */
#include "tests/serve_util.h"

TestSuite(web, .init = setup, .fini = teardown);

/* The Chromium binary into out: COLIBRI_CHROMIUM, else chromium in PATH.
 * Returns 1, 0 when there is none, -1 when COLIBRI_CHROMIUM is not executable. */
static int chromium_path(char *out, size_t n)
{
	const char *env = getenv("COLIBRI_CHROMIUM");
	if (env && *env) {
		snprintf(out, n, "%s", env);
		return access(out, X_OK) == 0 ? 1 : -1;
	}
	FILE *p = popen("command -v chromium 2>/dev/null", "r");
	if (!p)
		return 0;
	out[0] = 0;
	if (!fgets(out, (int)n, p))
		out[0] = 0;
	pclose(p);
	out[strcspn(out, "\n")] = 0;
	return out[0] != 0;
}

/* BUILD/test-artifacts/web for the test binary BUILD/tests/test_web. */
static void artifacts_dir(char *out, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[len > 0 ? len : 0] = 0;
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
	}
	snprintf(out, n, "%s/test-artifacts/web", exe[0] ? exe : "build");
}

/* The alarm's way out: the server must not outlive a test that hangs. */
static volatile pid_t web_server_pid;

static void web_alarm(int sig)
{
	if (web_server_pid > 0)
		kill(web_server_pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Every cell of the map the page drew (map.json) against expert_usage: per
 * layer an array of per-expert routed counts, null for a layer without
 * experts. The map's rows are exactly the layers with experts. */
static void expect_map_matches_usage(const cJSON *map, const cJSON *usage)
{
	cr_assert(cJSON_IsArray(usage), "the --stats-json report has no expert_usage array");
	int rows = (int)num_at(map, "layers"), experts = (int)num_at(map, "experts");
	const cJSON *ids = at(map, "layer_ids"), *routed = at(map, "routed");
	int with_experts = 0, used_map = 0, used_report = 0;
	for (int l = 0; l < cJSON_GetArraySize(usage); l++) {
		const cJSON *u = cJSON_GetArrayItem(usage, l);
		int row = -1;
		for (int r = 0; r < rows; r++)
			if ((int)cJSON_GetArrayItem(ids, r)->valuedouble == l)
				row = r;
		if (cJSON_IsNull(u)) {
			cr_expect_eq(row, -1, "layer %d has no experts in expert_usage but is row %d of the map", l, row);
			continue;
		}
		cr_assert(cJSON_IsArray(u), "expert_usage[%d] is neither an array nor null", l);
		with_experts++;
		cr_expect_neq(row, -1, "layer %d has experts in expert_usage but no row in the map", l);
		if (row < 0)
			continue;
		int n = cJSON_GetArraySize(u);
		cr_expect_leq(n, experts, "layer %d: %d experts in expert_usage, %d columns in the map", l, n, experts);
		const cJSON *cells = cJSON_GetArrayItem(routed, row);
		for (int e = 0; e < experts; e++) {
			double want = e < n ? cJSON_GetArrayItem(u, e)->valuedouble : 0;
			double got = cJSON_GetArrayItem(cells, e)->valuedouble;
			cr_expect_eq(got, want, "layer %d expert %d: the map shows routed %.0f, expert_usage says %.0f", l, e,
				     got, want);
			used_map += got > 0;
			used_report += want > 0;
		}
	}
	cr_expect_eq(with_experts, rows, "%d layers with experts in expert_usage, %d rows in the map", with_experts, rows);
	cr_expect_gt(used_report, 0, "expert_usage names no expert used after three chats");
	cr_expect_eq(used_map, used_report, "the map shows %d used experts, expert_usage %d", used_map, used_report);
}

Test(web, dashboard_in_chromium)
{
	NEED_FIXTURE();
	char chromium[PATH_MAX], pkg[PATH_MAX + 64];
	if (tu_sh("node --version >/dev/null 2>&1") != 0)
		cr_skip_test("node is missing (./setup.sh installs nodejs)");
	int found = chromium_path(chromium, sizeof chromium);
	if (found < 0)
		cr_skip_test("COLIBRI_CHROMIUM=%s is not an executable", chromium);
	if (found == 0)
		cr_skip_test("no Chromium: COLIBRI_CHROMIUM unset and no chromium in PATH (./setup.sh installs Debian's chromium)");
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/puppeteer-core/package.json", tu_repo());
	if (access(pkg, F_OK) != 0)
		cr_skip_test("puppeteer-core is missing (cd tools && npm install)");

	/* The browser run takes about 10 s optimised; the limit is for a hang. */
	signal(SIGALRM, web_alarm);
	alarm(110);
	char art[PATH_MAX], stats[PATH_MAX + 32], out[PATH_MAX + 32];
	artifacts_dir(art, sizeof art);
	cr_assert_eq(tu_sh("rm -rf '%s' && mkdir -p '%s'", art, art), 0);
	snprintf(stats, sizeof stats, "%s/stats.json", ws);
	snprintf(out, sizeof out, "%s/web.out", ws);
	struct srv s;
	srv_start(&s, "--ctx 2048 --ram min --stats-json '%s'", stats);
	web_server_pid = s.pid;
	int rc = tu_sh("timeout -s TERM 90 node '%s/tests/web/dashboard.mjs' http://127.0.0.1:%d '%s' '%s' >'%s' 2>&1",
		       tu_repo(), s.port, art, chromium, out);
	char *log = tu_read(out, NULL);
	cr_expect_eq(rc, 0, "tests/web/dashboard.mjs (artefacts in %s):\n%s", art, log ? log : "");
	cr_expect(log && strstr(log, "all checks passed"), "%s", log ? log : "");
	free(log);
	cr_assert_eq(srv_stop(&s), 0, "colibri serve did not stop cleanly");
	web_server_pid = 0;
	alarm(0);
	if (rc != 0)
		return;

	char map_path[PATH_MAX + 16];
	snprintf(map_path, sizeof map_path, "%s/map.json", art);
	cJSON *map = cli_json_read(map_path), *report = cli_json_read(stats);
	expect_map_matches_usage(map, at(report, "expert_usage"));
	cJSON_Delete(map);
	cJSON_Delete(report);
}
