/*
 * draft_policy — what `--draft auto` decides before each decode step:
 * verify MTP drafts, or run one plain token. A cost model fed by what the
 * steps themselves measured; no clock and no I/O here, so the decision is a
 * pure function of the samples it is given.
 *
 * Each mode keeps its last DRAFT_POLICY_WINDOW steps: compute (wall time
 * less disk wait; the median, so that a step preempted on a shared core
 * does not move the verdict), experts missed (the mean), disk wait per
 * miss (the median over steps that missed). Then
 *
 *     plain per token = compute_p + misses_p * miss_s_p
 *     draft per token = (compute_d + misses_d * miss_s_d) / E,
 *     E = sum_{i=0..n} a^i, a = acceptance per draft position
 *
 * and drafting pays when its cost per token is below plain's. compute_d
 * covers the verify forward of n + 1 positions, the MTP pairs and the next
 * drafts; misses_d the wider expert set they need. The mode that is not
 * running keeps its last window, with its misses scaled by how far the
 * running mode's miss rate has moved since (the cache warms or cools for
 * both); when that estimate says the other mode wins, it is tried.
 *
 * Decoding opens with a trial of DRAFT_POLICY_DRAFT_STEPS drafting steps
 * while the MTP cache is still fresh from the prefill (the one moment the
 * acceptance is measured undisturbed), then runs plain. The losing mode is
 * re-tried after a backoff that starts at DRAFT_POLICY_BACKOFF_MIN tokens
 * and doubles each time the trial loses, so a model on which drafting never
 * pays spends a few steps per doubling drafting.
 */
#ifndef COLIBRI_ENGINE_DRAFT_POLICY_H
#define COLIBRI_ENGINE_DRAFT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define DRAFT_POLICY_DRAFT_STEPS 2      /* drafting steps before they are judged */
#define DRAFT_POLICY_PLAIN_STEPS 4      /* plain steps before they are judged: a median of 4 */
#define DRAFT_POLICY_BACKOFF_MIN 128    /* tokens before the losing mode is re-tried */
#define DRAFT_POLICY_BACKOFF_MAX 8192
#define DRAFT_POLICY_MARGIN 0.10        /* drafting must win by this on an estimate */

enum draft_mode {
	DRAFT_MODE_PLAIN,
	DRAFT_MODE_DRAFT,
};

/* What one mode costs per step. */
struct draft_cost {
	double compute_s;        /* wall time less disk wait */
	double misses;           /* experts read from disk */
	double miss_s;           /* disk wait per miss */
};

/* The model's verdict; all times per generated token. */
struct draft_estimate {
	double plain_s;
	double draft_s;
	double tokens_per_step;  /* E when drafting */
	double acceptance;       /* a, per draft position */
	bool pays;               /* draft_s < plain_s */
};

/* The cost model alone: plain and draft per step, acceptance a per
 * position, n drafts per step. Pure. */
void draft_policy_estimate(struct draft_estimate *e, const struct draft_cost *plain,
			   const struct draft_cost *draft, double acceptance, int n);

/* What one decode step measured. */
struct draft_sample {
	bool drafted;            /* it verified drafts */
	int tokens;              /* tokens it emitted */
	int accepted;            /* drafts accepted */
	int examined;            /* draft positions decided: accepted, +1 if one was rejected */
	double wall_s;           /* its wall time */
	double wait_s;           /* of which blocked on the disk */
	uint64_t misses;         /* expert store counters over the step */
	uint64_t requests;
};

#define DRAFT_POLICY_WINDOW 8          /* steps each mode's estimate looks back on */

/* The last steps of one mode. */
struct draft_window {
	int n, next;             /* samples held; where the next one goes */
	double compute_s[DRAFT_POLICY_WINDOW];
	double wait_s[DRAFT_POLICY_WINDOW];
	double misses[DRAFT_POLICY_WINDOW];
	double requests[DRAFT_POLICY_WINDOW];
	uint64_t last_token;     /* decoded tokens when the mode last ran */
	double ref_rate;         /* its miss rate early in its current stretch */
};

struct draft_policy {
	int n_draft;             /* drafts per step when drafting */
	enum draft_mode mode;    /* what the next step does */
	struct draft_window win[2];  /* [DRAFT_MODE_PLAIN], [DRAFT_MODE_DRAFT] */
	double accepted, examined;   /* decayed draft positions */
	int stretch_steps;       /* steps in the current mode */
	uint64_t stretch_tokens;
	bool trial;              /* this stretch left a settled mode */
	bool settled;            /* this stretch has been judged once */
	uint64_t backoff_tokens; /* a settled stretch this long tries the other mode */
	uint64_t tokens;         /* decoded so far */
	/* For --stats. */
	int switches;
	uint64_t steps[2], mode_tokens[2];
	struct draft_estimate last;  /* the last judgement */
	bool judged;
};

/* Starts with a drafting trial of n_draft drafts per step (n_draft >= 1). */
void draft_policy_init(struct draft_policy *p, int n_draft);

/* Records the step that just ran and returns the mode of the next one. */
enum draft_mode draft_policy_step(struct draft_policy *p, const struct draft_sample *s);

#endif
