/*
 * serve_auth — API keys and where the server may listen without one.
 *
 * A key is checked against "Authorization: Bearer KEY" in constant time:
 * the work depends on the length of what the client sent, never on where
 * it first differs from the key. Without a key the server binds only to
 * loopback addresses (unless the operator says --insecure-no-key).
 */
#ifndef COLIBRI_ENGINE_SERVE_AUTH_H
#define COLIBRI_ENGINE_SERVE_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* True when header (may be NULL) is "Bearer " followed by exactly key. */
bool serve_auth_ok(const char *key, const char *header);

/* Reads the key of a file: its first line, blanks around it trimmed. An
 * empty key is refused. *key is malloc'd. */
int serve_auth_read_key(const char *path, char **key);

/* True when every address host resolves to is a loopback one. */
bool serve_host_is_loopback(const char *host);

#endif
