/*
 * json_schema_numbers — JSON numbers and integers in a range as GBNF:
 * exact digit-range rules for integer bounds (each magnitude split into
 * runs of equal length), fractional bounds widened to the integers around
 * them with a warning.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/grammar/json_schema_internal.h"

/* ---- numbers ---- */

static int ndigits(int64_t v)
{
	int n = 1;
	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

static int64_t pow10i(int k)
{
	int64_t p = 1;
	while (k-- > 0)
		p *= 10;
	return p;
}

static const char nines[] = "9999999999999999";
static const char zeros[] = "0000000000000000";

/* Digit strings a..z of n digits each (leading zeros allowed inside). */
static void digits_range(struct strbuf *b, const char *a, const char *z, int n)
{
	if (n == 0)
		return;
	if (a[0] == z[0]) {
		strbuf_printf(b, "\"%c\"", a[0]);
		if (n > 1) {
			strbuf_put(b, " ", 1);
			digits_range(b, a + 1, z + 1, n - 1);
		}
		return;
	}
	bool low_full = !strncmp(a + 1, zeros, (size_t)n - 1);
	bool high_full = !strncmp(z + 1, nines, (size_t)n - 1);
	if (low_full && high_full) {
		strbuf_printf(b, "[%c-%c]", a[0], z[0]);
		if (n > 1)
			strbuf_printf(b, " [0-9]{%d}", n - 1);
		return;
	}
	strbuf_put(b, "( ", 2);
	int lo = a[0], hi = z[0];
	int alts = 0;
	if (!low_full) {
		strbuf_printf(b, "\"%c\" ", a[0]);
		digits_range(b, a + 1, nines, n - 1);
		lo++;
		alts++;
	}
	if (!high_full)
		hi--;
	if (lo <= hi) {
		strbuf_printf(b, "%s[%c-%c]", alts++ ? " | " : "", lo, hi);
		if (n > 1)
			strbuf_printf(b, " [0-9]{%d}", n - 1);
	}
	if (!high_full) {
		strbuf_printf(b, "%s\"%c\" ", alts++ ? " | " : "", z[0]);
		digits_range(b, zeros, z + 1, n - 1);
	}
	strbuf_put(b, " )", 2);
}

/* The decimal forms (no leading zeros) of the integers in [lo, hi], 0 <= lo <= hi <= INT_MAG_MAX. */
static const char *int_range(struct gen *g, int64_t lo, int64_t hi)
{
	struct strbuf b = { 0 };
	int nlo = ndigits(lo), nhi = ndigits(hi), alts = 0;
	for (int k = nlo; k <= nhi; k++) {
		int64_t a = k == nlo ? lo : pow10i(k - 1);
		int64_t z = k == nhi ? hi : pow10i(k) - 1;
		if (alts++)
			strbuf_put(&b, " | ", 3);
		if (k > 1 && a == pow10i(k - 1) && z == pow10i(k) - 1) {
			int k2 = k;
			while (k2 + 1 <= nhi && (k2 + 1 < nhi || hi == pow10i(k2 + 1) - 1))
				k2++;
			if (k2 == k)
				strbuf_printf(&b, "[1-9] [0-9]{%d}", k - 1);
			else
				strbuf_printf(&b, "[1-9] [0-9]{%d,%d}", k - 1, k2 - 1);
			k = k2;
			continue;
		}
		char sa[24], sz[24];
		snprintf(sa, sizeof sa, "%lld", (long long)a);
		snprintf(sz, sizeof sz, "%lld", (long long)z);
		digits_range(&b, sa, sz, k);
	}
	return js_alternatives(g, &b, alts);
}

#define FRAC_ANY "( \".\" [0-9]{1,16} )?"
#define FRAC_ZERO "( \".\" \"0\"{1,16} )?"
#define FRAC_NONZERO "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}"

/*
 * Magnitudes m (no sign) in the range from a to b (both integers, 0 <= a <=
 * b <= INT_MAG_MAX; b_inf: no upper bound), each end open when *_excl.
 * Integers only when !frac. Appends alternatives to b; returns their count.
 */
static int mag_range(struct gen *g, struct strbuf *b, int alts, int64_t a, bool a_excl, int64_t z,
		     bool z_excl, bool z_inf, bool frac)
{
	const char *sep = " | ";
	int64_t start = a;
	if (a_excl) {
		if (frac) {
			if (z_inf || a < z)
				strbuf_printf(b, "%s\"%lld\" " FRAC_NONZERO, alts++ ? sep : "", (long long)a);
		}
		start = a + 1;
	}
	if (z_inf) {
		const char *r = int_range(g, start, INT_MAG_MAX);
		if (r)
			strbuf_printf(b, "%s%s%s", alts++ ? sep : "", r, frac ? " " FRAC_ANY : "");
		return alts;
	}
	int64_t last = frac || z_excl ? z - 1 : z;
	if (start <= last) {
		const char *r = int_range(g, start, last);
		if (r)
			strbuf_printf(b, "%s%s%s", alts++ ? sep : "", r, frac ? " " FRAC_ANY : "");
	}
	if (frac && !z_excl && start <= z)
		strbuf_printf(b, "%s\"%lld\" " FRAC_ZERO, alts++ ? sep : "", (long long)z);
	return alts;
}

/* Reads a numeric bound; false when absent. Draft-04 boolean exclusive flags are folded in. */
static bool bound_get(const cJSON *s, const char *key, const char *excl_key, double *v, bool *excl)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, key);
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, excl_key);
	bool have = false;
	*excl = false;
	if (cJSON_IsNumber(n)) {
		*v = n->valuedouble;
		have = true;
		if (cJSON_IsTrue(e))
			*excl = true;
	}
	if (cJSON_IsNumber(e) && (!have || e->valuedouble >= *v) && strcmp(key, "minimum") == 0) {
		*v = e->valuedouble;
		*excl = true;
		have = true;
	} else if (cJSON_IsNumber(e) && (!have || e->valuedouble <= *v) && strcmp(key, "maximum") == 0) {
		*v = e->valuedouble;
		*excl = true;
		have = true;
	}
	return have;
}

/* A number or integer schema with bounds. */
const char *js_visit_number(struct gen *g, const cJSON *s, bool integer, const char *path)
{
	double lo = 0, hi = 0;
	bool lo_excl, hi_excl;
	bool has_lo = bound_get(s, "minimum", "exclusiveMinimum", &lo, &lo_excl);
	bool has_hi = bound_get(s, "maximum", "exclusiveMaximum", &hi, &hi_excl);
	if ((has_lo && !isfinite(lo)) || (has_hi && !isfinite(hi))) {
		js_fail(g, EINVAL, "a bound at %s is not a finite number", js_at(path));
		return NULL;
	}
	if (!has_lo && !has_hi)
		return js_prim(g, integer ? PRIM_INTEGER : PRIM_NUMBER);
	if (integer) {
		/* Fold the bounds into a closed integer range. */
		if (has_lo) {
			double c = ceil(lo);
			lo = lo_excl && c == lo ? c + 1 : c;
			lo_excl = false;
		}
		if (has_hi) {
			double f = floor(hi);
			hi = hi_excl && f == hi ? f - 1 : f;
			hi_excl = false;
		}
	} else {
		/* Fractional bounds are widened to the integers around them (looser, never stricter). */
		if (has_lo && lo != floor(lo)) {
			js_warn(g, "minimum %g at %s is enforced as %g", lo, js_at(path), floor(lo));
			lo = floor(lo);
			lo_excl = false;
		}
		if (has_hi && hi != floor(hi)) {
			js_warn(g, "maximum %g at %s is enforced as %g", hi, js_at(path), ceil(hi));
			hi = ceil(hi);
			hi_excl = false;
		}
	}
	/* Beyond 16 digits the number grammar has no values: such bounds are no bounds. */
	const double beyond = 1e16;
	if ((has_lo && lo >= beyond) || (has_hi && hi <= -beyond)) {
		js_fail(g, EINVAL, "the bounds at %s are beyond 16 digits", js_at(path));
		return NULL;
	}
	if (has_lo && lo <= -beyond)
		has_lo = false;
	if (has_hi && hi >= beyond)
		has_hi = false;
	if (!has_lo && !has_hi)
		return js_prim(g, integer ? PRIM_INTEGER : PRIM_NUMBER);
	if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_excl || hi_excl)))) {
		js_fail(g, EINVAL, "no %s satisfies the bounds at %s", integer ? "integer" : "number", js_at(path));
		return NULL;
	}
	struct strbuf b = { 0 };
	int alts = 0;
	bool frac = !integer;
	/* Negative values: "-" then the magnitude range. */
	if (!has_lo || lo < 0) {
		int64_t a = has_hi && hi < 0 ? (int64_t)-hi : 0;
		bool a_excl = has_hi && hi < 0 ? hi_excl : true;
		if (integer && a_excl) {
			a++;
			a_excl = false;
		}
		int64_t z = has_lo ? (int64_t)-lo : INT_MAG_MAX;
		struct strbuf m = { 0 };
		int n = mag_range(g, &m, 0, a, a_excl, z, has_lo && lo_excl, !has_lo, frac);
		if (n)
			strbuf_printf(&b, "%s\"-\" %s%s%s", alts++ ? " | " : "", n > 1 ? "( " : "", m.p,
				      n > 1 ? " )" : "");
		strbuf_free(&m);
	}
	/* Zero and positive values. */
	if (!has_hi || hi >= 0) {
		int64_t a = has_lo && lo > 0 ? (int64_t)lo : 0;
		bool a_excl = has_lo && lo >= 0 ? lo_excl : false;
		int64_t z = has_hi ? (int64_t)hi : INT_MAG_MAX;
		alts = mag_range(g, &b, alts, a, a_excl, z, has_hi && hi_excl, !has_hi, frac);
	}
	if (!alts) {
		strbuf_free(&b);
		js_fail(g, EINVAL, "no %s satisfies the bounds at %s", integer ? "integer" : "number", js_at(path));
		return NULL;
	}
	return js_alternatives(g, &b, alts);
}

/* ---- the walk ---- */

