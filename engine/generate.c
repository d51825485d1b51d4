/*
 * generate — see generate.h.
 */
#include "engine/generate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/files.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "storage/error.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void generate_options_default(struct generate_options *o, const char *model_dir)
{
	memset(o, 0, sizeof *o);
	o->n_predict = 128;
	o->temp = 0;
	o->top_p = 1;
	o->seed = (uint64_t)time(NULL);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
	cJSON *j = NULL;
	if (access(path, F_OK) != 0 || json_load(path, &j) != 0) {
		error_clear();
		return;
	}
	const cJSON *ds = cJSON_GetObjectItemCaseSensitive(j, "do_sample");
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "temperature");
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "top_k");
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "top_p");
	if (cJSON_IsTrue(ds)) {
		o->temp = cJSON_IsNumber(t) && t->valuedouble >= 0 ? (float)t->valuedouble : 1.0f;
		o->top_k = cJSON_IsNumber(k) && k->valuedouble >= 0 ? (int32_t)k->valuedouble : 0;
		o->top_p = cJSON_IsNumber(p) && p->valuedouble > 0 && p->valuedouble <= 1
				   ? (float)p->valuedouble : 1.0f;
	}
	cJSON_Delete(j);
}

static bool is_eos(const struct model_config *c, const struct tokenizer *tok, int32_t id)
{
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return tok && tokenizer_eos_id(tok) == id;
}

int generate_run(struct session *s, const struct tokenizer *tok, const int32_t *prompt,
		 int n_prompt, const struct generate_options *o, FILE *out, struct generate_stats *st)
{
	const struct model_config *c = &s->model.cfg;
	struct sampler smp;
	struct tokenizer_stream ts;
	bool have_stream = false;
	memset(st, 0, sizeof *st);
	st->n_prompt = n_prompt;
	float *logits = malloc((size_t)c->vocab * sizeof(float));
	int rc = logits ? sampler_init(&smp, c->vocab, o->temp, o->top_k, o->top_p, o->seed)
			: error_set(ENOMEM, "out of memory");
	if (rc) {
		free(logits);
		return rc;
	}
	if (tok && !o->print_ids) {
		if ((rc = tokenizer_stream_init(&ts, tok)) != 0) {
			rc = error_set(-rc, "cannot start the text stream");
			goto out;
		}
		have_stream = true;
	}
	double t0 = now_s();
	rc = forward_tokens(&s->fwd, prompt, n_prompt, logits, false);
	st->prefill_s = now_s() - t0;
	double t1 = now_s();
	for (int i = 0; !rc && i < o->n_predict; i++) {
		int32_t id = sampler_sample(&smp, logits);
		if (i == 0)
			st->first_token_s = now_s() - t0;
		if (is_eos(c, tok, id)) {
			st->stopped_at_eos = true;
			break;
		}
		st->n_generated++;
		if (have_stream) {
			const char *text;
			size_t len;
			if (tokenizer_stream_put(&ts, id, &text, &len) == 0 && len)
				fwrite(text, 1, len, out);
		} else {
			fprintf(out, "%s%d", i ? "," : "", id);
		}
		fflush(out);
		if (i + 1 < o->n_predict)
			rc = forward_step(&s->fwd, &id, 1, logits, false);
		if (i % 16 == 15)
			session_safe_point(s);
	}
	st->decode_s = now_s() - t1;
	if (have_stream) {
		const char *text;
		size_t len;
		if (tokenizer_stream_flush(&ts, &text, &len) == 0 && len)
			fwrite(text, 1, len, out);
	}
	fputc('\n', out);
	fflush(out);
out:
	if (have_stream)
		tokenizer_stream_free(&ts);
	sampler_free(&smp);
	free(logits);
	return rc;
}

void generate_stats_print(const struct generate_stats *st, FILE *f)
{
	fprintf(f, "prompt: %d tokens in %.3f s (%.2f tok/s)\n", st->n_prompt, st->prefill_s,
		st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0);
	fprintf(f, "decode: %d tokens in %.3f s (%.2f tok/s)%s\n", st->n_generated, st->decode_s,
		st->decode_s > 0 ? st->n_generated / st->decode_s : 0, st->stopped_at_eos ? ", stopped at EOS" : "");
	fprintf(f, "time to first token: %.3f s\n", st->first_token_s);
}

void generate_stats_record(const struct generate_stats *st, struct session *s)
{
	session_stat(s, "prompt_tokens", st->n_prompt);
	session_stat(s, "generated_tokens", st->n_generated);
	session_stat(s, "prefill_s", st->prefill_s);
	session_stat(s, "decode_s", st->decode_s);
	session_stat(s, "prompt_tok_s", st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0);
	session_stat(s, "decode_tok_s", st->decode_s > 0 ? st->n_generated / st->decode_s : 0);
	session_stat(s, "time_to_first_token_s", st->first_token_s);
}
