// GPT-2's row of the architecture table (model/arch.hpp): learned positions, LayerNorm with
// biases, a 4x GELU MLP, multi-head attention, biases everywhere, the LM head tied to the token
// embedding. The model itself is model/gpt2.hpp.
#include <memory>
#include <string>

#include "exec/attention_probs.hpp"
#include "model/arch.hpp"
#include "model/gpt2.hpp"

namespace st {
namespace {

ParamLayout gpt2_layout(const ModelShape& s, TensorSplit t) {
  using R = TensorRole;
  using D = SplitDim;
  const std::int64_t C = s.d_model;
  ParamLayout layout;
  layout.add_segment("embeddings", {{"wte", {rank_share(s.padded_vocab, t), C}, R::embedding, D::rows, {s.padded_vocab}},
                                    {"wpe", {s.seq_len, C}, R::embedding}});
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    layout.add_segment("block" + std::to_string(l),
                       {{p + "ln1.w", {C}, R::norm},
                        {p + "ln1.b", {C}, R::norm},
                        {p + "attn.qkv.w", {rank_shares({C, C, C}, t), C}, R::matrix, D::rows, {C, C, C}},
                        {p + "attn.qkv.b", {rank_shares({C, C, C}, t)}, R::bias, D::rows, {C, C, C}},
                        {p + "attn.proj.w", {C, rank_share(C, t)}, R::matrix, D::columns, {C}},
                        {p + "attn.proj.b", {C}, R::bias},
                        {p + "ln2.w", {C}, R::norm},
                        {p + "ln2.b", {C}, R::norm},
                        {p + "mlp.fc.w", {rank_share(4 * C, t), C}, R::matrix, D::rows, {4 * C}},
                        {p + "mlp.fc.b", {rank_share(4 * C, t)}, R::bias, D::rows, {4 * C}},
                        {p + "mlp.proj.w", {C, rank_share(4 * C, t)}, R::matrix, D::columns, {4 * C}},
                        {p + "mlp.proj.b", {C}, R::bias}});
  }
  layout.add_segment("final_norm", {{"lnf.w", {C}, R::norm}, {"lnf.b", {C}, R::norm}});
  return layout;
}

std::vector<LinearProduct> gpt2_linear_products(const ModelShape& s, int tensor) {
  const TensorSplit t{tensor, 0};
  const std::int64_t C = s.d_model;
  return {{C, rank_shares({C, C, C}, t), true, false},    // attn.qkv
          {rank_share(C, t), C, true, false},             // attn.proj
          {C, rank_share(4 * C, t), true, false},         // mlp.fc
          {rank_share(4 * C, t), C, true, false},         // mlp.proj
          {C, rank_share(s.padded_vocab, t), false, true}};  // the LM head (wte)
}

// `device` does not count: GPT-2's attention has no grouped-query gradients to fold.
ActivationSizes gpt2_activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute,
                                      int heads_at_once, bool /*device*/, int tensor, bool sequence_parallel,
                                      bool flash, bool bf16_logits) {
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  // The rows a rank keeps between split layers (R = N without sequence parallelism).
  const std::size_t R = split_rows(N, tensor, sequence_parallel);
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
      s.per_block = {4 * R * C + 4 * N * A + 2 * N * H, 4 * R + att.kept};
      break;
    case Recompute::selective:  // no probabilities (flash: its lse stays), no GELU output
      s.per_block = {4 * R * C + 4 * N * A + N * H, 4 * R + att.kept};
      s.working = {0, att.working};
      break;
    case Recompute::full:  // the output only; one block's worth, less its output and GELU, to recompute into
      s.per_block = {R * C, 0};
      s.working = {3 * R * C + 4 * N * A + N * H, 4 * R + att.working + (flash ? att.kept : 0)};
      break;
  }
  // The embedding output (x0), final norm (R C, 2 R), logits (N V, bf16 where fused), losses (N), the projection
  // output (tmp, N C: whole rows, summed), then the backward scratch every block reuses: dres
  // (R C), dtmp (N C), datty (N A), dqkv (3 N A), attention's backward scratch (the
  // probabilities' gradient, one block per head in flight; flash: the row dots), and two of the
  // MLP's width (N H each; the recomputed GELU output goes to the second). With rows split: the
  // gathered rows a split layer reads (N C), the rows' shares of the two sums (R C each), and the
  // norms' gradients on their way through the group (4 C).
  s.shared = {R * C + N * C + R * C + N * C + N * A + 3 * N * A + 2 * N * H + (sequence_parallel ? N * C + 2 * R * C : 0),
              att.backward + (sequence_parallel ? 4 * C : 0)};
  s.head = {R * C, 2 * R + N + logit_slice_scratch(N, tensor)};
  s.head += logit_count(N, V, bf16_logits);
  return s;
}

std::int64_t gpt2_matmul_params(const ModelShape& s) {
  return s.n_layer * 12 * s.d_model * s.d_model + s.padded_vocab * s.d_model;
}

// q, k, v (3 C^2), the MLP's up and down projections (4 C^2 each), forward: 2 x 8 C^2.
double gpt2_recomputed_matmul_flops(const ModelShape& s) {
  const double C = static_cast<double>(s.d_model);
  return 16 * C * C;
}

}  // namespace

const ArchSpec& gpt2_arch() {
  static const ArchSpec row{
      .arch = Arch::gpt2,
      // The six keys every family has, none of Llama's; the first family, unnamed in summaries and
      // checkpoints as before Llama; learned positions; one MLP up projection.
      .shape_from_deck = [](const ModelConfig&, ModelShape&) {},
      .llama_keys = false, .checkpoint_names_arch = false, .rotary_positions = false, .mlp_up_projections = 1,
      .summary_prefix = "", .summary_keys = [](const ModelShape&) { return std::string(); },
      .layout = gpt2_layout, .activation_sizes = gpt2_activation_sizes, .matmul_params = gpt2_matmul_params,
      .recomputed_matmul_flops = gpt2_recomputed_matmul_flops, .linear_products = gpt2_linear_products,
      .norm_parameter_vectors = 2,
      .make_float = make_family_model<Gpt2, float>, .make_double = make_family_model<Gpt2, double>,
      .make_bf16 = make_family_model<Gpt2, float, Bf16>};
  return row;
}

}  // namespace st
