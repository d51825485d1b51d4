/*
 * rope_freq — see rope_freq.h. YaRN follows transformers'
 * _compute_yarn_parameters: correction dims from beta_fast/beta_slow
 * (floor/ceil unless truncate is off, clamped to [0, dim-1]), a linear ramp over the pair index,
 * and inv_freq = interp * (1 - extrap_factor) + extrap * extrap_factor with
 * extrap_factor = 1 - ramp.
 */
#include "compute/rope_freq.h"

#include <math.h>
#include "compute/fmath.h"

void rope_freq_default(float *inv_freq, int64_t rot_dim, double theta)
{
	for (int64_t i = 0; i < rot_dim / 2; i++)
		inv_freq[i] = (float)(1.0 / fm_pow(theta, (double)(2 * i) / (double)rot_dim));
}

static double yarn_correction_dim(double rotations, int64_t dim, double theta, int64_t max_pos)
{
	return (double)dim * fm_log((double)max_pos / (rotations * 2 * M_PI)) / (2 * fm_log(theta));
}

void rope_freq_yarn(float *inv_freq, int64_t rot_dim, double theta, double factor,
		    double beta_fast, double beta_slow, int64_t original_max, bool truncate)
{
	double low = yarn_correction_dim(beta_fast, rot_dim, theta, original_max);
	double high = yarn_correction_dim(beta_slow, rot_dim, theta, original_max);
	if (truncate) {
		low = floor(low);
		high = ceil(high);
	}
	if (low < 0)
		low = 0;
	if (high > (double)(rot_dim - 1))
		high = (double)(rot_dim - 1);
	if (low == high)
		high += 0.001;
	for (int64_t i = 0; i < rot_dim / 2; i++) {
		double pos = fm_pow(theta, (double)(2 * i) / (double)rot_dim);
		double extrap = 1.0 / pos, interp = 1.0 / (factor * pos);
		double ramp = ((double)i - low) / (high - low);
		ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
		double extrap_factor = 1.0 - ramp;
		inv_freq[i] = (float)(interp * (1.0 - extrap_factor) + extrap * extrap_factor);
	}
}
