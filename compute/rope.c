/*
 * rope — rotary position embedding of one head vector.
 *
 * The angle is pos * inv_freq[i] computed in f32, then its cos and sin
 * (fm_sincosf: ours, the same bits on every machine), as the Hugging Face
 * implementations do (they build cos/sin tables in f32), so positions far
 * into a long context round the same way as the reference.
 */
#include "compute/fmath.h"

#include "compute/kernels.h"

void rope(float *x, int64_t rot_dim, int64_t pos, const float *inv_freq, enum rope_kind kind)
{
	int64_t half = rot_dim / 2;
	for (int64_t i = 0; i < half; i++) {
		float theta = (float)pos * inv_freq[i];
		float c, s;
		fm_sincosf(theta, &s, &c);
		/* NEOX rotates (i, i + half); GPT-J rotates (2i, 2i + 1). */
		int64_t a = kind == ROPE_NEOX ? i : 2 * i;
		int64_t b = kind == ROPE_NEOX ? i + half : 2 * i + 1;
		float x0 = x[a], x1 = x[b];
		x[a] = x0 * c - x1 * s;
		x[b] = x1 * c + x0 * s;
	}
}
