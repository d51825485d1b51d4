/*
 * serve_auth — see serve_auth.h.
 */
#include "engine/serve/serve_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/error.h"
#include "base/files.h"

bool serve_auth_ok(const char *key, const char *header)
{
	static const char bearer[] = "Bearer ";
	if (!header || strncmp(header, bearer, sizeof bearer - 1) != 0)
		return false;
	const unsigned char *given = (const unsigned char *)header + sizeof bearer - 1;
	size_t n = strlen((const char *)given), k = strlen(key);
	volatile unsigned char diff = (unsigned char)(n != k);
	for (size_t i = 0; i < n; i++)
		diff |= given[i] ^ (unsigned char)key[k ? i % k : 0];
	return diff == 0 && k > 0;
}

int serve_auth_read_key(const char *path, char **key)
{
	char *text = NULL;
	size_t len = 0;
	int rc = file_read_all(path, &text, &len);
	if (rc)
		return error_set(-rc, "%s: cannot read the API key file", path);
	size_t s = 0, e = strcspn(text, "\r\n");
	while (s < e && (text[s] == ' ' || text[s] == '\t'))
		s++;
	while (e > s && (text[e - 1] == ' ' || text[e - 1] == '\t'))
		e--;
	if (e == s) {
		free(text);
		return error_set(EINVAL, "%s: the API key file is empty", path);
	}
	memmove(text, text + s, e - s);
	text[e - s] = 0;
	*key = text;
	return 0;
}

bool serve_host_is_loopback(const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
		return false;
	bool all = true;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			uint32_t ip = ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr);
			all = all && (ip >> 24) == 127;
		} else if (a->ai_family == AF_INET6) {
			all = all && IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr);
		} else {
			all = false;
		}
	}
	freeaddrinfo(res);
	return all;
}
