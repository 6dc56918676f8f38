#include "model/activations.hpp"

#include <algorithm>

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

// What attention needs of a block's activations: kept by the block until its backward (the
// probabilities, B x heads x T x T; or with flash attention each row's log-sum-exp, B x heads x
// T, whatever the recomputation, since its backward recomputes the probabilities anyway), in the
// working set when probabilities are recomputed (T x T per head in flight; flash: none), and in
// the backward scratch (the probabilities' gradient, T x T per head in flight; flash: each row's
// <dO, O>, B x heads x T).
struct AttentionSizes {
  std::size_t kept = 0, working = 0, backward = 0;
};
AttentionSizes attention_sizes(std::size_t max_batch, std::size_t T, int heads_here, int heads_at_once, Recompute recompute,
                               bool flash) {
  const std::size_t block = T * T;
  if (flash) {
    const std::size_t rows = flash_rows(max_batch, T, heads_here);
    return {rows, 0, rows};
  }
  const std::size_t in_flight = static_cast<std::size_t>(heads_at_once) * block;
  return {recompute == Recompute::none ? max_batch * static_cast<std::size_t>(heads_here) * block : 0,
          recompute == Recompute::none ? 0 : in_flight, in_flight};
}

ActivationSizes gpt2_activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute,
                                      int heads_at_once, int tensor, bool sequence_parallel, bool flash,
                                      bool bf16_logits) {
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  // The rows a rank keeps between split layers (R = N without sequence parallelism).
  const std::size_t R = split_rows(N, static_cast<std::size_t>(shape.seq_len), tensor, sequence_parallel);
  // A rank of a tensor-parallel group holds its heads (A = its share of C) and its share of the
  // MLP width (H) and of the vocabulary (V); the residual stream (C) is whole on every rank.
  const std::size_t split = static_cast<std::size_t>(tensor);
  const std::size_t A = C / split, H = 4 * C / split, V = static_cast<std::size_t>(shape.padded_vocab) / split;
  const AttentionSizes att = attention_sizes(static_cast<std::size_t>(max_batch), shape.seq_len,
                                             static_cast<int>(shape.n_head) / tensor, heads_at_once, recompute, flash);
  // A block computes ln1 (R C) and its statistics (2 R), qkv (3 N A), what attention keeps,
  // atty (N A), res2, ln2 (R C each, 2 R statistics), fch and its GELU (N H each) and res3
  // (R C), its output and the next block's input.
  ActivationSizes s;
  s.blocks = shape.n_layer;
  switch (recompute) {
    case Recompute::none:
      s.per_block = 4 * R * C + 4 * N * A + 2 * N * H + 4 * R + att.kept;
      break;
    case Recompute::selective:  // no probabilities (flash: its lse stays), no GELU output
      s.per_block = 4 * R * C + 4 * N * A + N * H + 4 * R + att.kept;
      s.working = att.working;
      break;
    case Recompute::full:  // the output only; one block's worth, less its output and GELU, to recompute into
      s.per_block = R * C;
      s.working = 3 * R * C + 4 * N * A + N * H + 4 * R + att.working + (flash ? att.kept : 0);
      break;
  }
  // The embedding output (x0), final norm (R C, 2 R), logits (N V, half that in bf16), losses (N), the projection
  // output (tmp, N C: whole rows, summed), then the backward scratch every block reuses: dres
  // (R C), dtmp (N C), datty (N A), dqkv (3 N A), attention's backward scratch (the
  // probabilities' gradient, one block per head in flight; flash: the row dots), and two of the
  // MLP's width (N H each; the recomputed GELU output goes to the second). With rows split: the
  // gathered rows a split layer reads (N C), the rows' shares of the two sums (R C each), and the
  // norms' gradients on their way through the group (4 C).
  s.shared = R * C + R * C + 2 * R + logit_elements(N, V, bf16_logits) + N + N * C + R * C + N * C + N * A + 3 * N * A +
             att.backward + 2 * N * H +
             logit_slice_scratch(N, tensor) + (sequence_parallel ? N * C + 2 * R * C + 4 * C : 0);
  return s;
}

ActivationSizes llama_activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute,
                                       int heads_at_once, bool device, int tensor, bool sequence_parallel, bool flash,
                                       bool bf16_logits) {
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  // The rows a rank keeps between split layers (R = N without sequence parallelism).
  const std::size_t R = split_rows(N, static_cast<std::size_t>(shape.seq_len), tensor, sequence_parallel);
  // On a rank of a tensor-parallel group: its share of the heads (q's A = C / tensor wide, and
  // W of q, k and v), of the MLP width (F) and of the vocabulary (V).
  const std::size_t split = static_cast<std::size_t>(tensor);
  const std::size_t W = static_cast<std::size_t>(shape.qkv_width()) / split, F = static_cast<std::size_t>(shape.hidden()) / split;
  const std::size_t A = C / split, V = static_cast<std::size_t>(shape.padded_vocab) / split;
  const int heads_here = static_cast<int>(shape.n_head) / tensor, kv_here = static_cast<int>(shape.kv_heads()) / tensor;
  const AttentionSizes att =
      attention_sizes(static_cast<std::size_t>(max_batch), shape.seq_len, heads_here, heads_at_once, recompute, flash);
  // A block computes attn_norm (R C, R statistics), qkv (N W, q and k rotated in place), what
  // attention keeps, atty (N A), res2, mlp_norm (R C each, R statistics), the gate and up
  // projections (2 N F), their SwiGLU product (N F) and res3 (R C).
  ActivationSizes s;
  s.blocks = shape.n_layer;
  switch (recompute) {
    case Recompute::none:
      s.per_block = 4 * R * C + N * A + N * W + 3 * N * F + 2 * R + att.kept;
      break;
    case Recompute::selective:  // no probabilities (flash: its lse stays), no SwiGLU product
      s.per_block = 4 * R * C + N * A + N * W + 2 * N * F + 2 * R + att.kept;
      s.working = att.working;
      break;
    case Recompute::full:  // the output only; one block's worth, less its output and product
      s.per_block = R * C;
      s.working = 3 * R * C + N * A + N * W + 2 * N * F + 2 * R + att.working + (flash ? att.kept : 0);
      break;
  }
  // x0, the final norm (R C, R), logits (N V, half that in bf16), losses (N), tmp (N C), then the backward scratch:
  // dres (R C), dtmp (N C), datty (N A), dqkv (N W), attention's backward scratch, two of the
  // MLP's width (2 N F each; the recomputed product goes to the second), and where the backend
  // folds grouped-query gradients (the host), the per-query-head gradient it folds from (3 N A).
  // With rows split: the gathered rows a split layer reads (N C), the rows' shares of the two
  // sums (R C each), and the norms' gradients on their way through the group (2 C).
  s.shared = R * C + R * C + R + logit_elements(N, V, bf16_logits) + N + N * C + R * C + N * C + N * A + N * W +
             att.backward + 2 * 2 * N * F +
             grouped_gradient_elements(device || flash, N, static_cast<int>(A), heads_here, kv_here) +
             logit_slice_scratch(N, tensor) + (sequence_parallel ? N * C + 2 * R * C + 2 * C : 0);
  return s;
}

}  // namespace

std::size_t logit_slice_scratch(std::size_t rows, int tensor) {
  return tensor > 1 ? (3 + 3 * static_cast<std::size_t>(tensor) + 2) * rows : 0;
}

std::size_t split_rows(std::size_t rows, std::size_t seq_len, int tensor, bool sequence_parallel) {
  if (tensor <= 1 || !sequence_parallel) return rows;
  return std::max(rows / static_cast<std::size_t>(tensor), seq_len);
}

std::size_t logit_elements(std::size_t rows, std::size_t columns, bool bf16_logits) {
  return bf16_logits ? (rows * columns + 1) / 2 : rows * columns;
}

ActivationSizes activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute, int heads_at_once,
                                 bool device, int tensor, bool sequence_parallel, bool flash, bool bf16_logits) {
  return shape.arch == Arch::llama ? llama_activation_sizes(shape, max_batch, recompute, heads_at_once, device, tensor,
                                                            sequence_parallel, flash, bf16_logits)
                                   : gpt2_activation_sizes(shape, max_batch, recompute, heads_at_once, tensor,
                                                           sequence_parallel, flash, bf16_logits);
}

double recompute_flops_per_token(const ModelShape& shape, std::int64_t seq, Recompute recompute, bool flash) {
  const double L = static_cast<double>(shape.n_layer), C = static_cast<double>(shape.d_model);
  const double T = static_cast<double>(seq);
  // Per layer and token, counted as in train_flops_per_token (attention over all T):
  // the attention scores, 2 T C; a block's forward without its output projection: its matmuls
  // (gpt2: 2 x 8 C^2; llama: 2 x (W + C + 2F) C) plus 4 T C of attention.
  const double matmuls = shape.arch == Arch::llama
                             ? 2 * (static_cast<double>(shape.qkv_width()) + C + 2 * static_cast<double>(shape.hidden())) * C
                             : 16 * C * C;
  // Flash attention recomputes the scores in its backward whatever the setting: not counted here.
  const double scores_again = flash ? 0.0 : 2 * T * C;
  switch (recompute) {
    case Recompute::none: return 0;
    case Recompute::selective: return L * scores_again;
    case Recompute::full: return L * (matmuls + 4 * T * C + scores_again);
  }
  return 0;
}

}  // namespace st
