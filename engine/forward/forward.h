/*
 * forward — the forward pass: tokens in, logits out, by walking the
 * model's table of layers, each a row of block kinds (block.h).
 *
 * For every layer: x += mixer(rmsnorm(x)), then x += ffn(rmsnorm(x)); the
 * final norm and the output head give the logits. What the sequence carries
 * between steps lives in one sequence state (seq_state.h). A forward holds
 * every buffer, sized once at init for `ctx` positions and chunks of up to
 * `batch` tokens; a step allocates nothing. Routed experts come from the
 * model's expert store in whatever order it delivers them; each expert's
 * output is kept per (token, slot) and summed in a fixed order afterwards,
 * so logits are bit-identical whatever the cache state, delivery order or
 * thread count.
 */
#ifndef COLIBRI_ENGINE_FORWARD_FORWARD_H
#define COLIBRI_ENGINE_FORWARD_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/forward/block.h"
#include "engine/forward/remote.h"
#include "engine/forward/seq_state.h"
#include "engine/model/model.h"

struct threadpool;

struct forward_prefetch_stats {
	uint64_t predicted;          /* experts predicted for a layer (union per step) */
	uint64_t actual;             /* experts that layer then needed */
	uint64_t correct;            /* predicted and needed */
	double precision_ema;        /* recent precision (correct / predicted), moving average; starts at 0 */
	uint64_t issued_steps;       /* layer predictions whose reads were started (precise enough) */
	uint64_t prefetch_steps;     /* layer predictions in all */
};

/* The predictions are always made and scored, but their reads start only
 * while the recent precision is at least this: a prefetch then costs at
 * most this share of its bytes in wasted reads (and the cached experts it
 * displaced), so it cannot lose more than it gains; below it the run reads
 * what it misses and nothing else. */
#define FORWARD_PREFETCH_PRECISION 0.95

struct forward {
	const struct model *m;
	struct threadpool *pool;
	int32_t ctx;                 /* positions each sequence's state holds */
	int32_t batch;               /* rows (tokens) per step at most */
	int n_threads;
	int n_layers;                /* decoder layers + MTP layers loaded */
	struct layer *layers;        /* [n_layers] the table the step walks */
	int n_mtp;
	struct mtp_weights *mtp;     /* [n_mtp] */
	int n_seqs;                  /* sequences decoded together (1 for run; --parallel for serve) */
	struct seq_state *seqs;      /* [n_seqs]; part 2l: layer l's mixer, 2l + 1 its FFN */
	/* The step under way: row t is a token of sequence row_seq[t] at
	 * position row_pos[t]. */
	int32_t *row_seq, *row_pos;  /* [batch] */
	int32_t *row_tok;            /* [batch] the token id of row t (hash routing) */
	float *head_in;              /* [batch, hidden] the rows whose logits were asked for */
	float *x;                    /* [batch, hidden] residual stream */
	float *xn;                   /* [batch, hidden] normed input of a block */
	float *hidden;               /* [batch, forward_mtp_dim] the last step's MTP inputs: final-normed
				      * hidden states, or the hc streams before the collapse */
	float *mtp_in;               /* [batch, 2 * hidden] MTP module input */
	float *inv_freq;             /* [rot_dim / 2] */
	/* RESIDUAL_HC (hyper_conn.h): hc_mult streams per row; x then holds a
	 * block's collapsed input. Unallocated (0 bytes) for other families. */
	float *hc_x;                 /* [batch, hc * hidden] the residual streams */
	float *hc_flat;              /* [batch, hc * hidden] their unweighted norm */
	float *hc_mix;               /* [batch, (2 + hc) * hc] fn . flat */
	float *hc_w;                 /* [batch, (2 + hc) * hc] pre, post, comb of each row */
	float *hc_out;               /* [batch, hidden] the block's output */
	float *blk;                  /* [batch, hidden] RESIDUAL_SCONV: a block's output before its
				      * convolution (unallocated for other families) */
	struct hc_weights hc_head;   /* the final collapse */
	uint8_t *shared;             /* one arena every kind uses during its run */
	uint8_t *own[BLOCK_KINDS];   /* each kind's scratch kept between runs, by kind id */
	uint8_t *threads;            /* [n_threads, thread_bytes] */
	size_t thread_bytes;
	bool prefetch;               /* predict and prefetch the next MoE layer */
	double prefetch_precision;   /* recent precision the reads need: FORWARD_PREFETCH_PRECISION, or
				      * COLIBRI_PREFETCH_PRECISION from the environment (0: always read) */
	int32_t *predicted;          /* [layers, n_experts] 1 if predicted for that layer this step */
	struct forward_prefetch_stats pf;
	struct remote_experts remote; /* experts other processes serve (remote.h; rank 0 of an MPI run,
				       * engine/dist); ops NULL on one host and on the serving ranks */
};

/* Binds the layer table, sizes and allocates everything for n_seqs
 * sequences of ctx positions each and steps of up to batch rows. pool may
 * be NULL. Free with forward_free, also after a failure. */
int forward_init(struct forward *f, const struct model *m, struct threadpool *pool, int ctx, int batch, int n_seqs);
void forward_free(struct forward *f);

/* Bytes forward_init allocates for this config, context, batch, threads and
 * sequences (sequence states included): what the RAM budget must set aside. */
uint64_t forward_bytes(const struct model_config *c, int ctx, int batch, int n_threads, int n_seqs);

/* What the sequence state of this config holds per position, for `plan`:
 * the words of its mixers' kind (block_kind.state_what) and in how many of
 * its layers, into buf. */
void forward_state_what(const struct model_config *c, char *buf, size_t len);

/* Bytes of the sequence state that do not grow with the position
 * (recurrent and convolution states, with their snapshot and checkpoint
 * copies), for n_seqs sequences; forward_bytes includes them. */
uint64_t forward_state_fixed_bytes(const struct model_config *c, int n_seqs);

/* Sequence 0 (what run and logits use) and sequence i. */
static inline struct seq_state *forward_seq(const struct forward *f, int i)
{
	return &f->seqs[i];
}

/* Forgets sequence 0 (position 0). */
void forward_reset(struct forward *f);

/* One row of a step: a token of a sequence, at that sequence's next
 * position. */
struct forward_row {
	int32_t seq;
	int32_t token;
};

/* Runs rows[0..n) (n <= batch) in one step: the rows of one sequence must
 * come in order and take its next positions; each sequence advances by
 * its rows. The rows of every sequence share each layer's expert reads (an
 * expert several of them need is read once), and every row's result is
 * bit-identical to running its sequence alone. logits: [n_out, vocab] for
 * the rows out[0..n_out) (may be NULL with n_out 0). Final hidden states
 * of every row stay in f->hidden. -ENOSPC when a sequence's context is
 * full; -errno from the expert store. */
int forward_step_rows(struct forward *f, const struct forward_row *rows, int n, const int *out, int n_out,
		      float *logits);

/* forward_step_rows on sequence 0: tokens[0..n) at its next positions;
 * logits [n, vocab] when all_logits, else [vocab] for the last token; may
 * be NULL. */
int forward_step(struct forward *f, const int32_t *tokens, int n, float *logits, bool all_logits);

/* Floats per row of an MTP module's hidden-state input (and of f->hidden):
 * hidden, or hc_mult * hidden with hyper-connections (the streams). */
int64_t forward_mtp_dim(const struct forward *f);

/* Runs MTP module `module` over n rows: row t combines hidden[t] (a final
 * hidden state of forward_mtp_dim floats, as forward_step leaves in
 * f->hidden) with the token next[t] that followed it, at MTP cache position
 * pos0 + t, and gives logits for the token after next[t] ([n, vocab], may
 * be NULL) and the module's output hidden states (forward_mtp_dim floats a
 * row, may be NULL) for chained drafting. The main sequence's position is
 * untouched. */
int forward_mtp(struct forward *f, int module, const float *hidden, const int32_t *next, int n, int pos0,
		float *logits, float *hidden_out);

/* A process serving remote experts (remote.h; a rank of an MPI run,
 * engine/dist): runs experts[0..n_exp) of `layer` (ascending, each one at
 * least one row chose) over the rows of xn
 * ([n, hidden]) that sel ([n, top_k]) routes to them, with the kernels and
 * rows rank 0 would use, and starts the reads of hints[0..n_hint) of
 * hint_layer (rank 0's prediction for its next layer). Writes one output
 * row per (expert, token, slot) chosen, experts in list order, then tokens,
 * then slots, into rows; returns how many, or -errno with a message. */
int ffn_moe_serve(struct forward *f, int layer, const int32_t *experts, int n_exp, const int32_t *sel,
		  const float *xn, int n, int hint_layer, const int32_t *hints, int n_hint, float *rows);

/* Goes back to position pos <= sequence 0's after a step that ran past it
 * (drafting's rollback): truncates the sequence state, or where a state
 * cannot be truncated, restores the snapshot taken before the step and runs
 * tokens[0..pos - snapshot) again (tokens: what that step ran). */
int forward_rewind(struct forward *f, int32_t pos, const int32_t *tokens);

#endif
