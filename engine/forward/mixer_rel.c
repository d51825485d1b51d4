/*
 * mixer_rel — MIXER_REL: Inkling's attention (being written).
 */
#include <errno.h>

#include "base/error.h"
#include "engine/forward/forward_internal.h"

static int rel_bind(void *wp, const struct model *m, int i)
{
	(void)wp;
	return error_set(ENOTSUP, "%s: layer %d: Inkling attention is not written yet", m->dir, i);
}

static void rel_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	(void)c, (void)layer, (void)batch, (void)ctx;
	*out = (struct block_sizes){ 0 };
}

static int rel_run(struct forward *f, int layer, int n, float *acc)
{
	(void)f, (void)layer, (void)n, (void)acc;
	return -ENOTSUP;
}

const struct block_kind block_rel = {
	.name = "rel",
	.id = 8,
	.weights_bytes = 1,
	.bind = rel_bind,
	.sizes = rel_sizes,
	.run = rel_run,
	.state_what = "K and V",
};
