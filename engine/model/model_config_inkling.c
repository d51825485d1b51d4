/*
 * model_config_inkling — Inkling's fields (being written).
 */
#include <errno.h>

#include "base/error.h"
#include "engine/model/model_config_internal.h"

int parse_inkling(struct model_config *cfg, const cJSON *j, const char *src)
{
	(void)cfg, (void)j;
	return error_set(ENOTSUP, "%s: Inkling is not supported yet", src);
}
