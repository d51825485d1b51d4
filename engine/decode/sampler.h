/*
 * sampler — picks the next token from logits. The stages, in the order
 * transformers v5.15.0 applies them (generation/utils.py builds its
 * processors, then, when sampling, its warpers):
 *   1. penalties, on the logits, greedy or not: the repetition penalty
 *      (RepetitionPenaltyLogitsProcessor: a logit l of each distinct token
 *      among the last repeat_last_n of prompt and generation becomes l * p
 *      when l < 0, else l / p), then OpenAI's presence and frequency
 *      penalties on the generated tokens (vLLM's order);
 *   2. greedy at temperature 0 (the argmax of the penalised logits);
 *   3. else temperature, top-k, top-p (nucleus) and min-p (MinPLogitsWarper:
 *      drop tokens whose probability is below min_p times the largest, on
 *      what top-p kept), with a seeded generator, so a given seed
 *      reproduces a run.
 * Top-k keeps exactly k tokens, the lower id on ties. llama.cpp's default
 * chain orders these differently: penalties, top-k, top-p, min-p, and
 * temperature last. Top-k and the cuts on a ranking are the same either
 * way, but its top-p and min-p see the probabilities at temperature 1:
 * min-p keeps l >= l_max + log(min_p) there and l >= l_max + T log(min_p)
 * here, so a given --min-p keeps fewer tokens here below temperature 1 and
 * more above it (and top-p likewise differs). The repeat window
 * (repeat_last_n) is llama.cpp's: transformers penalises the whole
 * context, which repeat_last_n -1 gives. run and chat default to 64 for a
 * --repeat-penalty given by hand (llama.cpp's habit) and to the whole
 * context for the model's own generation_config.json penalty (the
 * reference's); serve likewise by the field's name (serve_request.c).
 *
 * Also here: the accept/reject step of speculative sampling. Buffers are
 * sized once at init for the vocabulary; sampling and the penalties
 * allocate nothing.
 */
#ifndef COLIBRI_ENGINE_SAMPLER_H
#define COLIBRI_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

/* Each stage off at its neutral value. */
struct sampler_params {
	float temp;              /* 0 = greedy */
	int32_t top_k;           /* 0 = off */
	float top_p;             /* 1 = off */
	float min_p;             /* 0 = off; in [0, 1] */
	float repeat_penalty;    /* 1 = off (0 too, for zeroed structs); else > 0 */
	int32_t repeat_last_n;   /* tokens of the history it looks back on: 0 none, -1 all */
	float presence;          /* subtracted from the logit of each generated token */
	float frequency;         /* ... times how often it was generated */
};

struct sampler {
	int32_t vocab;
	float temp;
	int32_t top_k;
	float top_p;
	float min_p;
	float repeat_penalty;    /* 1 when off */
	int32_t repeat_last_n;
	float presence, frequency;
	uint64_t rng;
	int32_t *idx;            /* [vocab] candidates */
	float *prob;             /* [vocab] probabilities; between calls, the repeat penalty's scratch */
};

/* -EINVAL naming the option for a value out of range; the caller frees
 * with sampler_free, which a failed init needs not. */
int sampler_init(struct sampler *s, int32_t vocab, const struct sampler_params *p, uint64_t seed);
void sampler_free(struct sampler *s);

/* Returns the chosen id; logits[vocab] may be overwritten. */
int32_t sampler_sample(struct sampler *s, float *logits);

/* The distribution sampler_sample draws from, dense: probs[vocab], zero
 * outside the top-k / top-p / min-p set (a one-hot argmax at temperature 0).
 * logits may be overwritten. */
void sampler_probs(struct sampler *s, float *logits, float *probs);

/* Draws an id from a dense distribution (need not sum exactly to 1). */
int32_t sampler_draw(struct sampler *s, const float *probs);

/* A uniform float in [0, 1) from the sampler's generator. */
float sampler_uniform(struct sampler *s);

/* The speculative-sampling verify step for one draft token, which was drawn
 * from q[vocab] and is checked against the target p[vocab]: accepts it with
 * probability min(1, p[draft] / q[draft]), else returns a token drawn from
 * max(0, p - q) normalised (from p where rounding leaves that empty). The
 * output is then distributed as p. Draws one uniform only when p[draft] <
 * q[draft], and one more on rejection; p may be overwritten. *accepted says
 * which happened. */
int32_t sampler_spec_verify(struct sampler *s, float *p, const float *q, int32_t draft, bool *accepted);

/* Whether any penalty is on: sampler_penalties would change logits. */
bool sampler_penalizes(const struct sampler *s);

/* Stage 1 on logits x[vocab], before sampler_sample or sampler_probs:
 * the repetition penalty over hist[n_hist] (prompt then generated tokens,
 * oldest first; ids outside the vocabulary are skipped), then presence and
 * frequency from counts[vocab] (generated tokens only; may be NULL when
 * both are 0). O(min(n_hist, repeat_last_n)) plus O(vocab) for counts. */
void sampler_penalties(struct sampler *s, float *x, const int32_t *hist, int n_hist, const uint16_t *counts);

/* The repetition penalty alone: x[t] < 0 ? x[t] * penalty : x[t] / penalty
 * once for each distinct t among the last last_n of hist[n_hist] (0: none,
 * -1: all). Uses s->prob as scratch. */
void sampler_repeat_penalize(struct sampler *s, float *x, const int32_t *hist, int n_hist, float penalty,
			     int32_t last_n);

/* OpenAI's presence and frequency penalties on logits x[vocab], before any
 * temperature: x[v] -= presence + frequency * counts[v] for each token
 * generated so far (counts[v] > 0); the others are untouched. */
void sampler_penalize(float *x, const uint16_t *counts, int32_t vocab, float presence, float frequency);

/* Index of the largest logit, lowest index on ties. */
int32_t sampler_argmax(const float *logits, int32_t n);

#endif
