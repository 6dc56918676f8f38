#pragma once
// The GPT-2 layer kernels for the host: matmuls through BLAS, the rest OpenMP loops. Each is
// written once and instantiated for float (training) and double (gradient checks). Shapes use
// N = rows (batch x time), C = channels. Backward kernels accumulate (+=) into parameter
// gradients, so micro-batches add up without extra buffers.
#include <cstddef>

#include "exec/attention_probs.hpp"

namespace st::kernels {

// out[b,t,:] = wte[token[b,t],:] + wpe[t,:]; without wpe (null: no learned positions, llama)
// the lookup alone, and encoder_backward then takes a null dwpe. A negative token is a row the
// table does not hold (another tensor-parallel rank's slice of the vocabulary): it looks up
// zeros, and its gradient goes to dwpe alone.
template <class R>
void encoder_forward(R* out, const int* tokens, const R* wte, const R* wpe, int B, int T, int C);
template <class R>
void encoder_backward(R* dwte, R* dwpe, const R* dout, const int* tokens, int B, int T, int C);

// LayerNorm over the last dimension, eps 1e-5; keeps mean and 1/std for backward.
template <class R>
void layernorm_forward(R* out, R* mean, R* rstd, const R* in, const R* weight, const R* bias, int N, int C);
// din += ..., dweight += ..., dbias += ...
template <class R>
void layernorm_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, const R* mean,
                        const R* rstd, int N, int C);

// out[N,OC] = in[N,C] * weight[OC,C]^T + bias (bias may be null)
template <class R>
void linear_forward(R* out, const R* in, const R* weight, const R* bias, int N, int C, int OC);
// din = dout * weight (or += when accumulate_din); dweight += dout^T in; dbias += column sums
template <class R>
void linear_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, int N, int C, int OC,
                     bool accumulate_din);

// Causal self-attention on qkv[B,T,W]: q (C wide, NH heads of hs = C/NH), then k and v (NKV
// heads each); query head h attends with key/value head h / (NH/NKV). NKV = NH (W = 3C) is
// GPT-2's multi-head attention; NKV < NH grouped-query attention, K/V heads shared, not copied.
// The softmax probabilities go to probs.kept (for backward) or, not kept, through
// probs.working; one (sequence, head) pair per thread, at most probs.heads threads.
template <class R>
void attention_forward(R* out, const AttentionProbs<R>& probs, const R* qkv, int B, int T, int C, int NH, int NKV);
// dqkv[B,T,3C] = gradient (overwritten), from the kept probabilities or recomputed ones (the
// same values): of q, and of k and v per query head; for NKV = NH that is qkv's gradient, for
// NKV < NH gqa_fold sums each group's into it.
template <class R>
void attention_backward(R* dqkv, const AttentionProbs<R>& probs, const R* dout, const R* qkv, int B, int T, int C,
                        int NH, int NKV);
// dqkv[N, C + 2 NKV hs] from attention_backward's per-query-head gradient expanded[N, 3C].
template <class R>
void gqa_fold(R* dqkv, const R* expanded, int N, int C, int NH, int NKV);
// Query positions first..first+n-1 of one sequence over keys 0..their own position, from qkv rows
// [0, first + n) (incremental decoding, rows laid out as attention_forward's); out[n, C]. One
// (head, row) pair per iteration.
template <class R>
void attention_rows(R* out, const R* qkv, int first, int n, int C, int NH, int NKV);

// GELU, tanh approximation (as GPT-2).
template <class R>
void gelu_forward(R* out, const R* in, std::size_t n);
// din = dout * gelu'(in)
template <class R>
void gelu_backward(R* din, const R* in, const R* dout, std::size_t n);

// The float tanh GELU uses and the float e^x (x <= 0) of the attention softmax (exposed for
// their accuracy tests).
float tanh_float(float x);
float exp_float(float x);

template <class R>
void add(R* out, const R* a, const R* b, std::size_t n);
template <class R>
void accumulate(R* out, const R* a, std::size_t n);  // out += a

// Softmax over the first V of Vp logits per row, in place (padded columns become 0); losses
// per row are -log p[target]. Returns their sum.
template <class R>
double softmax_cross_entropy_forward(R* logits_to_probs, R* losses, const int* targets, int N, int V, int Vp);
// probs -> dlogits in place: (p - onehot(target)) * scale, padded columns 0.
template <class R>
void softmax_cross_entropy_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp, R scale);

// The same softmax and cross-entropy over logits whose vocabulary is split in slices across the
// ranks of a tensor-parallel group (Megatron's vocabulary-parallel cross-entropy), without
// gathering the logits: each rank reduces its slice to three numbers per row, the group gathers
// them, and every rank finishes alike. A slice is Vp columns of which the first V are real
// tokens, column j being token first + j.
//   logit_slice_stats     per row: the slice's max, the sum of e^(x - max) over it, and the
//                         target's logit when the slice holds the target (else 0);
//   logit_slices_combine  from `parts` slices' stats gathered one after another (parts x N x 3):
//                         per row the overall max and sum (row_stats, N x 2) and, with targets,
//                         losses[i] = log sum + max - target logit; returns their sum;
//   logit_slice_softmax   the slice's probabilities in place, from row_stats (padding 0);
//   logit_slice_backward  softmax_cross_entropy_backward of a slice: the target's 1 subtracted
//                         only where the slice holds it.
template <class R>
void logit_slice_stats(const R* logits, const int* targets, R* stats, int N, int V, int Vp, int first);
template <class R>
double logit_slices_combine(const R* gathered, R* row_stats, R* losses, const int* targets, int N, int parts);
template <class R>
void logit_slice_softmax(R* logits_to_probs, const R* row_stats, int N, int V, int Vp);
template <class R>
void logit_slice_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp, int first, R scale);

}  // namespace st::kernels
