/*
 * dist_serve — ranks 1..N-1: the serving loop (one layer request at a
 * time, each checked against the model before it runs, through
 * ffn_moe_serve with the kernels and rows rank 0 would use), its
 * counters when rank 0 asks, and its leaving when rank 0 says STOP.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/dist/dist_internal.h"
#include "engine/forward/forward.h"

/* VmHWM of /proc/self/status in bytes, 0 if unknown. */
static uint64_t peak_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %" SCNu64, &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

/* Checks a request of `bytes` in d->req against the model; NULL, or what
 * is wrong with it. */
static const char *check_request(const struct dist *d, size_t bytes)
{
	const int32_t *w = (const int32_t *)d->req;
	if (bytes < H_WORDS * sizeof(int32_t) || w[H_MAGIC] != DIST_MAGIC)
		return "not a colibri layer request";
	int n = w[H_N], ne = w[H_NEXP], nh = w[H_NHINT], layer = w[H_LAYER], hl = w[H_HINT_LAYER];
	if (layer < 0 || layer >= d->n_layers || w[H_K] != d->top_k || w[H_HIDDEN] != d->hidden)
		return "a request for another model's shape";
	if (n < 0 || n > d->batch || ne < 0 || ne > d->n_experts || nh < 0 || nh > d->n_experts ||
	    (nh && (hl < 0 || hl >= d->n_layers)))
		return "a request beyond this rank's batch or the model's experts";
	size_t words = H_WORDS + (size_t)ne + (size_t)nh + (ne ? (size_t)n * d->top_k : 0);
	size_t want = words * sizeof(int32_t) + (ne ? (size_t)n * d->hidden * sizeof(float) : 0);
	if (bytes != want)
		return "a request of the wrong size";
	const int32_t *ids = w + H_WORDS;
	for (int i = 0; i < ne + nh; i++) {
		int l = i < ne ? layer : hl;
		if (ids[i] < 0 || ids[i] >= d->n_experts || !(d->holders[(size_t)l * d->n_experts + ids[i]] >> d->rank & 1))
			return "a request for an expert this rank does not hold";
	}
	const int32_t *sel = ids + ne + nh;
	for (int i = 0; ne && i < n * d->top_k; i++)
		if (sel[i] < 0 || sel[i] >= d->n_experts)
			return "routing that names no expert";
	return NULL;
}

static void send_error(struct dist *d)
{
	MPI_Send(d->err, (int)strlen(d->err), MPI_BYTE, 0, DIST_TAG_ERROR, MPI_COMM_WORLD);
}

static void serve_layer(struct dist *d, size_t bytes)
{
	double t0 = clock_now_s();
	const char *bad = d->err[0] ? NULL : check_request(d, bytes);
	if (bad)
		snprintf(d->err, sizeof d->err, "%s", bad);
	if (d->err[0]) {
		send_error(d);
		return;
	}
	const int32_t *w = (const int32_t *)d->req;
	int n = w[H_N], ne = w[H_NEXP], nh = w[H_NHINT];
	const int32_t *ids = w + H_WORDS, *hints = ids + ne, *sel = hints + nh;
	const float *xn = (const float *)(sel + (ne ? (size_t)n * d->top_k : 0));
	int rows = ffn_moe_serve(d->f, w[H_LAYER], ids, ne, ne ? sel : NULL, ne ? xn : NULL, n, w[H_HINT_LAYER],
				 hints, nh, d->ans + A_WORDS);
	if (rows < 0) {
		snprintf(d->err, sizeof d->err, "%s", error_message()[0] ? error_message() : strerror(-rows));
		send_error(d);
		return;
	}
	int32_t *a = (int32_t *)d->ans;
	a[A_MAGIC] = DIST_MAGIC;
	a[A_LAYER] = w[H_LAYER];
	a[A_ROWS] = rows;
	size_t out = A_WORDS * sizeof(int32_t) + (size_t)rows * d->hidden * sizeof(float);
	double t1 = clock_now_s();
	MPI_Send(d->ans, (int)out, MPI_BYTE, 0, DIST_TAG_ROWS, MPI_COMM_WORLD);
	double t2 = clock_now_s();
	d->mine.experts_served += (uint64_t)ne;
	d->mine.rows_served += (uint64_t)rows;
	d->mine.serve_s += t2 - t0;
	d->mine.net_s += t2 - t1;
	d->mine.net_bytes += bytes + out;
}

int dist_serve(struct dist *d)
{
	int us = 20;
	for (;;) {
		int flag = 0;
		MPI_Status st;
		if (MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS)
			return error_set(EIO, "rank %d (host %s): lost rank 0", d->rank, d->ranks[d->rank].host);
		if (!flag) {
			/* Rank 0 may compute for long (a prompt's attention):
			 * no timeout here; if it dies, mpirun ends this rank. */
			dist_backoff(&us, 200);
			continue;
		}
		us = 20;
		int bytes = 0;
		MPI_Get_count(&st, MPI_BYTE, &bytes);
		double t0 = clock_now_s();
		if (bytes < 0 || (size_t)bytes > d->req_cap) {
			/* Take it off the line anyway, then refuse it. */
			char sink;
			MPI_Recv(&sink, 0, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			snprintf(d->err, sizeof d->err, "a message of %d bytes, beyond the %zu a request can take", bytes,
				 d->req_cap);
			send_error(d);
			continue;
		}
		MPI_Recv(d->req, bytes, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		d->mine.net_s += clock_now_s() - t0;
		switch (st.MPI_TAG) {
		case DIST_TAG_LAYER:
			serve_layer(d, (size_t)bytes);
			break;
		case DIST_TAG_STATS: {
			const struct expert_store_stats *s = expert_store_stats(d->f->m->store);
			struct dist_rank_stats out = d->mine;
			out.requests = s->requests - d->at_open.requests;
			out.hits = (s->hits + s->pinned_hits) - (d->at_open.hits + d->at_open.pinned_hits);
			out.bytes_read = s->bytes_read - d->at_open.bytes_read;
			out.disk_wait_s = s->disk_wait_s - d->at_open.disk_wait_s;
			out.peak_rss_bytes = peak_rss_bytes();
			MPI_Send(&out, (int)sizeof out, MPI_BYTE, 0, DIST_TAG_STATS, MPI_COMM_WORLD);
			break;
		}
		case DIST_TAG_STOP: {
			/* Rank 0 has reported this rank's failure already when
			 * it moved on without it: then leave cleanly. */
			int32_t reported = bytes >= (int)sizeof(int32_t) ? *(const int32_t *)d->req : 0;
			int32_t bye = 0, finalize = 1;
			MPI_Send(&bye, 1, MPI_INT32_T, 0, DIST_TAG_BYE, MPI_COMM_WORLD);
			/* Then how to leave: with MPI_Finalize when every rank
			 * is there to finalize. */
			for (int flag = 0, wait_us = 20; !flag;) {
				if (MPI_Iprobe(0, DIST_TAG_LEAVE, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
					break;
				if (!flag)
					dist_backoff(&wait_us, 1000);
			}
			MPI_Recv(&finalize, 1, MPI_INT32_T, 0, DIST_TAG_LEAVE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (!finalize)
				dist_leave_unfinalized();
			return d->err[0] && !reported ? error_set(EIO, "%s", d->err) : 0;
		}
		default:
			snprintf(d->err, sizeof d->err, "a message with tag %d", st.MPI_TAG);
			send_error(d);
		}
	}
}
