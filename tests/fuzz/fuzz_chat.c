/*
 * fuzz_chat — choosing a chat template (chat_template_init in
 * engine/text/chat.c: the Jinja subset, else recognition of a built-in
 * format) and rendering (chat_template_render: engine/text/chat_jinja.c and
 * the C renderers of engine/text/chat_render.c). fuzz_jinja covers the
 * Jinja subset itself.
 *
 * Input: FLAGS TEMPLATE FUZZ_SEP MESSAGE FUZZ_SEP MESSAGE ...
 * FLAGS is one byte: bit 0 add_generation_prompt, bit 1 no_thinking,
 * bit 2 pass NULL options (the defaults; to a Jinja template, the same
 * defaults with the time pinned, see below), bits 3-7 a number PICK that
 * chooses the built-in renderings (below). TEMPLATE is the chat_template text
 * (empty: none, so the family comes from model_type). Each MESSAGE is a role
 * byte (its value mod 5 picks system, user, assistant, tool, or a role the
 * templates do not know, "function") followed by the content. Contents
 * are C strings: a NUL byte ends one early.
 *
 * The conversation is rendered with the template chosen for TEMPLATE (if
 * any), with the built-in template of one model_type (PICK mod 10), and
 * with one C renderer (PICK mod 6) under every combination of the variant
 * bits it reads. Rendering every built-in for every input spent nine
 * tenths of the time on the same fixed templates, and on libFuzzer's
 * bookkeeping of the features they touch; one chosen by the input is
 * reached by a one-byte mutation, and the corpus holds no_template_1 to
 * no_template_9 (PICK 1 to 9; no_template is PICK 0) and
 * chatml_default_conv_1, so that a replay still renders every built-in.
 * Beyond "no crash":
 *   - the choice either succeeds with a known family (a note saying why
 *     when it is a built-in one) or fails with -EINVAL and a message;
 *   - a rendering either fails with -EINVAL (-E2BIG for a template over the
 *     Jinja limits) and a message, or returns a NUL-terminated buffer of
 *     the length it reports; for the C renderers it starts with bos_token
 *     when the template writes it and contains every user message's
 *     content unchanged (a Jinja template may do anything with them);
 *   - rendering the same conversation twice with the chosen template gives
 *     the same bytes.
 */
#include <stdbool.h>

#include "engine/text/chat.h"
#include "engine/text/chat_internal.h"
#include "tests/fuzz/fuzz_util.h"

/* The variant bits each family's renderer reads (chat_internal.h). */
static const unsigned family_bits[] = {
	[CHAT_FAMILY_QWEN3] = CHAT_VARIANT_BOS | CHAT_VARIANT_QWEN3_NO_THINK | CHAT_VARIANT_QWEN3_OPEN_THINK,
	[CHAT_FAMILY_CHATML] = CHAT_VARIANT_BOS | CHAT_VARIANT_CHATML_NO_TOOL,
	[CHAT_FAMILY_TULU] = CHAT_VARIANT_BOS | CHAT_VARIANT_TULU3,
	[CHAT_FAMILY_MISTRAL] = CHAT_VARIANT_BOS | CHAT_VARIANT_MISTRAL_SYSTEM,
	[CHAT_FAMILY_DEEPSEEK_V3] = CHAT_VARIANT_BOS,
	[CHAT_FAMILY_GLM4] = CHAT_VARIANT_BOS | CHAT_VARIANT_GLM_USER_NL,
};

static const char *const roles[] = { "system", "user", "assistant", "tool", "function" };
static const char *const model_types[] = { "qwen3", "qwen3_moe", "olmoe", "mixtral", "deepseek_v3",
					   "glm4_moe", "deepseek_v32", "deepseek_v4", "glm_moe_dsa", "llama" };

/*
 * A Jinja template may call strftime_now, which formats chat_options.now or,
 * when that is 0, the clock. Every Jinja render gets this pinned time, so
 * that an input renders the same on every run (the clock would make two
 * runs from one -seed differ, and the two renders compared below differ
 * when they fall on either side of a second). NULL options (the library's
 * defaults) are given to the C renderers only, which read no clock; a
 * Jinja template gets those defaults with the time pinned.
 */
#define FUZZ_CHAT_NOW 1700000000
static const struct chat_options jinja_defaults = { .add_generation_prompt = true, .now = FUZZ_CHAT_NOW };

static void render_check(const struct chat_template *ct, const struct chat_message *m, size_t n,
			 const struct chat_options *opt, bool twice)
{
	if (!opt && ct->jinja)
		opt = &jinja_defaults;
	char *out = NULL, err[256] = "";
	size_t len = 12345;
	int rc = chat_template_render(ct, m, n, opt, &out, &len, err, sizeof err);
	if (rc) {
		FUZZ_ASSERT((rc == -EINVAL || (ct->jinja && rc == -E2BIG)) && err[0] && !out,
			    "%s: failure %d without a message", chat_family_name(ct->family), rc);
		return;
	}
	FUZZ_ASSERT(out && out[len] == 0 && (ct->jinja || strlen(out) == len), "%s: output of %zu bytes, strlen %zu",
		    chat_family_name(ct->family), len, out ? strlen(out) : 0);
	if (twice) {
		char *again;
		size_t len2;
		FUZZ_ASSERT(chat_template_render(ct, m, n, opt, &again, &len2, err, sizeof err) == 0 && len2 == len &&
			    memcmp(out, again, len) == 0, "%s: a second rendering differs", chat_family_name(ct->family));
		free(again);
	}
	if (ct->jinja) {
		free(out);
		return;
	}
	if (ct->variant & CHAT_VARIANT_BOS)
		FUZZ_ASSERT(strncmp(out, ct->bos, strlen(ct->bos)) == 0, "%s: output does not start with bos",
			    chat_family_name(ct->family));
	for (size_t i = 0; i < n; i++)
		if (strcmp(m[i].role, "user") == 0)
			FUZZ_ASSERT(strstr(out, m[i].content), "%s: user message %zu is missing from the prompt",
				    chat_family_name(ct->family), i);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[FUZZ_PARTS_MAX];
	size_t np = fuzz_split(data, size, parts, FUZZ_PARTS_MAX);
	if (parts[0].n == 0)
		return 0;
	uint8_t flags = (uint8_t)parts[0].p[0];
	struct fuzz_part tp = { parts[0].p + 1, parts[0].n - 1 };
	char *template = tp.n ? fuzz_strdup(tp) : NULL;

	struct chat_message msgs[FUZZ_PARTS_MAX];
	char *contents[FUZZ_PARTS_MAX];
	size_t n = 0;
	for (size_t i = 1; i < np; i++) {
		uint8_t r = parts[i].n ? (uint8_t)parts[i].p[0] : 1;
		contents[n] = fuzz_strdup(parts[i].n ? (struct fuzz_part){ parts[i].p + 1, parts[i].n - 1 } : parts[i]);
		msgs[n] = (struct chat_message){ roles[r % 5], contents[n] };
		n++;
	}
	struct chat_options o = { .add_generation_prompt = flags & 1, .no_thinking = flags & 2, .now = FUZZ_CHAT_NOW };
	const struct chat_options *opt = flags & 4 ? NULL : &o;
	const char *bos = "<s>", *eos = "</s>";

	struct chat_template ct;
	char err[256] = "";
	int rc = chat_template_init(&ct, template, NULL, bos, eos, err, sizeof err);
	if (rc) {
		FUZZ_ASSERT(rc == -EINVAL && err[0], "recognition failed with %d and no message", rc);
	} else {
		FUZZ_ASSERT(strcmp(chat_family_name(ct.family), "unknown") != 0, "recognised an unknown family");
		FUZZ_ASSERT((ct.family == CHAT_FAMILY_JINJA) == (ct.jinja != NULL), "family and template disagree");
		FUZZ_ASSERT(ct.jinja || ct.note[0], "a built-in renderer chosen without a note");
		render_check(&ct, msgs, n, opt, true);
		chat_template_free(&ct);
	}

	unsigned pick = flags >> 3;
	const char *model_type = model_types[pick % (sizeof model_types / sizeof model_types[0])];
	err[0] = 0;
	if (chat_template_init(&ct, NULL, model_type, bos, eos, err, sizeof err) == 0) {
		render_check(&ct, msgs, n, opt, false);
		chat_template_free(&ct);
	} else {
		FUZZ_ASSERT(err[0], "model_type %s refused without a message", model_type);
	}

	/* The picked renderer under every combination of the variant bits it
	 * reads; CHATML also with a default system prompt (the template text). */
	int f = CHAT_FAMILY_QWEN3 + (int)(pick % (CHAT_FAMILY_GLM4 - CHAT_FAMILY_QWEN3 + 1));
	unsigned bits = family_bits[f];
	for (unsigned v = bits;; v = (v - 1) & bits) {
		for (int sys = 0; sys <= (f == CHAT_FAMILY_CHATML && template); sys++) {
			struct chat_template t = { .family = (enum chat_family)f, .variant = v, .bos = (char *)bos,
						   .eos = (char *)eos, .default_system = sys ? template : NULL };
			render_check(&t, msgs, n, opt, false);
		}
		if (v == 0)
			break;
	}
	for (size_t i = 0; i < n; i++)
		free(contents[i]);
	free(template);
	return 0;
}
