/*
 * test_shard — `colibri shard` (engine/model/shard.h) on a converted
 * fixture with an MTP layer (deepseek_v3: 16 experts, layer 0 dense, MoE
 * layers 1-2 and the MTP layer 3), and on OLMoE (8 experts, no MTP),
 * checked against the source container read here with its own manifest:
 * - every record a shard holds is byte for byte the source's record of the
 *   same expert, at the index its "records" list gives, and the shards of
 *   all ranks hold every expert exactly K times (--replicas K), each rank
 *   about its weight's share; resident.bin and config.json are the
 *   source's;
 * - `doctor --deep` passes on a shard and names the expert of a flipped
 *   byte; a single-process run is refused naming the shard;
 * - a damaged source record fails the command naming layer and expert, and
 *   nothing is left at the destination; so do a rank beyond the ranks, more
 *   replicas than ranks, --placement auto, an existing destination without
 *   --force, and sharding a shard;
 * - a shard's manifest whose records do not match its placement, or that
 *   lists records without a shard, is refused by every command;
 * - the expert store of a loaded shard delivers each held expert with the
 *   source's bytes (read by slot, not at e * record_bytes), refuses a
 *   request for an absent one with -ENOENT naming layer, expert and rank,
 *   and skips a prefetch of one; `colibri mirror` refuses a shard.
 * - `plan` on a shard counts the records it holds (expert_cache.frames_all).
 * The MPI runs over shards are tests/test_mpi.c's.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>

#include "base/error.h"
#include "engine/model/model.h"
#include "engine/model/shard.h"
#include "tests/cli_util.h"
#include "tests/fixture_cache.h"
#include "tests/test_util.h"

static char scratch[4096], model[4200];
static const char *source = model; /* what shard() shards */

/* The source: deepseek_v3 at int4, the build's shared container, which
 * shard only reads; a test that damages it takes a private copy
 * (model_copy). */
static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
	fc_container(model, sizeof model, "hf/deepseek_v3", "--quant int4");
	source = model;
}

/* Points model (and so source) at a private copy, scratch/model. */
static void model_copy(void)
{
	snprintf(model, sizeof model, "%s/model", scratch);
	fc_container_copy(model, "hf/deepseek_v3", "--quant int4");
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(shard, .init = setup, .fini = teardown, .timeout = 120);

/* Runs `colibri shard` with args into scratch/name; returns its status. */
static int shard(const char *name, const char *args)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/%s.out", scratch, name);
	return cli_run(scratch, out, "shard --quiet --model '%s' --to '%s/%s' %s", source, scratch, name, args);
}

static char *err_of(const char *name)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/%s.out", scratch, name);
	return cli_read_err(out);
}

/* XORs the byte at off of the file at path with mask. */
static void flip_bits(const char *path, long off, int mask)
{
	FILE *f = fopen(path, "r+b");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fseek(f, off, SEEK_SET), 0);
	int c = fgetc(f);
	cr_assert_neq(c, EOF, "%s: no byte at %ld", path, off);
	cr_assert_eq(fseek(f, off, SEEK_SET), 0);
	fputc(c ^ mask, f);
	cr_assert_eq(fclose(f), 0);
}

static cJSON *manifest_of(const char *dir)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	return cli_json_read(path);
}

static const cJSON *layers_of(const cJSON *m)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "experts"), "layers");
}

/* The records a shard's manifest lists over every layer; *empty (when
 * given) the layers that list none. */
static int records_in(const char *dir, int *empty)
{
	cJSON *m = manifest_of(dir);
	int n = 0;
	for (const cJSON *l = layers_of(m)->child; l; l = l->next) {
		int k = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(l, "records"));
		n += k;
		if (empty)
			*empty += k == 0;
	}
	cJSON_Delete(m);
	return n;
}

/* Bytes [off, off + n) of dir/rel, malloc'd. */
static char *read_at(const char *dir, const char *rel, long off, size_t n)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s missing", path);
	char *b = malloc(n);
	cr_assert_not_null(b);
	cr_assert_eq(fseek(f, off, SEEK_SET), 0);
	cr_assert_eq(fread(b, 1, n, f), n, "%s: short read at %ld", path, off);
	fclose(f);
	return b;
}

/* Shards all n ranks of source with opts and checks each against it;
 * counts how often each (layer entry, expert) is held into
 * held[layer entry * ne + expert] (at most 8 x 16) and each rank's records
 * into per_rank[n]. ne: the source's experts per layer. */
static void shard_all(const char *tag, int n, const char *opts, int ne, int *held, int *per_rank)
{
	cJSON *src = manifest_of(source);
	const cJSON *src_layers = layers_of(src);
	int n_layers = cJSON_GetArraySize(src_layers);
	cr_assert(n_layers >= 2 && n_layers <= 8, "%d expert layers", n_layers);
	cr_assert_eq((int)cli_json_num(cJSON_GetObjectItemCaseSensitive(src, "experts"), "n_experts"), ne);
	for (int r = 0; r < n; r++) {
		char name[64], args[256], dir[4400];
		snprintf(name, sizeof name, "%s-%d", tag, r);
		snprintf(args, sizeof args, "--ranks %d --rank %d %s", n, r, opts);
		int rc = shard(name, args);
		char *err = err_of(name);
		cr_assert_eq(rc, 0, "shard %s failed:\n%s", args, err ? err : "");
		free(err);
		snprintf(dir, sizeof dir, "%s/%s", scratch, name);
		cr_assert_eq(tu_sh("cmp -s '%s/resident.bin' '%s/resident.bin' && cmp -s '%s/config.json' '%s/config.json'",
				   source, dir, source, dir),
			     0, "%s: resident.bin or config.json differ from the source", name);
		cJSON *m = manifest_of(dir);
		const cJSON *sh = cJSON_GetObjectItemCaseSensitive(m, "shard");
		cr_assert_not_null(sh, "%s: no shard object", name);
		cr_expect_eq((int)cli_json_num(sh, "rank"), r);
		cr_expect_eq((int)cli_json_num(sh, "ranks"), n);
		per_rank[r] = 0;
		for (int i = 0; i < n_layers; i++) {
			const cJSON *sl = cJSON_GetArrayItem(src_layers, i), *l = cJSON_GetArrayItem(layers_of(m), i);
			const cJSON *recs = cJSON_GetObjectItemCaseSensitive(l, "records");
			const char *file = cJSON_GetObjectItemCaseSensitive(sl, "file")->valuestring;
			long rb = (long)cli_json_num(sl, "record_bytes");
			cr_assert(cJSON_IsArray(recs), "%s: layer entry %d lists no records", name, i);
			cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(l, "file")->valuestring, file);
			int k = 0;
			for (const cJSON *e = recs->child; e; e = e->next, k++) {
				int x = e->valueint;
				cr_assert(x >= 0 && x < ne);
				char *want = read_at(source, file, x * rb, (size_t)rb);
				char *got = read_at(dir, file, k * rb, (size_t)rb);
				cr_expect_eq(memcmp(want, got, (size_t)rb), 0, "%s: layer entry %d record %d is not expert %d's",
					     name, i, k, x);
				free(want);
				free(got);
				held[i * ne + x]++;
			}
			per_rank[r] += k;
			char path[4400];
			snprintf(path, sizeof path, "%s/%s", dir, file);
			struct stat st;
			cr_assert_eq(stat(path, &st), 0);
			cr_expect_eq(st.st_size, (long)k * rb, "%s: %s is %ld bytes for %d records", name, file,
				     (long)st.st_size, k);
		}
		cJSON_Delete(m);
	}
	cJSON_Delete(src);
}

Test(shard, records_are_the_sources_and_cover_every_expert_k_times)
{
	int held[8 * 16] = { 0 }, per_rank[3];
	shard_all("even", 3, "", 16, held, per_rank);
	for (int i = 0; i < 3 * 16; i++)
		cr_expect_eq(held[i], 1, "layer entry %d expert %d held %d times over 3 shards", i / 16, i % 16, held[i]);
	for (int r = 0; r < 3; r++)
		cr_expect(per_rank[r] >= 15 && per_rank[r] <= 17, "rank %d holds %d of 48 records at even", r,
			  per_rank[r]);
	memset(held, 0, sizeof held);
	shard_all("w123r2", 3, "--placement 1,2,3 --replicas 2", 16, held, per_rank);
	for (int i = 0; i < 3 * 16; i++)
		cr_expect_eq(held[i], 2, "layer entry %d expert %d held %d times with --replicas 2", i / 16, i % 16,
			     held[i]);
	/* Each rank owns its share and holds replicas beside it: more weight,
	 * more records. */
	cr_expect(per_rank[0] < per_rank[1] && per_rank[1] < per_rank[2], "records %d, %d, %d for weights 1, 2, 3",
		  per_rank[0], per_rank[1], per_rank[2]);
}

/* The other two corners: weights without replicas (each rank's count is
 * its weight's share, within one per layer), even with two replicas. */
Test(shard, weights_share_and_even_replicas)
{
	int held[8 * 16] = { 0 }, per_rank[3];
	shard_all("w123", 3, "--placement 1,2,3", 16, held, per_rank);
	for (int i = 0; i < 3 * 16; i++)
		cr_expect_eq(held[i], 1, "layer entry %d expert %d held %d times", i / 16, i % 16, held[i]);
	for (int r = 0; r < 3; r++) {
		double want = 48.0 * (r + 1) / 6;
		cr_expect(per_rank[r] >= want - 3 && per_rank[r] <= want + 3, "rank %d holds %d of 48, its weight's "
			  "share is %.0f", r, per_rank[r], want);
	}
	memset(held, 0, sizeof held);
	shard_all("evenr2", 3, "--replicas 2", 16, held, per_rank);
	for (int i = 0; i < 3 * 16; i++)
		cr_expect_eq(held[i], 2, "layer entry %d expert %d held %d times", i / 16, i % 16, held[i]);
	for (int r = 0; r < 3; r++)
		cr_expect(per_rank[r] >= 29 && per_rank[r] <= 35, "rank %d holds %d of 96 at even, 2 replicas", r,
			  per_rank[r]);
}

/* A model without MTP layers (OLMoE: 8 experts, 2 MoE layers), where
 * every row of the placement is a model layer. */
Test(shard, olmoe_over_three_ranks)
{
	char olmoe[4400];
	fc_container(olmoe, sizeof olmoe, "hf/olmoe", "--quant int4");
	source = olmoe;
	int held[8 * 16] = { 0 }, per_rank[3];
	shard_all("ol", 3, "--replicas 2", 8, held, per_rank);
	for (int i = 0; i < 2 * 8; i++)
		cr_expect_eq(held[i], 2, "layer entry %d expert %d held %d times", i / 8, i % 8, held[i]);
	source = model;
}

/* The store of a loaded shard, through the C API: what a rank's session
 * does with it. model_load itself does not refuse a shard (the session
 * does, shard_check_run), so the store can be reached here. */
Test(shard, the_store_reads_by_slot)
{
	cr_assert_eq(shard("st", "--ranks 3 --rank 1"), 0);
	char dir[4400];
	snprintf(dir, sizeof dir, "%s/st", scratch);
	struct model m;
	error_clear();
	int rc = model_load(&m, dir, NULL);
	cr_assert_eq(rc, 0, "%s", error_message());
	int checked = 0, absent_layer = -1, absent = -1;
	for (size_t i = 0; i < m.man.n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &m.man.layers[i];
		if (l->layer >= m.cfg.n_layers + m.n_mtp)
			continue;
		for (int e = 0; e < m.man.n_experts; e++) {
			if (l->slot[e] < 0) {
				if (absent < 0) {
					absent_layer = l->layer;
					absent = e;
				}
				continue;
			}
			cr_assert_eq(expert_store_request(m.store, l->layer, &e, 1), 0, "layer %d expert %d: %s", l->layer,
				     e, error_message());
			int32_t id;
			const void *rec;
			cr_assert_eq(expert_store_next(m.store, &id, &rec), 1, "%s", error_message());
			cr_assert_eq(id, e);
			char *want = read_at(model, l->file, (long)e * (long)l->record_bytes, l->record_bytes);
			cr_expect_eq(memcmp(rec, want, l->record_bytes), 0, "layer %d expert %d: not the source's record",
				     l->layer, e);
			free(want);
			expert_store_release(m.store, l->layer, e);
			cr_assert_eq(expert_store_next(m.store, &id, &rec), 0);
			checked++;
		}
	}
	cr_expect_eq(checked, 16, "rank 1 of 3 holds %d records, not 16", checked);
	cr_assert(absent >= 0, "rank 1 of 3 holds every expert");
	error_clear();
	rc = expert_store_request(m.store, absent_layer, &absent, 1);
	char want[96];
	snprintf(want, sizeof want, "layer %d: expert %d is not in", absent_layer, absent);
	cr_expect_eq(rc, -ENOENT);
	cr_expect(strstr(error_message(), want) && strstr(error_message(), "is shard 1 of 3") &&
		  strstr(error_message(), "rank 1's experts"), "the refusal says: %s", error_message());
	/* A prefetch guess at an absent expert is no read and no error. */
	uint64_t before = expert_store_stats(m.store)->prefetch_issued;
	cr_expect_eq(expert_store_prefetch(m.store, absent_layer, &absent, 1), 0);
	cr_expect_eq(expert_store_stats(m.store)->prefetch_issued, before);
	model_free(&m);
}

/* Who may run a shard (what the session and the MPI join call). */
Test(shard, who_may_run_it)
{
	cr_assert_eq(shard("who", "--ranks 3 --rank 1"), 0);
	char dir[4400];
	snprintf(dir, sizeof dir, "%s/who", scratch);
	struct manifest m, full;
	cr_assert_eq(manifest_load(&m, dir), 0, "%s", error_message());
	cr_assert_eq(manifest_load(&full, model), 0, "%s", error_message());
	cr_expect_eq(shard_check_run(&full, model, false, 0, 1), 0, "a full container is refused");
	cr_expect_eq(shard_check_run(&full, model, true, 2, 3), 0, "a full container is refused");
	cr_expect_eq(shard_check_run(&m, dir, true, 1, 3), 0, "%s", error_message());
	error_clear();
	cr_expect_eq(shard_check_run(&m, dir, false, 0, 1), -EINVAL);
	cr_expect(strstr(error_message(), "is shard 1 of 3") && strstr(error_message(), "mpirun -n 3") &&
		  strstr(error_message(), "full container"), "%s", error_message());
	error_clear();
	cr_expect_eq(shard_check_run(&m, dir, true, 0, 3), -EINVAL);
	cr_expect(strstr(error_message(), "this is rank 0 of 3"), "%s", error_message());
	error_clear();
	cr_expect_eq(shard_check_run(&m, dir, true, 1, 2), -EINVAL);
	cr_expect(strstr(error_message(), "this is rank 1 of 2"), "%s", error_message());
	manifest_free(&m);
	manifest_free(&full);
}

Test(shard, doctor_verifies_a_shard_and_a_single_process_is_refused)
{
	cr_assert_eq(shard("s1", "--ranks 3 --rank 1"), 0);
	char dir[4400], out[4400];
	snprintf(dir, sizeof dir, "%s/s1", scratch);
	snprintf(out, sizeof out, "%s/doctor.txt", scratch);
	int rc = cli_run(scratch, out, "doctor --deep --model '%s'", dir);
	char *text = tu_read(out, NULL);
	cr_expect_eq(rc, 0, "doctor --deep fails on a fresh shard:\n%s", text ? text : "");
	cr_expect(text && strstr(text, "shard 1 of 3 verified"), "doctor does not say what it verified:\n%s",
		  text ? text : "");
	free(text);
	/* Flip a byte in record 2 of the first expert file. */
	cJSON *m = manifest_of(dir);
	const cJSON *l = cJSON_GetArrayItem(layers_of(m), 0);
	int expert = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "records"), 2)->valueint;
	long rb = (long)cli_json_num(l, "record_bytes");
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItemCaseSensitive(l, "file")->valuestring);
	cJSON_Delete(m);
	flip_bits(path, 2 * rb + 77, 0x10);
	rc = cli_run(scratch, out, "doctor --deep --model '%s'", dir);
	text = tu_read(out, NULL);
	char want[64];
	snprintf(want, sizeof want, "expert %d at offset %ld", expert, 2 * rb);
	cr_expect_neq(rc, 0, "doctor --deep passes a flipped byte");
	cr_expect(text && strstr(text, want), "doctor does not name \"%s\":\n%s", want, text ? text : "");
	free(text);
	/* One process may not run a shard. */
	snprintf(out, sizeof out, "%s/run.txt", scratch);
	rc = cli_run(scratch, out, "logits --model '%s' --tokens 1,2,3 --out '%s/x.f32'", dir, scratch);
	char *err = cli_read_err(out);
	cr_expect_neq(rc, 0);
	cr_expect(err && strstr(err, "is shard 1 of 3") && strstr(err, "mpirun -n 3"), "the refusal says: %s",
		  err ? err : "");
	free(err);
	snprintf(path, sizeof path, "%s/x.f32", scratch);
	cr_expect(access(path, F_OK) != 0, "logits of a refused shard were written");
}

/* More ranks than experts: a rank may hold no record of a layer (an empty
 * file), and the shard still loads and verifies. */
Test(shard, a_rank_may_hold_nothing_of_a_layer)
{
	cr_assert_eq(shard("empty", "--ranks 32 --rank 31"), 0);
	char dir[4400], out[4400];
	snprintf(dir, sizeof dir, "%s/empty", scratch);
	int empty = 0;
	records_in(dir, &empty);
	cr_expect(empty > 0, "rank 31 of 32 holds a record of every layer");
	snprintf(out, sizeof out, "%s/doctor.txt", scratch);
	int rc = cli_run(scratch, out, "doctor --deep --model '%s'", dir);
	char *text = tu_read(out, NULL);
	cr_expect_eq(rc, 0, "doctor --deep fails on a shard with empty files:\n%s", text ? text : "");
	free(text);
}

/* The command fails, says want on stderr, and leaves nothing at name. */
static void check_refused(const char *name, const char *args, const char *want)
{
	int rc = shard(name, args);
	char *err = err_of(name), path[4400];
	cr_expect_neq(rc, 0, "shard %s succeeded", args);
	cr_expect(err && strstr(err, want), "shard %s: stderr lacks \"%s\":\n%s", args, want, err ? err : "");
	free(err);
	snprintf(path, sizeof path, "%s/%s", scratch, name);
	cr_expect(access(path, F_OK) != 0, "shard %s left %s behind", args, path);
	cr_expect_neq(tu_sh("ls -d '%s/%s'.tmp-* >/dev/null 2>&1", scratch, name), 0, "a temporary folder was left");
}

Test(shard, bad_requests_are_refused_leaving_nothing)
{
	check_refused("r3", "--ranks 3 --rank 3", "--rank");
	check_refused("k3", "--ranks 2 --rank 0 --replicas 3", "--replicas 3 over 2 ranks");
	check_refused("auto", "--ranks 2 --rank 0 --placement auto", "--placement auto");
	check_refused("w", "--ranks 3 --rank 0 --placement 1,2", "2 weights for 3 ranks");
	/* An existing folder: refused without --force, replaced with it. */
	char path[4400];
	cr_assert_eq(shard("twice", "--ranks 2 --rank 0"), 0);
	cr_expect_neq(shard("twice", "--ranks 2 --rank 1"), 0);
	char *err = err_of("twice");
	cr_expect(err && strstr(err, "--force"), "%s", err ? err : "");
	free(err);
	cr_expect_eq(shard("twice", "--ranks 2 --rank 1 --force"), 0);
	char dir[4400];
	snprintf(dir, sizeof dir, "%s/twice", scratch);
	cJSON *m = manifest_of(dir);
	cr_expect_eq((int)cli_json_num(cJSON_GetObjectItemCaseSensitive(m, "shard"), "rank"), 1);
	cJSON_Delete(m);
	/* A shard of a shard. */
	char out[4400];
	snprintf(out, sizeof out, "%s/again.out", scratch);
	cr_expect_neq(cli_run(scratch, out, "shard --quiet --model '%s' --ranks 2 --rank 0 --to '%s/again'", dir,
			      scratch),
		      0);
	err = cli_read_err(out);
	cr_expect(err && strstr(err, "already shard 1 of 2"), "%s", err ? err : "");
	free(err);
	snprintf(path, sizeof path, "%s/again", scratch);
	cr_expect(access(path, F_OK) != 0, "a refused shard of a shard left %s", path);
	/* A mirror of a shard: refused, the shard unchanged. */
	snprintf(out, sizeof out, "%s/mirror.out", scratch);
	cr_expect_neq(cli_run(scratch, out, "mirror --model '%s' --to '%s/mirror'", dir, scratch), 0);
	err = cli_read_err(out);
	cr_expect(err && strstr(err, "is shard 1 of 2") && strstr(err, "colibri mirror copies full containers"), "%s",
		  err ? err : "");
	free(err);
	cr_expect_eq(tu_sh("grep -q mirrors '%s/manifest.json'", dir), 1, "the shard's manifest names a mirror");
}

Test(shard, a_damaged_source_record_is_named)
{
	model_copy();
	cJSON *m = manifest_of(model);
	const cJSON *l = cJSON_GetArrayItem(layers_of(m), 1);
	int layer = (int)cli_json_num(l, "layer");
	long rb = (long)cli_json_num(l, "record_bytes");
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", model, cJSON_GetObjectItemCaseSensitive(l, "file")->valuestring);
	cJSON_Delete(m);
	/* Expert 5's record, which one of the two ranks holds. */
	flip_bits(path, 5 * rb + 1000, 1);
	char want[64];
	snprintf(want, sizeof want, "layer %d expert 5", layer);
	int bad = 0;
	for (int r = 0; r < 2; r++) {
		char name[16], args[64];
		snprintf(name, sizeof name, "d%d", r);
		snprintf(args, sizeof args, "--ranks 2 --rank %d", r);
		int rc = shard(name, args);
		char *err = err_of(name);
		if (rc) {
			bad++;
			cr_expect(err && strstr(err, want) && strstr(err, "checksum"), "rank %d: %s", r, err ? err : "");
			snprintf(path, sizeof path, "%s/%s", scratch, name);
			cr_expect(access(path, F_OK) != 0, "a failed shard left %s", path);
		}
		free(err);
	}
	cr_expect_eq(bad, 1, "%d of the 2 ranks failed on one damaged record", bad);
}

/* A damaged resident.bin is found when the copy is read back. */
Test(shard, a_damaged_resident_file_is_named)
{
	char path[4400];
	model_copy();
	snprintf(path, sizeof path, "%s/resident.bin", model);
	flip_bits(path, 100, 4);
	check_refused("dr", "--ranks 2 --rank 0", "does not match its checksum");
	char *err = err_of("dr");
	cr_expect(err && strstr(err, "resident.bin: tensor "), "%s", err ? err : "");
	free(err);
}

/* Edits the shard's manifest with a jq-free python one-liner. */
static void edit_manifest(const char *dir, const char *python)
{
	cr_assert_eq(tu_sh("python3 -c 'import json,sys; p=sys.argv[1]+\"/manifest.json\"; m=json.load(open(p)); "
			   "%s; json.dump(m, open(p, \"w\"))' '%s'",
			   python, dir),
		     0);
}

Test(shard, a_manifest_that_does_not_belong_together_is_refused)
{
	cr_assert_eq(shard("m", "--ranks 2 --rank 0"), 0);
	char dir[4400], out[4400];
	snprintf(dir, sizeof dir, "%s/m", scratch);
	snprintf(out, sizeof out, "%s/plan.txt", scratch);
	/* The shard says rank 1, the records are rank 0's. */
	edit_manifest(dir, "m[\"shard\"][\"rank\"]=1");
	cr_expect_neq(cli_run(scratch, out, "plan --model '%s'", dir), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, "records and shard do not belong together"), "%s", err ? err : "");
	free(err);
	/* Records without a shard. */
	edit_manifest(dir, "del m[\"shard\"]");
	cr_expect_neq(cli_run(scratch, out, "plan --model '%s'", dir), 0);
	err = cli_read_err(out);
	cr_expect(err && strstr(err, "records"), "%s", err ? err : "");
	free(err);
	/* Records out of order. */
	snprintf(out, sizeof out, "%s/plan2.txt", scratch);
	cr_assert_eq(shard("m2", "--ranks 2 --rank 1"), 0);
	snprintf(dir, sizeof dir, "%s/m2", scratch);
	edit_manifest(dir, "l=m[\"experts\"][\"layers\"][0]; l[\"records\"]=l[\"records\"][::-1]");
	cr_expect_neq(cli_run(scratch, out, "plan --model '%s'", dir), 0);
	err = cli_read_err(out);
	cr_expect(err && strstr(err, "strictly ascending"), "%s", err ? err : "");
	free(err);
}

/* `plan` on a shard sizes the cache for the records it holds: its
 * expert_cache.frames_all is their count, not every expert's. */
Test(shard, plan_counts_the_records_a_shard_holds)
{
	cr_assert_eq(shard("p", "--ranks 3 --rank 2 --replicas 2"), 0);
	char dir[4400], out[4400];
	snprintf(dir, sizeof dir, "%s/p", scratch);
	int held = records_in(dir, NULL);
	snprintf(out, sizeof out, "%s/plan.json", scratch);
	int rc = cli_run(scratch, out, "plan --json --model '%s'", dir);
	char *err = cli_read_err(out);
	cr_assert_eq(rc, 0, "plan --json on a shard failed:\n%s", err ? err : "");
	free(err);
	cJSON *j = cli_json_read(out);
	cr_expect_eq((int)cli_json_num(j, "expert_cache.frames_all"), held, "frames_all %d for %d held records",
		     (int)cli_json_num(j, "expert_cache.frames_all"), held);
	cr_expect_lt(held, 48, "a shard of 3 ranks with 2 replicas holds every record");
	cJSON_Delete(j);
}
