#pragma once
// The fused classifier's contract on the host (llm.c's fused_classifier): the reference the CUDA
// kernels (exec/cuda/classifier.cu) are tested against, and what the host's LayerKernels run when
// a backend claims the fused path (LayerKernels::fused_classifier). Not used by the CPU's
// training, whose cross-entropy stays kernels::softmax_cross_entropy_* over fp32 logits.
//
// The LM head writes its logits in bf16; training's cross-entropy then reads each row once for
// its max and sum of exponentials and once more to overwrite it with d(loss)/d(logits) unscaled,
// softmax(x) - onehot(target), in bf16: the logits are never normalised in memory and the
// probabilities never kept. The loss's scale goes into the head's gradient products instead
// (classifier_backward's `scale`), where it costs nothing. Rows are Vp wide, the first V real
// (padded columns end as 0); under tensor parallelism a rank holds a slice of the vocabulary,
// Vp columns from token `first` on, and the slices' statistics are combined by
// kernels::logit_slices_combine (unchanged: it works on fp32 statistics).
//
// Roundings are the device's: the head's operands (its input and weight) rounded to bf16, the
// product accumulated in R and rounded to bf16; everything after it computed in R from the bf16
// logits (sums of exponentials in double, as the host's softmax) and each result rounded to bf16
// once. Plain loops over rows: written to be read against the device's kernels.
#include "core/bf16.hpp"

namespace st::kernels {

// logits[N, OC] = bf16(bf16(in)[N, C] bf16(weight)[OC, C]^T).
template <class R>
void classifier_logits(Bf16* logits, const R* in, const R* weight, int N, int C, int OC);

// Training's cross-entropy over whole rows, in place: losses[i] = log sum_j e^x_ij - x_i,target
// and the row becomes softmax(x_i) - onehot(target_i). Returns the sum of the losses (in row
// order, as the host's softmax_cross_entropy_forward).
template <class R>
double classifier_cross_entropy(Bf16* logits_to_dlogits, R* losses, const int* targets, int N, int V, int Vp);

// A vocabulary slice's statistics per row, as kernels::logit_slice_stats writes them from fp32
// logits: stats[3 i] = max, stats[3 i + 1] = sum of e^(x - max), stats[3 i + 2] = the target's
// logit where the slice holds it (else 0); targets may be null.
template <class R>
void classifier_slice_stats(const Bf16* logits, const int* targets, R* stats, int N, int V, int Vp, int first);

// After kernels::logit_slices_combine (row_stats[2 i] = max, row_stats[2 i + 1] = sum over the
// whole vocabulary): the slice's softmax - onehot in place, the one only where the slice holds
// the target.
template <class R>
void classifier_slice_dlogits(Bf16* logits_to_dlogits, const R* row_stats, const int* targets, int N, int V, int Vp,
                              int first);

// Without targets (decoding, probs()): the probabilities in place, in bf16; whole rows, or a
// slice from combined statistics.
template <class R>
void classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp);
template <class R>
void classifier_slice_softmax(Bf16* logits_to_probs, const R* row_stats, int N, int V, int Vp);

// The head's backward from bf16 d(loss)/d(logits): din[N, C] = scale dlogits weight
// (overwritten), dweight[OC, C] += scale dlogits^T in, with in and weight rounded to bf16.
template <class R>
void classifier_backward(R* din, R* dweight, const Bf16* dlogits, const R* in, const R* weight, int N, int C, int OC,
                         R scale);

}  // namespace st::kernels
