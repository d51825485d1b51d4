/*
 * test_files — base/files: file_write_atomic publishes whole files only,
 * also when several processes save the same path at once (two runs of one
 * model saving its usage.json, or the tests sharing a cached container):
 * the file is always exactly one writer's bytes, and no temporary file is
 * left behind. With one fixed PATH.tmp the writers truncated and
 * interleaved each other's temporary file and renamed the mix.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/wait.h>

#include "base/error.h"
#include "base/files.h"
#include "tests/test_util.h"

static char ws[PATH_MAX];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(files, .init = setup, .fini = teardown);

#define WRITERS 6
#define ROUNDS 25
#define BYTES (256 * 1024)

Test(files, concurrent_atomic_writes_never_mix)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/usage.json", ws);
	pid_t pids[WRITERS];
	for (int w = 0; w < WRITERS; w++) {
		pids[w] = fork();
		cr_assert_geq(pids[w], 0);
		if (pids[w] == 0) {
			/* Writer w's bytes: its number in every byte. */
			char *buf = malloc(BYTES);
			memset(buf, 'a' + w, BYTES);
			int bad = 0;
			for (int r = 0; r < ROUNDS; r++)
				bad |= file_write_atomic(path, buf, BYTES) != 0;
			_exit(bad);
		}
	}
	for (int w = 0; w < WRITERS; w++) {
		int st;
		cr_assert_eq(waitpid(pids[w], &st, 0), pids[w]);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d failed", w);
	}
	size_t len;
	char *got = tu_read(path, &len);
	cr_assert_not_null(got);
	cr_assert_eq(len, BYTES, "the file holds %zu bytes, a writer wrote %d", len, BYTES);
	for (size_t i = 1; i < len; i++)
		cr_assert_eq(got[i], got[0], "byte %zu is writer %d's, byte 0 writer %d's", i, got[i] - 'a',
			     got[0] - 'a');
	free(got);
	/* Nothing but the file itself is left. */
	DIR *d = opendir(ws);
	cr_assert_not_null(d);
	int entries = 0;
	for (struct dirent *e; (e = readdir(d));)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			cr_expect(++entries == 1 && !strcmp(e->d_name, "usage.json"), "left behind: %s", e->d_name);
	closedir(d);
}

Test(files, failed_write_names_the_file_and_leaves_nothing)
{
	char path[PATH_MAX + 32];
	/* A folder where the file should go: the rename fails. */
	snprintf(path, sizeof path, "%s/taken", ws);
	cr_assert_eq(mkdir(path, 0755), 0);
	error_clear();
	cr_assert_neq(file_write_atomic(path, "x", 1), 0);
	cr_expect(strstr(error_message(), path), "the message does not name %s: %s", path, error_message());
	cr_assert_eq(tu_sh("ls -a '%s' | grep -q 'taken.tmp'", ws), 1, "a temporary file is left in %s", ws);
	error_clear();
}
