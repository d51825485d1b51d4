/*
 * rope_freq — the per-pair frequencies of rotary embeddings: the original
 * theta^(-2i/d), and YaRN's blend of interpolated and extrapolated
 * frequencies (DeepSeek-V3), computed as transformers' rope init functions
 * do so that positions rotate by the same angles.
 */
#ifndef COLIBRI_COMPUTE_ROPE_FREQ_H
#define COLIBRI_COMPUTE_ROPE_FREQ_H

#include <stdbool.h>
#include <stdint.h>

/* inv_freq[i] = theta^(-2i / rot_dim), i < rot_dim / 2. */
void rope_freq_default(float *inv_freq, int64_t rot_dim, double theta);

/* YaRN: frequencies below the beta_slow..beta_fast correction range are
 * divided by factor, those above kept, with a linear ramp between;
 * original_max is the pre-training context; truncate floors / ceils the
 * range's ends (transformers' default; gpt-oss sets it false). */
void rope_freq_yarn(float *inv_freq, int64_t rot_dim, double theta, double factor,
		    double beta_fast, double beta_slow, int64_t original_max, bool truncate);

#endif
