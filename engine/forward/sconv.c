/*
 * sconv — Inkling's short convolutions (InklingShortConvolution in
 * transformers v5.15.0): a causal depthwise convolution of sconv_kernel
 * taps over a sequence, plus its input (y = x + conv(x)), computed in
 * f32. MIXER_REL runs one on its keys and one on its values; the
 * RESIDUAL_SCONV residual runs one on each block's output before it joins
 * the residual stream.
 *
 * State: a convolution's last K - 1 inputs per channel, [K - 1][C] oldest
 * first, zero at the start of a sequence (the reference's zero padding);
 * each row advances its sequence's history, so the step's rows of one
 * sequence must come in position order (forward_step_rows keeps them so).
 */
#include <string.h>

#include "compute/kernels.h"
#include "engine/forward/forward_internal.h"

void sconv_row(float *y, const float *x, const float *w, float *hist, int64_t channels, int64_t kernel)
{
	int64_t C = channels, K = kernel;
	for (int64_t ch = 0; ch < C; ch++) {
		const float *wc = w + ch * K;
		float xc = x[ch], acc = 0.0f;
		for (int64_t j = 0; j + 1 < K; j++)
			acc += wc[j] * hist[j * C + ch];
		acc += wc[K - 1] * xc;
		for (int64_t j = 0; j + 2 < K; j++)
			hist[j * C + ch] = hist[(j + 1) * C + ch];
		if (K > 1)
			hist[(K - 2) * C + ch] = xc;
		y[ch] = xc + acc;
	}
}

size_t sconv_state_bytes(const struct model_config *c, int64_t channels)
{
	return c->sconv_kernel > 1 ? (size_t)(c->sconv_kernel - 1) * (size_t)channels * sizeof(float) : 0;
}

int sconv_block(struct forward *f, const struct block_kind *k, const float *norm, int layer, int slot, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer *ly = &f->layers[layer];
	int64_t H = c->hidden;
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, norm, H, c->rms_eps);
	memset(f->blk, 0, (size_t)n * (size_t)H * sizeof(float));
	int rc = k->run(f, layer, n, f->blk);
	if (rc)
		return rc;
	for (int t = 0; t < n; t++) {
		uint8_t *fixed = seq_state_fixed(&f->seqs[f->row_seq[t]], 2 * layer + slot);
		float *y = f->blk + t * H, *x = f->x + t * H;
		sconv_row(y, y, ly->sconv[slot], (float *)(fixed + ly->sconv_off[slot]), H, c->sconv_kernel);
		for (int64_t i = 0; i < H; i++)
			x[i] += y[i];
	}
	return 0;
}
