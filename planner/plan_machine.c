/*
 * plan_machine — see plan_machine.h.
 */
#include "planner/plan_machine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "planner/iobench.h"
#include "planner/membw.h"

/* Index of the disk with key in m, adding it when there is room; the last
 * disk when m is full. */
static int disk_slot(struct plan_machine *m, const struct blockdev *dev)
{
	for (int i = 0; i < m->n_disks; i++)
		if (!strcmp(m->disks[i].profile.dev.key, dev->key))
			return i;
	if (m->n_disks == PLAN_DISKS_MAX)
		return PLAN_DISKS_MAX - 1;
	struct plan_disk *d = &m->disks[m->n_disks];
	memset(d, 0, sizeof *d);
	d->profile.dev = *dev;
	return m->n_disks++;
}

static void load_profiles(struct plan_machine *m)
{
	for (int i = 0; i < m->n_disks; i++) {
		struct plan_disk *d = &m->disks[i];
		struct blockdev dev = d->profile.dev;
		d->profiled = profile_disk_load(&d->profile, dev.key) == 0;
		if (!d->profiled)
			memset(&d->profile, 0, sizeof d->profile);
		d->profile.dev = dev;   /* the live identity, not the saved one */
	}
}

int plan_machine_discover(struct plan_machine *m, const char *const *paths, int n_paths, unsigned flags)
{
	memset(m, 0, sizeof *m);
	topology_discover(&m->topo);
	/* Well above the last-level cache, or the caches answer instead. */
	m->membw_buffer_bytes = MEMBW_BUFFER_BYTES;
	uint64_t l3 = m->topo.l3_bytes * (uint64_t)(m->topo.l3_instances > 0 ? m->topo.l3_instances : 1);
	if (4 * l3 > m->membw_buffer_bytes)
		m->membw_buffer_bytes = 4 * l3;
	/* The measurement must fit in the memory this process may use: 4x a
	 * 260 MiB L3 is 1 GiB, and under a 700 MiB cgroup limit the plan was
	 * OOM-killed. So the buffer is at most a quarter of what is available.
	 * A buffer cut that small lets the caches answer part of the reads, so
	 * its figure serves this plan but is not saved for the machine. */
	bool cut = false;
	if (m->topo.available_memory_bytes > 0 &&
	    m->membw_buffer_bytes > (uint64_t)m->topo.available_memory_bytes / 4) {
		m->membw_buffer_bytes = (uint64_t)m->topo.available_memory_bytes / 4;
		cut = true;
	}
	if (profile_machine_get("membw_gbps", &m->membw_gbps) == 0) {
		m->membw_source = PLAN_SOURCE_SAVED;
	} else if (flags & PLAN_MEASURE_MEMBW) {
		if (membw_measure(&m->membw_gbps, m->membw_buffer_bytes, MEMBW_SECONDS, m->topo.physical_cores) == 0 &&
		    m->membw_gbps > 0) {
			m->membw_source = PLAN_SOURCE_MEASURED;
			if (!cut)
				profile_machine_put("membw_gbps", m->membw_gbps);
		}
	}
	for (int i = 0; i < n_paths; i++) {
		struct blockdev dev;
		struct stat st;
		int rc = blockdev_identify(&dev, paths[i]);
		if (rc || stat(paths[i], &st) != 0)
			return rc ? rc : -errno;
		struct plan_disk *d = &m->disks[disk_slot(m, &dev)];
		d->n_files++;
		d->bytes += (uint64_t)st.st_size;
	}
	load_profiles(m);
	return 0;
}

void plan_inputs_machine(struct plan_inputs *in, const struct plan_machine *m)
{
	in->physical_cores = m->topo.physical_cores;
	in->available_memory_bytes = m->topo.available_memory_bytes;
	in->membw_gbps = m->membw_gbps;
	in->compute_gbps = m->compute_gbps;
	in->disk = plan_machine_disk(m);
}

const struct disk_profile *plan_machine_disk(const struct plan_machine *m)
{
	const struct plan_disk *best = NULL;
	for (int i = 0; i < m->n_disks; i++)
		if (!best || m->disks[i].n_files > best->n_files)
			best = &m->disks[i];
	return best && best->profiled ? &best->profile : NULL;
}

/* Measures the files of one disk at two depths and saves the points. */
static int probe_disk(const struct blockdev *dev, const char **files, int n, uint64_t block_bytes, int top_k,
		      double seconds, bool buffered, char *err, size_t err_len)
{
	struct disk_profile *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->dev = *dev;
	int depths[2] = { top_k < 1 ? 1 : top_k > 64 ? 64 : top_k, PLAN_IO_DEPTH_DEFAULT };
	int n_depths = depths[0] == depths[1] ? 1 : 2, rc = 0;
	for (int i = 0; i < n_depths && !rc; i++) {
		struct iobench_params prm = { .block_bytes = block_bytes, .depth = depths[i],
					      .seconds = seconds / n_depths, .buffered = buffered, .seed = 1 + (uint64_t)i };
		struct iobench_result r;
		if ((rc = iobench_run(&r, files, n, &prm, err, err_len)))
			break;
		struct disk_point pt = { .block_bytes = block_bytes, .depth = depths[i], .buffered = buffered,
					 .seconds = r.seconds, .gbps = r.gbps, .iops = r.iops,
					 .lat_p50_us = r.lat_p50_us, .lat_p99_us = r.lat_p99_us };
		profile_now(pt.measured);
		if (r.reads)
			rc = disk_profile_put(p, &pt);
	}
	if (!rc && p->n_points && (rc = profile_disk_save(p)))
		snprintf(err, err_len, "cannot save the disk profile: %s", strerror(-rc));
	free(p);
	return rc;
}

int plan_machine_probe(struct plan_machine *m, const char *const *paths, int n_paths, uint64_t block_bytes,
		       int top_k, double seconds, bool buffered, char *err, size_t err_len)
{
	size_t n_alloc = (size_t)(n_paths > 0 ? n_paths : 1);
	const char **group = malloc(n_alloc * sizeof *group);
	int *disk = malloc(n_alloc * sizeof *disk);
	int rc = 0;
	if (!group || !disk) {
		free(group);
		free(disk);
		return -ENOMEM;
	}
	for (int i = 0; i < n_paths; i++)
		disk[i] = plan_machine_disk_of(m, paths[i]);
	for (int d = 0; d < m->n_disks && !rc; d++) {
		int n = 0;
		for (int i = 0; i < n_paths; i++)
			if (disk[i] == d)
				group[n++] = paths[i];
		if (n)
			rc = probe_disk(&m->disks[d].profile.dev, group, n, block_bytes, top_k, seconds, buffered, err,
					err_len);
	}
	free(group);
	free(disk);
	if (!rc)
		load_profiles(m);
	return rc;
}

int plan_machine_disk_of(const struct plan_machine *m, const char *path)
{
	struct blockdev dev;
	if (blockdev_identify(&dev, path) != 0)
		return -1;
	for (int i = 0; i < m->n_disks; i++)
		if (!strcmp(m->disks[i].profile.dev.key, dev.key))
			return i;
	return -1;
}

double plan_machine_mirror_gain(const struct plan_machine *m, const char *const *paths, const int *path_layer,
				int n_paths, int n_primary, int n_layers, uint64_t block, int depth, bool buffered)
{
	double bw[PLAN_DISKS_MAX] = { 0 };
	for (int d = 0; d < m->n_disks; d++) {
		const struct disk_point *pt = m->disks[d].profiled
						      ? disk_profile_nearest(&m->disks[d].profile, block, depth, buffered)
						      : NULL;
		bw[d] = pt ? pt->gbps : 0;
	}
	uint8_t *mask = calloc((size_t)(n_layers > 0 ? n_layers : 1), 2);
	if (!mask || n_primary > n_paths)
		return free(mask), 1.0;
	uint8_t *primary = mask + n_layers;
	for (int i = 0; i < n_paths; i++) {
		int d = plan_machine_disk_of(m, paths[i]), l = path_layer[i];
		if (d < 0 || l < 0 || l >= n_layers)
			continue;
		mask[l] |= (uint8_t)(1u << d);
		if (i < n_primary)
			primary[l] = (uint8_t)(1u << d);
	}
	double t_primary = 0, t_all = 0;
	for (int l = 0; l < n_layers; l++) {
		double one = 0, sum = 0;
		for (int d = 0; d < m->n_disks; d++) {
			if (primary[l] & (1u << d))
				one = bw[d];
			if (mask[l] & (1u << d))
				sum += bw[d];
		}
		if (one <= 0) {
			free(mask);
			return 1.0;
		}
		t_primary += 1 / one;
		t_all += 1 / sum;
	}
	free(mask);
	return t_all > 0 ? t_primary / t_all : 1.0;
}

const char *plan_source_name(enum plan_source s)
{
	switch (s) {
	case PLAN_SOURCE_SAVED: return "saved";
	case PLAN_SOURCE_MEASURED: return "measured";
	case PLAN_SOURCE_NONE: break;
	}
	return "none";
}
