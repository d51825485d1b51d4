/*
 * sampler — picks the next token from logits: greedy at temperature 0,
 * otherwise temperature, top-k and top-p (nucleus) sampling, in that order
 * as transformers' warpers apply them, with a seeded generator, so a given
 * seed reproduces a run. Top-k keeps exactly k tokens, the lower id on
 * ties. Also here: OpenAI's presence and frequency penalties, applied to the
 * logits before all of that, and the accept/reject step of speculative
 * sampling. Buffers are sized once at init for the vocabulary; sampling
 * allocates nothing.
 */
#ifndef COLIBRI_ENGINE_SAMPLER_H
#define COLIBRI_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

struct sampler {
	int32_t vocab;
	float temp;          /* 0 = greedy */
	int32_t top_k;       /* 0 = off */
	float top_p;         /* 1 = off */
	uint64_t rng;
	int32_t *idx;        /* [vocab] candidates */
	float *prob;         /* [vocab] */
};

int sampler_init(struct sampler *s, int32_t vocab, float temp, int32_t top_k, float top_p,
		 uint64_t seed);
void sampler_free(struct sampler *s);

/* Returns the chosen id; logits[vocab] may be overwritten. */
int32_t sampler_sample(struct sampler *s, float *logits);

/* The distribution sampler_sample draws from, dense: probs[vocab], zero
 * outside the top-k / top-p set (a one-hot argmax at temperature 0).
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

/* OpenAI's presence and frequency penalties on logits x[vocab], before any
 * temperature: x[v] -= presence + frequency * counts[v] for each token
 * generated so far (counts[v] > 0); the others are untouched. */
void sampler_penalize(float *x, const uint16_t *counts, int32_t vocab, float presence, float frequency);

/* Index of the largest logit, lowest index on ties. */
int32_t sampler_argmax(const float *logits, int32_t n);

#endif
