/*
 * sampler — picks the next token from logits: greedy at temperature 0,
 * otherwise temperature, top-k and top-p (nucleus) sampling with a seeded
 * generator, so a given seed reproduces a run. Buffers are sized once at
 * init for the vocabulary; sampling allocates nothing.
 */
#ifndef COLIBRI_ENGINE_SAMPLER_H
#define COLIBRI_ENGINE_SAMPLER_H

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

/* Index of the largest logit, lowest index on ties. */
int32_t sampler_argmax(const float *logits, int32_t n);

#endif
