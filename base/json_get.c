/*
 * json_get — see json_get.h.
 */
#include "base/json_get.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The offending value for a message: the number, or the start of its JSON. */
static void value_text(const cJSON *v, char *buf, size_t n)
{
	if (cJSON_IsNumber(v)) {
		snprintf(buf, n, "%.17g", v->valuedouble);
		return;
	}
	char *text = cJSON_PrintUnformatted(v);
	snprintf(buf, n, "%s", text ? text : "?");
	if (text && strlen(text) >= n && n > 4)
		memcpy(buf + n - 4, "...", 4);
	free(text);
}

int json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (lo < -JSON_INT_EXACT)
		lo = -JSON_INT_EXACT;
	if (hi > JSON_INT_EXACT)
		hi = JSON_INT_EXACT;
	if (!cJSON_IsNumber(v))
		return -EINVAL;
	double d = v->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
		return -EINVAL;
	*out = (int64_t)d;
	return 0;
}

int json_item_int(const cJSON *v, const char *src, const char *field, int64_t lo, int64_t hi, int64_t *out)
{
	if (json_int(v, lo, hi, out) == 0)
		return 0;
	char got[48];
	value_text(v, got, sizeof got);
	return error_set(EINVAL, "%s: %s must be an integer in [%lld, %lld], not %s", src, field,
			 (long long)(lo < -JSON_INT_EXACT ? -JSON_INT_EXACT : lo),
			 (long long)(hi > JSON_INT_EXACT ? JSON_INT_EXACT : hi), got);
}

int json_get_int(const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, const char *src,
		 int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		if (def == JSON_REQUIRED)
			return error_set(EINVAL, "%s: missing field %s", src, key);
		*out = def;
		return 0;
	}
	char field[96];
	snprintf(field, sizeof field, "field %s", key);
	return json_item_int(v, src, field, lo, hi, out);
}

int json_get_int32(const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, const char *src,
		   int32_t *out)
{
	int64_t v = 0;
	int rc = json_get_int(o, key, def, lo < INT32_MIN ? INT32_MIN : lo, hi > INT32_MAX ? INT32_MAX : hi, src, &v);
	if (!rc)
		*out = (int32_t)v;
	return rc;
}

int json_get_num(const cJSON *o, const char *key, double def, double lo, double hi, bool lo_open,
		 const char *src, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*out = def;
		return 0;
	}
	double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
	if (isfinite(d) && (lo_open ? d > lo : d >= lo) && d <= hi) {
		*out = d;
		return 0;
	}
	char got[48];
	value_text(v, got, sizeof got);
	return error_set(EINVAL, "%s: field %s must be a number in %s%g, %g], not %s", src, key, lo_open ? "(" : "[",
			 lo, hi, got);
}

int json_get_float(const cJSON *o, const char *key, double def, double lo, double hi, bool lo_open,
		   const char *src, float *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*out = (float)def;
		return 0;
	}
	double d;
	int rc = json_get_num(o, key, def, lo, hi, lo_open, src, &d);
	if (rc)
		return rc;
	float f = (float)d;
	if (!isfinite(f) || (lo_open ? f <= lo : f < lo) || f > hi)
		return error_set(EINVAL, "%s: field %s must be a number in %s%g, %g] as a float32, not %.17g", src, key,
				 lo_open ? "(" : "[", lo, hi, d);
	*out = f;
	return 0;
}

int json_get_bool(const cJSON *o, const char *key, bool def, const char *src, bool *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(v)) {
		char got[48];
		value_text(v, got, sizeof got);
		return error_set(EINVAL, "%s: field %s must be true or false, not %s", src, key, got);
	}
	*out = cJSON_IsTrue(v);
	return 0;
}
