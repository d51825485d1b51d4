/*
 * json_get — checked reads of numbers and booleans from parsed JSON, with
 * errors that name the file and the field.
 *
 * Every JSON integer colibri reads goes through json_int: a number that is
 * finite, integral and inside [lo, hi], with the range itself clamped to
 * +-2^53 where every integer is exact in a double. So no out-of-range
 * double -> int conversion (undefined behaviour in C) can happen on any
 * input, and 1e30, 3e9 or 1.5 where an int32 is expected is an error, not a
 * wrapped or truncated value.
 */
#ifndef COLIBRI_ENGINE_JSON_GET_H
#define COLIBRI_ENGINE_JSON_GET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* Largest magnitude of an integer a double holds exactly. */
#define JSON_INT_EXACT 9007199254740992LL

/* `def` of json_get_int for a field that must be present. */
#define JSON_REQUIRED INT64_MIN

/* *out = v's value when v is a finite integral number in [lo, hi]; else
 * -EINVAL and *out untouched. Sets no message (for callers with their own
 * error reporting). */
int json_int(const struct cJSON *v, int64_t lo, int64_t hi, int64_t *out);

/* json_int, or -EINVAL with "SRC: FIELD must be an integer in [lo, hi], not
 * V". `field` is what the message calls v ("eos_token_id[2]"). */
int json_item_int(const struct cJSON *v, const char *src, const char *field, int64_t lo, int64_t hi,
		  int64_t *out);

/* Member `key` of object o as json_item_int; absent or null gives def, or
 * "SRC: missing field KEY" when def is JSON_REQUIRED. */
int json_get_int(const struct cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, const char *src,
		 int64_t *out);

/* The same for an int32_t destination; [lo, hi] must lie inside int32_t. */
int json_get_int32(const struct cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, const char *src,
		   int32_t *out);

/* Member `key` as a finite number in [lo, hi] (lo excluded when lo_open);
 * absent or null gives def. Else -EINVAL with "SRC: field KEY must be a
 * number in (lo, hi], not V". */
int json_get_num(const struct cJSON *o, const char *key, double def, double lo, double hi, bool lo_open,
		 const char *src, double *out);

/* json_get_num for a float destination: the value must also be in range
 * once rounded to float32 (1e-320 is a positive double but 0 as a float).
 * Absent or null gives def as it is. */
int json_get_float(const struct cJSON *o, const char *key, double def, double lo, double hi, bool lo_open,
		   const char *src, float *out);

/* Member `key` as true or false; absent or null gives def. */
int json_get_bool(const struct cJSON *o, const char *key, bool def, const char *src, bool *out);

/* Looks for an object anywhere under root (root included) that holds one
 * key twice. cJSON keeps both members and its lookups find the first, where
 * Python and JavaScript keep the last, so a body with duplicates means one
 * thing to colibri and another to a proxy that checked it: callers refuse
 * it. Returns 1 with path[0..n) set to where the second one is
 * ("messages[0].content", or "model" at the top), 0 when every object's
 * keys differ, -ENOMEM, or -E2BIG past cJSON's nesting limit. No recursion;
 * O(k log k) for an object of k keys (sorted key pointers), so a 4 MB body
 * of 100k keys costs milliseconds. Sets no message. */
int json_find_duplicate_key(const struct cJSON *root, char *path, size_t n);

#endif
