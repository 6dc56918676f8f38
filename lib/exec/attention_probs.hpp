#pragma once
// Where causal attention keeps what its backward needs. The exact path (the host; a device in
// fp32): the softmax probabilities, T x T per (sequence, head), zero above the diagonal. Kept,
// they cost B x NH x T x T per layer, usually the largest activation of all; with activation
// recomputation they are not kept: each head's probabilities pass through a small working set in
// forward and are recomputed from q and k in backward. Flash attention (a device in bf16,
// exec/cuda/flash_attention.hpp) never holds them: forward keeps each row's log-sum-exp (B x NH
// x T), and backward recomputes the probabilities tile by tile from q, k and it.
#include <cstddef>

namespace st {

// R: the probabilities, per-row statistics and the grouped-query gradient the host folds from
// (a working sum, never stored as an activation); S: the activations' storage (the attention's
// output), as LayerKernels<R, S>.
template <class R, class S = R>
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
  // Flash attention (attention_uses_flash): instead of probabilities, each row's log-sum-exp of
  // its scaled scores, lse[b, h, t] at (b NH + h) T + t, written by forward, read by backward;
  // backward's scratch for each row's <dO, O> (as many); and the forward's output, which
  // backward reads for it (the model's attention output, kept anyway). Null on the exact path.
  R* lse = nullptr;
  R* row_dots = nullptr;
  const S* out = nullptr;
};

// Head widths the flash attention kernels are built for: the shipped decks' 32, GPT-2's and
// SmolLM2's 64, Llama 3's 128 (each a template instance: more widths, more build time).
inline bool flash_attention_head_dim(int head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }

// Whether a backend runs flash attention on heads `head_dim` wide: `flash_backend` is a device
// whose matmuls take bf16 operands and whose deck leaves parallel.attention at "auto"
// (CudaExecSettings::flash_attention); other head widths take the exact path. The backends
// (LayerKernels::attention_uses_flash), the models' buffers and the memory predictions (check,
// plan) all ask here.
inline bool attention_uses_flash(bool flash_backend, int head_dim) {
  return flash_backend && flash_attention_head_dim(head_dim);
}

// Elements of AttentionProbs::lse (and of row_dots) for B sequences of T rows and NH heads.
inline std::size_t flash_rows(std::size_t B, std::size_t T, int NH) { return B * T * static_cast<std::size_t>(NH); }

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
