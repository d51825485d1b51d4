/*
 * cmd_tokenize — `colibri tokenize --model DIR (--text TEXT | --file F)
 * [--chat] [--system TEXT] [--chat-template JINJA | --chat-template-file F]`
 * prints the ids comma-separated on one line;
 * `colibri detokenize --model DIR --tokens IDS` prints the text.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/model_cache.h"
#include "base/files.h"
#include "engine/model/model_config.h"
#include "engine/text/prompt.h"
#include "engine/decode/session.h"
#include "engine/text/tokenizer.h"
#include "base/error.h"

int cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *text = NULL, *file = NULL, *system = NULL;
	bool chat = false;
	struct session_options so; /* only the chat template's two */
	session_options_default(&so);
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' }, { "text", required_argument, 0, 't' },
		{ "file", required_argument, 0, 'f' },  { "chat", no_argument, 0, 'c' },
		{ "system", required_argument, 0, 's' }, { "help", no_argument, 0, 'h' },
		{ "chat-template", required_argument, 0, SESSION_OPT_CHAT_TEMPLATE },
		{ "chat-template-file", required_argument, 0, SESSION_OPT_CHAT_TEMPLATE_FILE },
		{ 0, 0, 0, 0 },
	};
	int ch;
	if (cli_alias_apply("tokenize", &argc, &argv, "h", opts))
		return 2;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'm': model = optarg; break;
		case 't': text = optarg; break;
		case 'f': file = optarg; break;
		case 'c': chat = true; break;
		case 's': system = optarg; break;
		case SESSION_OPT_CHAT_TEMPLATE:
		case SESSION_OPT_CHAT_TEMPLATE_FILE:
			session_option(&so, ch, optarg);
			break;
		default:
			fprintf(ch == 'h' ? stdout : stderr,
				"usage: colibri tokenize --model DIR (--text TEXT | --file F) [--chat] [--system TEXT]\n"
				"                        [--chat-template JINJA | --chat-template-file F]\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	if (!model)
		return cmd_usage_error("tokenize", "needs --model DIR (the tokenizer is the model's)");
	if (!text == !file)
		return cmd_usage_error("tokenize", "give one of --text TEXT and --file F");
	if (optind != argc)
		return cmd_usage_error("tokenize", "unexpected argument (the text goes after --text)");
	if (model_cache_use(&model))
		return cmd_fail("no model");
	char *buf = NULL;
	struct tokenizer *tok = NULL;
	struct model_config cfg;
	int32_t *ids = NULL;
	int n = 0;
	size_t len = text ? strlen(text) : 0;
	int rc = file ? file_read_input(file, &buf, &len) : 0;
	/* The family matters only to choose a chat template. */
	if (!rc && chat)
		rc = model_config_load(&cfg, model);
	if (!rc)
		rc = prompt_tokenizer_load(&tok, model);
	if (!rc)
		rc = session_chat_template(&so, tok);
	if (!rc)
		rc = prompt_encode(tok, chat ? cfg.model_type : NULL, file ? buf : text, len, chat, system, &ids, &n);
	for (int i = 0; !rc && i < n; i++)
		printf("%s%d", i ? "," : "", ids[i]);
	if (!rc)
		printf("\n");
	free(ids);
	free(buf);
	tokenizer_free(tok);
	return rc ? cmd_fail("tokenize failed") : 0;
}

int cmd_detokenize(int argc, char **argv)
{
	const char *model = NULL, *tokens = NULL;
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' }, { "tokens", required_argument, 0, 't' },
		{ "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 },
	};
	int ch;
	if (cli_alias_apply("detokenize", &argc, &argv, "h", opts))
		return 2;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == 'm')
			model = optarg;
		else if (ch == 't')
			tokens = optarg;
		else {
			fprintf(ch == 'h' ? stdout : stderr, "usage: colibri detokenize --model DIR --tokens IDS\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	if (!model)
		return cmd_usage_error("detokenize", "needs --model DIR (the tokenizer is the model's)");
	if (!tokens || optind != argc)
		return cmd_usage_error("detokenize", "needs --tokens IDS (comma-separated), and nothing else");
	if (model_cache_use(&model))
		return cmd_fail("no model");
	struct tokenizer *tok = NULL;
	int32_t *ids = NULL;
	int n = 0;
	char *text = NULL;
	size_t len = 0;
	int rc = prompt_tokenizer_load(&tok, model);
	if (!rc)
		rc = session_parse_tokens(tokens, &ids, &n);
	/* An id the tokenizer does not know has no text: refused, as run
	 * refuses it, rather than printed as nothing. */
	for (int i = 0; !rc && i < n; i++)
		if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(tok))
			rc = error_set(EINVAL, "token id %d is outside the tokenizer's vocabulary of %d (%s)", ids[i],
				       tokenizer_vocab_size(tok), model);
	if (!rc && (rc = tokenizer_decode(tok, ids, (size_t)n, &text, &len)) != 0)
		rc = error_set(-rc, "cannot decode the tokens");
	if (!rc) {
		fwrite(text, 1, len, stdout);
		printf("\n");
	}
	free(text);
	free(ids);
	tokenizer_free(tok);
	return rc ? cmd_fail("detokenize failed") : 0;
}
