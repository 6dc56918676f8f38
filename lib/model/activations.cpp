#include "model/activations.hpp"

#include "exec/attention_probs.hpp"

namespace st {

std::optional<Recompute> recompute_from_name(std::string_view name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  return std::nullopt;
}

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

namespace {

ActivationSizes gpt2_activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute,
                                      int heads_at_once) {
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  const std::size_t T = shape.seq_len, block = T * T;
  const std::size_t kept_probs = static_cast<std::size_t>(max_batch) * shape.n_head * block;
  const std::size_t heads = static_cast<std::size_t>(heads_at_once) * block;
  // A block computes ln1 (N C) and its statistics (2 N), qkv (3 N C), the attention
  // probabilities, atty, res2, ln2 (N C each, 2 N statistics), fch and its GELU (4 N C each)
  // and res3 (N C), its output and the next block's input.
  ActivationSizes s;
  s.blocks = shape.n_layer;
  switch (recompute) {
    case Recompute::none:
      s.per_block = 16 * N * C + 4 * N + kept_probs;
      break;
    case Recompute::selective:  // no probabilities, no GELU output
      s.per_block = 12 * N * C + 4 * N;
      s.working = heads;
      break;
    case Recompute::full:  // the output only; one block's worth, less its output and GELU, to recompute into
      s.per_block = N * C;
      s.working = 11 * N * C + 4 * N + heads;
      break;
  }
  // The embedding output (x0), final norm (N C, 2 N), logits (N Vp), losses (N), the projection
  // output (tmp), then the backward scratch every block reuses: dres, dtmp, datty (N C each),
  // dqkv (3 N C), the probabilities' gradient (one block per head in flight), and two of the
  // MLP's width (4 N C each; the recomputed GELU output goes to the second).
  s.shared = N * C + N * C + 2 * N + N * static_cast<std::size_t>(shape.padded_vocab) + N + N * C + 3 * N * C +
             3 * N * C + heads + 2 * 4 * N * C;
  return s;
}

ActivationSizes llama_activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute,
                                       int heads_at_once, bool device) {
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  const std::size_t W = shape.qkv_width(), F = shape.hidden();
  const std::size_t T = shape.seq_len, block = T * T;
  const std::size_t kept_probs = static_cast<std::size_t>(max_batch) * shape.n_head * block;
  const std::size_t heads = static_cast<std::size_t>(heads_at_once) * block;
  // A block computes attn_norm (N C, N statistics), qkv (N W, q and k rotated in place), the
  // attention probabilities, atty, res2, mlp_norm (N C each, N statistics), the gate and up
  // projections (2 N F), their SwiGLU product (N F) and res3 (N C).
  ActivationSizes s;
  s.blocks = shape.n_layer;
  switch (recompute) {
    case Recompute::none:
      s.per_block = 5 * N * C + N * W + 3 * N * F + 2 * N + kept_probs;
      break;
    case Recompute::selective:  // no probabilities, no SwiGLU product
      s.per_block = 5 * N * C + N * W + 2 * N * F + 2 * N;
      s.working = heads;
      break;
    case Recompute::full:  // the output only; one block's worth, less its output and product
      s.per_block = N * C;
      s.working = 4 * N * C + N * W + 2 * N * F + 2 * N + heads;
      break;
  }
  // x0, the final norm (N C, N), logits (N Vp), losses (N), tmp, then the backward scratch:
  // dres, dtmp, datty (N C each), dqkv (N W), the probabilities' gradient, two of the MLP's width
  // (2 N F each; the recomputed product goes to the second), and where the backend folds
  // grouped-query gradients (the host), the per-query-head gradient it folds from (3 N C).
  s.shared = N * C + N * C + N + N * static_cast<std::size_t>(shape.padded_vocab) + N + N * C + 3 * N * C + N * W +
             heads + 2 * 2 * N * F +
             grouped_gradient_elements(device, N, C, static_cast<int>(shape.n_head), static_cast<int>(shape.kv_heads()));
  return s;
}

}  // namespace

ActivationSizes activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute, int heads_at_once,
                                 bool device) {
  return shape.arch == Arch::llama ? llama_activation_sizes(shape, max_batch, recompute, heads_at_once, device)
                                   : gpt2_activation_sizes(shape, max_batch, recompute, heads_at_once);
}

double recompute_flops_per_token(const ModelShape& shape, std::int64_t seq, Recompute recompute) {
  const double L = static_cast<double>(shape.n_layer), C = static_cast<double>(shape.d_model);
  const double T = static_cast<double>(seq);
  // Per layer and token, counted as in train_flops_per_token (attention over all T):
  // the attention scores, 2 T C; a block's forward without its output projection: its matmuls
  // (gpt2: 2 x 8 C^2; llama: 2 x (W + C + 2F) C) plus 4 T C of attention.
  const double matmuls = shape.arch == Arch::llama
                             ? 2 * (static_cast<double>(shape.qkv_width()) + C + 2 * static_cast<double>(shape.hidden())) * C
                             : 16 * C * C;
  switch (recompute) {
    case Recompute::none: return 0;
    case Recompute::selective: return L * 2 * T * C;
    case Recompute::full: return L * (matmuls + 4 * T * C + 2 * T * C);
  }
  return 0;
}

}  // namespace st
