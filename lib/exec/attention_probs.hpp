#pragma once
// Where causal attention keeps its softmax probabilities: T x T per (sequence, head), zero
// above the diagonal. Kept, they cost B x NH x T x T per layer, usually the largest activation
// of all; with activation recomputation they are not kept: each head's probabilities pass
// through a small working set in forward and are recomputed from q and k in backward.
#include <cstddef>

namespace st {

template <class R>
struct AttentionProbs {
  // B*NH blocks: forward writes every head's probabilities here and backward reads them.
  // nullptr: not kept; forward uses `working`, backward recomputes them into it.
  R* kept = nullptr;
  R* working = nullptr;   // `heads` blocks (only when not kept)
  R* dworking = nullptr;  // `heads` blocks for the probabilities' gradient (backward)
  int heads = 0;          // heads in flight at once: blocks in `working` and `dworking`
  // Grouped-query attention's backward on a backend that computes a gradient per query head and
  // then sums each group's (the host): that gradient, B T x 3C (grouped_gradient_elements).
  // nullptr where the backend needs none.
  R* grouped_gradient = nullptr;
};

// Heads in flight at once for B sequences: the host works on one (sequence, head) per thread
// (host_threads of them), a device on the heads of one sequence per batched matmul. The
// backends (LayerKernels::attention_heads_at_once) and the memory predictions both ask here.
inline int attention_heads_at_once(bool device, int B, int NH, int host_threads) {
  const int all = B * NH;
  const int at_once = device ? NH : (host_threads > 0 ? host_threads : 1);
  return at_once < all ? at_once : all;
}

// Elements of AttentionProbs::grouped_gradient for `rows` (batch x time) rows: the host's
// grouped-query backward writes each query head's q, k and v gradient (3C per row) and folds
// the groups' from there; a device sums each group in place, and multi-head attention (NKV = NH)
// has nothing to fold. The backends and the memory predictions both ask here.
inline std::size_t grouped_gradient_elements(bool device, std::size_t rows, std::size_t C, int NH, int NKV) {
  return device || NKV >= NH ? 0 : 3 * rows * C;
}

}  // namespace st
