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
};

// Heads in flight at once for B sequences: the host works on one (sequence, head) per thread
// (host_threads of them), a device on the heads of one sequence per batched matmul. The
// backends (LayerKernels::attention_heads_at_once) and the memory predictions both ask here.
inline int attention_heads_at_once(bool device, int B, int NH, int host_threads) {
  const int all = B * NH;
  const int at_once = device ? NH : (host_threads > 0 ? host_threads : 1);
  return at_once < all ? at_once : all;
}

}  // namespace st
