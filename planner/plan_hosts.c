/*
 * plan_hosts — see plan_hosts.h. Every entry is checked field by field so
 * that a mistake in a hosts file is reported as "FILE: entry I: field F ..."
 * rather than as a wrong plan.
 */
#include "planner/plan_hosts.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/files.h"
#include "base/json_get.h"

static double opt_num(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 ? v->valuedouble : 0;
}

/* One "points" entry of a profile file; the same fields profile.c reads. */
static int point_read(struct disk_point *pt, const cJSON *e, const char *path, const char *key, int i)
{
	char what[600];
	snprintf(what, sizeof what, "%s: disk \"%s\" point %d", path, key, i);
	memset(pt, 0, sizeof *pt);
	double block, depth;
	int rc = json_get_num(e, "block_bytes", -1, 0, 1e15, true, what, &block);
	rc = rc ? rc : json_get_num(e, "depth", -1, 0, 1 << 20, true, what, &depth);
	rc = rc ? rc : json_get_num(e, "gbps", -1, 0, 1e6, true, what, &pt->gbps);
	if (!rc && (block < 0 || depth < 0 || pt->gbps < 0))
		rc = error_set(EINVAL, "%s: needs block_bytes, depth and gbps", what);
	if (rc)
		return rc;
	pt->block_bytes = (uint64_t)block;
	pt->depth = (int)depth;
	pt->buffered = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "buffered"));
	/* The other fields are only for show. */
	pt->seconds = opt_num(e, "seconds");
	pt->iops = opt_num(e, "iops");
	pt->lat_p50_us = opt_num(e, "p50_us");
	pt->lat_p99_us = opt_num(e, "p99_us");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "measured");
	if (cJSON_IsString(m))
		snprintf(pt->measured, sizeof pt->measured, "%s", m->valuestring);
	return 0;
}

static int disk_read(struct disk_profile *out, const cJSON *d, const char *path, const char *key)
{
	memset(out, 0, sizeof *out);
	snprintf(out->dev.key, sizeof out->dev.key, "%s", key);
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
	if (cJSON_IsString(name))
		snprintf(out->dev.name, sizeof out->dev.name, "%s", name->valuestring);
	const cJSON *pts = cJSON_GetObjectItemCaseSensitive(d, "points"), *e;
	if (!cJSON_IsArray(pts))
		return error_set(EINVAL, "%s: disk \"%s\" has no \"points\" array", path, key);
	int i = 0, rc;
	cJSON_ArrayForEach(e, pts) {
		struct disk_point pt;
		if ((rc = point_read(&pt, e, path, key, i++)))
			return rc;
		if (disk_profile_put(out, &pt))
			return error_set(ENOSPC, "%s: disk \"%s\" has more than %d points", path, key, PROFILE_POINTS_MAX);
	}
	return out->n_points ? 0 : error_set(EINVAL, "%s: disk \"%s\" has no measured points", path, key);
}

int plan_hosts_profile_load(struct disk_profile *out, const char *path, const char *key)
{
	cJSON *root = NULL;
	if (access(path, R_OK) != 0)
		return error_set(errno, "%s: cannot read the disk profile: %s", path, strerror(errno));
	int rc = json_load(path, &root);
	if (rc)
		return rc;
	/* disks.json keys its disks by name; iobench --json lists "devices". */
	const cJSON *disks = cJSON_GetObjectItemCaseSensitive(root, "disks");
	const cJSON *devices = cJSON_GetObjectItemCaseSensitive(root, "devices");
	const cJSON *found = NULL, *d;
	const char *found_key = NULL;
	int n = 0;
	if (cJSON_IsObject(disks)) {
		cJSON_ArrayForEach(d, disks) {
			n++;
			if (!key ? n == 1 : !strcmp(d->string, key)) {
				found = d;
				found_key = d->string;
			}
		}
	} else if (cJSON_IsArray(devices)) {
		cJSON_ArrayForEach(d, devices) {
			const cJSON *k = cJSON_GetObjectItemCaseSensitive(d, "key");
			const char *ks = cJSON_IsString(k) ? k->valuestring : "";
			n++;
			if (!key ? n == 1 : !strcmp(ks, key)) {
				found = d;
				found_key = ks;
			}
		}
	} else {
		rc = error_set(EINVAL, "%s: not a disk profile (no \"disks\" object as in disks.json, no \"devices\" "
				       "array as in iobench --json)", path);
		goto out;
	}
	if (!n)
		rc = error_set(EINVAL, "%s: the profile holds no disk", path);
	else if (!key && n > 1)
		rc = error_set(EINVAL, "%s: the profile holds %d disks; name one with \"disk\" in the hosts file", path, n);
	else if (!found)
		rc = error_set(ENOENT, "%s: the profile has no disk \"%s\"", path, key);
	else
		rc = disk_read(out, found, path, found_key);
out:
	cJSON_Delete(root);
	return rc;
}

/* A string member of entry i; NULL when absent. -EINVAL when not a string. */
static int entry_str(const cJSON *o, const char *field, const char *path, int i, const char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
	*out = NULL;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsString(v) || !v->valuestring[0])
		return error_set(EINVAL, "%s: entry %d: \"%s\" must be a non-empty string", path, i, field);
	*out = v->valuestring;
	return 0;
}

static int entry_read(struct plan_host *h, const cJSON *o, const char *path, int i,
		      int (*parse_size)(const char *s, uint64_t *bytes))
{
	char what[600];
	snprintf(what, sizeof what, "%s: entry %d", path, i);
	if (!cJSON_IsObject(o))
		return error_set(EINVAL, "%s: not an object (each entry is {\"host\", \"ram\", \"disk_gbps\" or "
					 "\"profile\"})", what);
	const char *host, *profile, *disk;
	int rc = entry_str(o, "host", path, i, &host);
	if (rc)
		return rc;
	if (!host)
		return error_set(EINVAL, "%s: missing field \"host\"", what);
	if (strlen(host) >= sizeof h->host || strchr(host, ':'))
		return error_set(EINVAL, "%s: \"host\" must be shorter than %zu characters and hold no ':'", what,
				 sizeof h->host);
	snprintf(h->host, sizeof h->host, "%s", host);

	const cJSON *ram = cJSON_GetObjectItemCaseSensitive(o, "ram");
	if (!ram || cJSON_IsNull(ram))
		return error_set(EINVAL, "%s: missing field \"ram\"", what);
	if (cJSON_IsString(ram)) {
		if (parse_size(ram->valuestring, &h->ram_bytes) != 0 || !h->ram_bytes)
			return error_set(EINVAL, "%s: \"ram\" must be a size such as \"16G\" or \"512M\", not \"%s\"", what,
					 ram->valuestring);
	} else {
		int64_t b;
		if (json_int(ram, 1, JSON_INT_EXACT, &b) != 0)
			return error_set(EINVAL, "%s: \"ram\" must be a size string (\"16G\") or a whole number of bytes "
						 ">= 1", what);
		h->ram_bytes = (uint64_t)b;
	}

	if ((rc = entry_str(o, "profile", path, i, &profile)) || (rc = entry_str(o, "disk", path, i, &disk)))
		return rc;
	const cJSON *gbps = cJSON_GetObjectItemCaseSensitive(o, "disk_gbps");
	bool has_gbps = gbps && !cJSON_IsNull(gbps);
	if (has_gbps == !!profile)
		return error_set(EINVAL, "%s: give exactly one of \"disk_gbps\" (GB/s, 0: not profiled) and "
					 "\"profile\" (a saved disk profile)", what);
	if (has_gbps && (rc = json_get_num(o, "disk_gbps", 0, 0, 1e6, false, what, &h->disk_gbps)))
		return rc;
	if (disk && !profile)
		return error_set(EINVAL, "%s: \"disk\" names a disk of \"profile\", which is missing", what);
	if (profile) {
		snprintf(h->profile_path, sizeof h->profile_path, "%s", profile);
		if (!(h->profile = malloc(sizeof *h->profile)))
			return error_set(ENOMEM, "out of memory");
		if ((rc = plan_hosts_profile_load(h->profile, profile, disk))) {
			char why[1024];
			snprintf(why, sizeof why, "%s", error_message());
			error_clear();
			return error_set(-rc, "%s: \"profile\": %s", what, why);
		}
	}
	if ((rc = json_get_num(o, "net_gbps", PLAN_HOST_NET_GBPS_DEFAULT, 0, 1e6, true, what, &h->net_gbps)))
		return rc;
	return json_get_num(o, "rtt_us", PLAN_HOST_RTT_US_DEFAULT, 0, 1e9, false, what, &h->rtt_us);
}

int plan_hosts_load(struct plan_hosts *out, const char *path, int (*parse_size)(const char *s, uint64_t *bytes))
{
	memset(out, 0, sizeof *out);
	cJSON *root = NULL;
	if (access(path, R_OK) != 0)
		return error_set(errno, "%s: cannot read the hosts file: %s", path, strerror(errno));
	int rc = json_load(path, &root);
	if (rc)
		return rc;
	if (!cJSON_IsArray(root)) {
		rc = error_set(EINVAL, "%s: the hosts file must be a JSON array with one object per rank", path);
		goto out;
	}
	int n = cJSON_GetArraySize(root);
	if (n < 1 || n > PLACEMENT_RANKS_MAX) {
		rc = error_set(EINVAL, "%s: %d entries; a hosts file lists 1..%d ranks", path, n, PLACEMENT_RANKS_MAX);
		goto out;
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, root) {
		if ((rc = entry_read(&out->hosts[out->n], e, path, out->n, parse_size))) {
			out->n++; /* so that plan_hosts_free frees its profile */
			goto out;
		}
		out->n++;
	}
out:
	cJSON_Delete(root);
	return rc;
}

void plan_hosts_free(struct plan_hosts *h)
{
	for (int i = 0; i < h->n; i++) {
		free(h->hosts[i].profile);
		h->hosts[i].profile = NULL;
	}
	h->n = 0;
}

void plan_hosts_estimate(struct plan_hosts_estimate *out, const struct plan_hosts *h, const uint8_t *owner,
			 const struct plan_hosts_model *m)
{
	memset(out, 0, sizeof *out);
	int n = h->n;
	/* Expected reads per token of rank r before misses: top_k experts of
	 * each MoE layer, uniformly routed, land on r in proportion to its
	 * share of that layer. */
	double want[PLACEMENT_RANKS_MAX] = { 0 }, all_token = 0;
	uint64_t all_bytes = 0;
	int64_t cells = 0, remote = 0;
	for (int l = 0; l < m->n_rows; l++) {
		uint64_t rec = m->record_bytes[l];
		if (!rec)
			continue;
		out->n_moe_layers++;
		all_token += (double)m->top_k * (double)rec;
		for (int e = 0; e < m->n_experts; e++) {
			int r = owner[(size_t)l * m->n_experts + e];
			struct plan_hosts_rank *rk = &out->ranks[r];
			rk->experts++;
			rk->expert_bytes += rec;
			all_bytes += rec;
			want[r] += (double)m->top_k * (double)rec / m->n_experts;
			cells++;
			remote += r != 0;
		}
	}
	out->share_remote = cells ? (double)remote / (double)cells : 0;
	out->disk_s = 0;
	out->slowest = 0;
	for (int r = 0; r < n; r++) {
		struct plan_hosts_rank *rk = &out->ranks[r];
		uint64_t ram = h->hosts[r].ram_bytes;
		rk->cache_bytes = ram > m->fixed_bytes ? ram - m->fixed_bytes : 0;
		rk->fit_bytes = rk->expert_bytes < rk->cache_bytes ? rk->expert_bytes : rk->cache_bytes;
		rk->miss = rk->expert_bytes ? 1.0 - (double)rk->fit_bytes / (double)rk->expert_bytes : 0;
		rk->disk_bytes_token = want[r] * rk->miss;
		double g = h->hosts[r].disk_gbps;
		rk->disk_s = rk->disk_bytes_token <= 0 ? 0 : g > 0 ? rk->disk_bytes_token / (g * 1e9) : -1;
		if (out->disk_s >= 0 && (rk->disk_s < 0 || rk->disk_s > out->disk_s)) {
			out->disk_s = rk->disk_s;
			out->slowest = r;
		}
	}
	/* Rank 0 asks every other rank in parallel: the slowest link counts. */
	out->net = (struct placement_net){ .rtt_s = 0, .gbps = 0 };
	for (int r = 1; r < n; r++) {
		double rtt = h->hosts[r].rtt_us * 1e-6, g = h->hosts[r].net_gbps;
		if (rtt > out->net.rtt_s)
			out->net.rtt_s = rtt;
		if (out->net.gbps == 0 || g < out->net.gbps)
			out->net.gbps = g;
	}
	out->net_s = n > 1 ? placement_net_s(&out->net, out->n_moe_layers, m->hidden, m->top_k, out->share_remote) : 0;
	out->compute_s = m->compute_s;
	out->token_s = out->disk_s >= 0 && out->compute_s >= 0 ? out->disk_s + out->compute_s + out->net_s : -1;
	out->tok_s = out->token_s > 0 ? 1.0 / out->token_s : -1;

	/* Rank 0 alone: every expert in its RAM and off its disk. */
	uint64_t cache0 = h->hosts[0].ram_bytes > m->fixed_bytes ? h->hosts[0].ram_bytes - m->fixed_bytes : 0;
	out->single_miss = all_bytes ? 1.0 - (double)(cache0 < all_bytes ? cache0 : all_bytes) / (double)all_bytes : 0;
	double g0 = h->hosts[0].disk_gbps, bytes0 = all_token * out->single_miss;
	out->single_disk_s = bytes0 <= 0 ? 0 : g0 > 0 ? bytes0 / (g0 * 1e9) : -1;
	out->single_token_s = out->single_disk_s >= 0 && out->compute_s >= 0 ? out->single_disk_s + out->compute_s : -1;
	out->single_tok_s = out->single_token_s > 0 ? 1.0 / out->single_token_s : -1;
}
