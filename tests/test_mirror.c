/*
 * test_mirror — `colibri mirror` end to end: a copy is written, verified and
 * registered (also partially, --layers); reads are striped over it with the
 * logits bit-identical to the unmirrored run; a corrupted or missing mirror
 * is taken out of rotation with a warning and the logits stay the same;
 * a primary expert file truncated or deleted is served by a whole mirror
 * with a warning and the same logits, and without one is the old error;
 * a new mirror of a damaged primary is copied from a whole mirror;
 * --verify catches a corrupted copy naming the file; --remove unregisters;
 * mirroring onto the model's own folder is refused; a disk without a saved
 * profile is measured once after mirroring, so stripes follow bandwidth;
 * temporary files of a killed mirror are reported by doctor and removed by
 * the next mirror run.
 */
#include <criterion/criterion.h>

#include "tests/fixture_cache.h"
#include "tests/test_util.h"

static char scratch[4096], model[4200], mirror[4200], tokens[1024];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
	snprintf(model, sizeof model, "%s/model", scratch);
	snprintf(mirror, sizeof mirror, "%s/mirror", scratch);
	/* A private copy: each test registers mirrors in its manifest. */
	fc_container_copy(model, "hf/qwen3_moe", "--quant int8");
	char path[4200];
	snprintf(path, sizeof path, "%s/ref/qwen3_moe.tokens", tu_fixtures());
	char *t = tu_read(path, NULL);
	cr_assert_not_null(t);
	t[strcspn(t, "\r\n")] = 0;
	snprintf(tokens, sizeof tokens, "%s", t);
	free(t);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(mirror, .init = setup, .fini = teardown);

/* Logits of the model with extra options; the caller frees. */
static float *logits(const char *name, const char *extra, size_t *len)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/%s.f32", scratch, name);
	cr_assert_eq(tu_sh("'%s' logits --model '%s' --tokens %s --out '%s' --ram min --no-pin %s 2>'%s.err'",
			   tu_colibri(), model, tokens, out, extra, out), 0, "logits %s failed", name);
	float *l = (float *)tu_read(out, len);
	cr_assert_not_null(l);
	return l;
}

static bool err_has(const char *name, const char *what)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/%s.f32.err", scratch, name);
	char *e = tu_read(path, NULL);
	bool has = e && strstr(e, what);
	free(e);
	return has;
}

Test(mirror, striped_reads_same_logits)
{
	size_t n0, n1;
	float *base = logits("base", "", &n0);
	cr_assert_eq(tu_sh("'%s' mirror --quiet --no-probe --model '%s' --to '%s'", tu_colibri(), model, mirror), 0);
	cr_assert_eq(tu_sh("grep -q '\"mirrors\"' '%s/manifest.json'", model), 0, "mirror not registered");
	cr_assert_eq(tu_sh("cmp -s '%s/experts/layer-000.bin' '%s/experts/layer-000.bin'", model, mirror), 0);
	float *l = logits("mirrored", "--stats", &n1);
	cr_assert_eq(n0, n1);
	cr_expect_eq(memcmp(base, l, n0), 0, "logits differ with a mirror");
	cr_expect(err_has("mirrored", "copies:"), "no per-copy statistics with a mirror");
	free(l);

	/* Zero the mirror's layer 0 (same size, every record bad): whichever
	 * records the stripe order sends there fail their checksum, the copy
	 * leaves rotation, and the logits stay the same. */
	cr_assert_eq(tu_sh("f='%s/experts/layer-000.bin'; dd if=/dev/zero of=\"$f\" bs=$(stat -c %%s \"$f\") count=1 conv=notrunc status=none",
			   mirror), 0);
	l = logits("corrupt", "--stats", &n1);
	cr_expect_eq(memcmp(base, l, n0), 0, "logits differ with a corrupted mirror");
	cr_expect(err_has("corrupt", "OUT OF ROTATION") || err_has("corrupt", "rotation"),
		  "the bad mirror was not taken out of rotation");
	free(l);
	cr_expect_neq(tu_sh("'%s' mirror --quiet --model '%s' --verify 2>'%s/v.err'", tu_colibri(), model, scratch), 0,
		      "--verify passed a corrupted mirror");
	cr_expect_eq(tu_sh("grep -q 'layer-000.bin' '%s/v.err'", scratch), 0, "--verify does not name the file");

	/* A mirror that disappeared: a warning, the same logits. */
	cr_assert_eq(tu_sh("rm -rf '%s'", mirror), 0);
	l = logits("gone", "", &n1);
	cr_expect_eq(memcmp(base, l, n0), 0, "logits differ with a missing mirror");
	free(l);
	cr_expect_eq(tu_sh("'%s' mirror --model '%s' --to '%s' --remove", tu_colibri(), model, mirror), 0);
	cr_expect_neq(tu_sh("grep -q '\"mirrors\"' '%s/manifest.json'", model), 0, "mirror still registered");
	free(base);
}

/* Issue 40, defect 3: a short or missing primary expert file stopped
 * start-up even with a whole mirror of it registered. The mirror serves
 * that layer now, with a warning naming the file; a mirror that is short
 * too, or none, leaves the error as it was. */
Test(mirror, damaged_primary_served_by_mirror)
{
	size_t n0, n1;
	float *base = logits("base", "", &n0);
	char file[4300], out[4400], want[4500];
	snprintf(file, sizeof file, "%s/experts/layer-002.bin", model);
	snprintf(out, sizeof out, "%s/refused.err", scratch);
	snprintf(want, sizeof want, "%s: truncated: ", file);
	/* A short primary with no mirror, then with a short one: the old error. */
	for (int k = 0; k < 2; k++) {
		if (k == 0)
			cr_assert_eq(tu_sh("cp '%s' '%s/keep' && truncate -s 4096 '%s'", file, scratch, file), 0);
		else
			cr_assert_eq(tu_sh("mv '%s/keep' '%s' && '%s' mirror --quiet --no-probe --model '%s' --to '%s' "
					   "--layers 2 && cp '%s' '%s/keep' && truncate -s 4096 '%s' '%s/experts/layer-002.bin'",
					   scratch, file, tu_colibri(), model, mirror, file, scratch, file, mirror), 0);
		cr_expect_eq(tu_sh("'%s' logits --model '%s' --tokens %s --out '%s/x.f32' --ram min --no-pin 2>'%s'",
				   tu_colibri(), model, tokens, scratch, out), 1, "ran with %s", k ? "a short mirror" : "no mirror");
		char *e = tu_read(out, NULL);
		cr_assert_not_null(e);
		cr_expect(strstr(e, want), "not the primary's error: %s", e);
		free(e);
	}
	/* The mirror whole again, the primary short. */
	cr_assert_eq(tu_sh("cp '%s/keep' '%s/experts/layer-002.bin' && cp '%s/keep' '%s' && "
			   "truncate -s $(($(stat -c %%s '%s') / 2)) '%s'", scratch, mirror, scratch, file, file, file), 0);
	float *l = logits("truncated", "", &n1);
	cr_expect(n0 == n1 && memcmp(base, l, n0) == 0, "logits differ with the primary file truncated");
	free(l);
	cr_expect(err_has("truncated", "warning: primary copy 0 lacks 1 of 2 expert files") &&
		  err_has("truncated", file) && err_has("truncated", "truncated expert file") &&
		  err_has("truncated", "their mirrors serve those layers"), "no warning naming the file and the mirror");

	cr_assert_eq(unlink(file), 0);
	l = logits("deleted", "", &n1);
	cr_expect(n0 == n1 && memcmp(base, l, n0) == 0, "logits differ with the primary file deleted");
	free(l);
	cr_expect(err_has("deleted", file) && err_has("deleted", "their mirrors serve those layers"),
		  "no warning naming the deleted file");
	/* doctor: a warning naming the mirror and the copy to put back, not a
	 * failure to reconvert. */
	char doc[4400];
	snprintf(doc, sizeof doc, "%s/doctor.out", scratch);
	int st = tu_sh("'%s' doctor --model '%s' >'%s' 2>&1", tu_colibri(), model, doc);
	char *d = tu_read(doc, NULL);
	cr_assert_not_null(d);
	cr_expect(strstr(d, "missing: the mirror") && strstr(d, "serves that layer alone") && !strstr(d, "FAIL  files"),
		  "doctor on a deleted primary that a mirror serves (exit %d): %s", st, d);
	free(d);

	/* A new mirror of a deleted primary comes from the whole mirror, and
	 * so does one of a primary with a flipped byte; a layer that no
	 * mirror holds fails naming the damaged file, leaving nothing. */
	char m2[4300], m3[4300], m4[4300], log[4400];
	snprintf(m2, sizeof m2, "%s/m2", scratch);
	snprintf(m3, sizeof m3, "%s/m3", scratch);
	snprintf(m4, sizeof m4, "%s/m4", scratch);
	snprintf(log, sizeof log, "%s/m.err", scratch);
	cr_expect_eq(tu_sh("'%s' mirror --no-probe --model '%s' --to '%s' 2>'%s'", tu_colibri(), model, m2, log), 0,
		     "mirroring a deleted primary failed");
	cr_expect_eq(tu_sh("grep -q 'layer-002.bin copied from the mirror %s instead' '%s'", mirror, log), 0,
		     "no warning naming the mirror copied from");
	cr_expect_eq(tu_sh("cmp -s '%s/keep' '%s/experts/layer-002.bin' && cmp -s '%s/experts/layer-000.bin' "
			   "'%s/experts/layer-000.bin'", scratch, m2, model, m2), 0, "the new mirror's files differ");
	cr_assert_eq(tu_sh("cp '%s/keep' '%s' && printf '\\125' | dd of='%s' bs=1 seek=100 conv=notrunc status=none",
			   scratch, file, file), 0);
	cr_expect_eq(tu_sh("'%s' mirror --no-probe --model '%s' --to '%s' --layers 2 2>'%s'", tu_colibri(), model, m3,
			   log), 0, "mirroring a corrupted primary failed");
	cr_expect_eq(tu_sh("grep -q '%s: expert 0 (offset 0) does not match its checksum' '%s' && "
			   "grep -q 'layer-002.bin copied from the mirror' '%s' && "
			   "cmp -s '%s/keep' '%s/experts/layer-002.bin'", file, log, log, scratch, m3), 0,
		     "the corrupted primary was not named, or the copy not taken from the mirror");
	cr_assert_eq(tu_sh("f='%s/experts/layer-000.bin'; printf '\\125' | dd of=\"$f\" bs=1 seek=100 conv=notrunc "
			   "status=none && '%s' mirror --model '%s' --to '%s' --remove", model, tu_colibri(), model, m2), 0);
	cr_expect_eq(tu_sh("'%s' mirror --quiet --no-probe --model '%s' --to '%s' --layers 0 2>'%s'", tu_colibri(),
			   model, m4, log), 1, "a corrupted layer no mirror holds was copied");
	cr_expect_eq(tu_sh("grep -q '%s/experts/layer-000.bin: expert 0 (offset 0) does not match its checksum' '%s' && "
			   "! ls '%s/experts' | grep -q .", model, log, m4), 0, "wrong error, or files left in %s", m4);
	free(base);
}

Test(mirror, partial_and_refusals)
{
	cr_assert_eq(tu_sh("'%s' mirror --quiet --no-probe --model '%s' --to '%s' --layers 2", tu_colibri(), model, mirror), 0);
	cr_expect_neq(tu_sh("test -e '%s/experts/layer-000.bin'", mirror), 0, "layer 0 copied into a partial mirror");
	cr_expect_eq(tu_sh("test -e '%s/experts/layer-002.bin'", mirror), 0);
	cr_expect_eq(tu_sh("'%s' mirror --quiet --model '%s' --verify", tu_colibri(), model), 0);
	size_t n0, n1;
	float *a = logits("partial", "", &n0);
	cr_assert_eq(tu_sh("'%s' mirror --model '%s' --to '%s' --remove", tu_colibri(), model, mirror), 0);
	float *b = logits("unmirrored", "", &n1);
	cr_expect(n0 == n1 && memcmp(a, b, n0) == 0, "partial mirror changed the logits");
	free(a);
	free(b);
	cr_expect_neq(tu_sh("'%s' mirror --quiet --model '%s' --to '%s' 2>/dev/null", tu_colibri(), model, model), 0,
		      "mirroring onto the model itself was accepted");
	cr_expect_neq(tu_sh("'%s' mirror --quiet --model '%s' --to '%s/m2' --layers 1 2>/dev/null", tu_colibri(), model,
			    scratch), 0, "a dense layer was accepted for mirroring");
	/* An empty or malformed layer list copies and registers nothing. */
	const char *bad[] = { "", "2,", "2-", "3-2", "2,,3" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_neq(tu_sh("'%s' mirror --quiet --no-probe --model '%s' --to '%s/m3' --layers '%s' 2>'%s/l.err'",
				    tu_colibri(), model, scratch, bad[i], scratch), 0, "--layers '%s' accepted", bad[i]);
		cr_expect_eq(tu_sh("grep -q -- '--layers' '%s/l.err'", scratch), 0, "--layers '%s': no message", bad[i]);
		cr_expect_neq(tu_sh("test -e '%s/m3'", scratch), 0, "--layers '%s' left a mirror folder", bad[i]);
	}
	cr_expect_neq(tu_sh("grep -q '\"mirrors\"' '%s/manifest.json'", model), 0, "a bad --layers registered a mirror");
}

/* The disk profile that weighs the stripes is measured after mirroring when
 * none is saved, once (both copies share this test's disk), and not with
 * --no-probe. */
Test(mirror, measures_unprofiled_disks)
{
	char err[4400], cache[4200];
	snprintf(err, sizeof err, "%s/probe.err", scratch);
	snprintf(cache, sizeof cache, "%s/cache-a", scratch);
	cr_assert_eq(tu_sh("COLIBRI_CACHE_DIR='%s' '%s' mirror --quiet --no-probe --model '%s' --to '%s' 2>'%s'",
			   cache, tu_colibri(), model, mirror, err), 0);
	cr_expect_neq(tu_sh("test -e '%s/disks.json'", cache), 0, "--no-probe measured a disk");
	cr_assert_eq(tu_sh("'%s' mirror --model '%s' --to '%s' --remove", tu_colibri(), model, mirror), 0);
	cr_assert_eq(tu_sh("COLIBRI_CACHE_DIR='%s' '%s' mirror --quiet --model '%s' --to '%s' 2>'%s'", cache,
			   tu_colibri(), model, mirror, err), 0);
	char *e = tu_read(err, NULL);
	cr_assert_not_null(e);
	cr_expect(strstr(e, "measuring the disk of the model's expert files"), "no probe: %s", e);
	cr_expect_null(strstr(e, "measuring the disk of the mirror"), "same disk measured twice: %s", e);
	free(e);
	cr_expect_eq(tu_sh("grep -q '\"points\"' '%s/disks.json'", cache), 0, "no profile saved");
	/* The plan now reads the disk's bandwidth from the saved profile. */
	cr_expect_eq(tu_sh("COLIBRI_CACHE_DIR='%s' '%s' plan --model '%s' | grep -q 'profile of'", cache, tu_colibri(),
			   model), 0, "plan does not see the measured profile");
}

/* Temporary files that a killed `colibri mirror` leaves in the mirror
 * folder (experts/layer-LLL.bin.tmp of the model's expert files,
 * colibri-mirror.json.tmp-PID-N of file_write_atomic) are reported by doctor, which leaves them (a
 * mirror may be running), and removed by the next mirror run, also one
 * that copies another layer. Files of any other name stay. */
Test(mirror, leftovers_of_a_killed_mirror)
{
	cr_assert_eq(tu_sh("'%s' mirror --quiet --no-probe --model '%s' --to '%s' --layers 2", tu_colibri(), model, mirror), 0);
	const char *stale[] = { "experts/layer-000.bin.tmp", "colibri-mirror.json.tmp-4242-0" };
	const char *keep[] = { "experts/layer-000.bin.tmp.keep", "experts/layer-001.bin.tmp", "notes.tmp",
			       "experts/layer-000.bin" };
	char path[4400], out[4400];
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "%s/%s", mirror, stale[i]);
		cr_assert_eq(tu_write(path, "partial", 7), 0);
	}
	for (size_t i = 0; i < 4; i++) {
		snprintf(path, sizeof path, "%s/%s", mirror, keep[i]);
		cr_assert_eq(tu_write(path, "other", 5), 0);
	}
	snprintf(out, sizeof out, "%s/doctor.txt", scratch);
	tu_sh("'%s' doctor --model '%s' >'%s' 2>&1", tu_colibri(), model, out);
	char *text = tu_read(out, NULL);
	cr_assert_not_null(text);
	for (size_t i = 0; i < 2; i++) {
		char want[4500];
		snprintf(want, sizeof want, "warn  mirror: %s/%s is left over from an interrupted colibri mirror", mirror,
			 stale[i]);
		cr_expect(strstr(text, want), "doctor does not report %s:\n%s", stale[i], text);
		snprintf(path, sizeof path, "%s/%s", mirror, stale[i]);
		cr_expect_eq(access(path, F_OK), 0, "doctor removed %s", stale[i]);
	}
	for (size_t i = 0; i < 3; i++)
		cr_expect(!strstr(text, keep[i]), "doctor reports %s:\n%s", keep[i], text);
	free(text);

	snprintf(out, sizeof out, "%s/mirror.err", scratch);
	cr_assert_eq(tu_sh("'%s' mirror --no-probe --model '%s' --to '%s' --layers 2 2>'%s'", tu_colibri(), model, mirror,
			   out), 0);
	text = tu_read(out, NULL);
	cr_assert_not_null(text);
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "%s/%s", mirror, stale[i]);
		cr_expect_neq(access(path, F_OK), 0, "%s was not removed", stale[i]);
		cr_expect(strstr(text, path), "mirror does not say it removed %s: %s", path, text);
	}
	free(text);
	for (size_t i = 0; i < 4; i++) {
		snprintf(path, sizeof path, "%s/%s", mirror, keep[i]);
		cr_expect_eq(access(path, F_OK), 0, "%s was removed", keep[i]);
	}
}
