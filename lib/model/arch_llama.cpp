// Llama's row of the architecture table (model/arch.hpp): rotary positions (Hugging Face's
// rotate-half layout), RMSNorm, a SwiGLU MLP, grouped-query attention, no biases, the LM head tied
// or not. The model itself is model/llama.hpp.
#include <memory>
#include <string>

#include "core/text.hpp"
#include "deck/config.hpp"
#include "exec/attention_probs.hpp"
#include "model/arch.hpp"
#include "model/llama.hpp"

namespace st {
namespace {

// The deck's keys beyond the six every family has, at the values the run takes (n_kv_head 0:
// n_head; ffn_dim 0: Llama's rounding from multiple_of; the rope scaling's parameters only with
// a scaling).
void llama_shape_from_deck(const ModelConfig& m, ModelShape& s) {
  s.n_kv_head = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  s.ffn_dim = m.ffn_dim > 0 ? m.ffn_dim : llama_ffn_dim(m.d_model, m.multiple_of);
  s.norm_eps = m.norm_eps;
  s.rope_theta = m.rope_theta;
  s.tie_embeddings = m.tie_embeddings;
  s.rope_scaling = m.rope_scaling;
  if (s.rope_scaling == RopeScaling::llama3) {
    s.rope_factor = m.rope_factor;
    s.rope_low_freq_factor = m.rope_low_freq_factor;
    s.rope_high_freq_factor = m.rope_high_freq_factor;
    s.rope_original_positions = m.rope_original_positions;
  }
}

// ", n_kv_head 2, ffn_dim 48, untied LM head", and the rope scaling where there is one.
std::string llama_summary_keys(const ModelShape& s) {
  std::string text = ", n_kv_head " + std::to_string(s.kv_heads()) + ", ffn_dim " + std::to_string(s.hidden()) +
                     (s.tie_embeddings ? ", tied" : ", untied") + " LM head";
  if (s.rope_scaling == RopeScaling::llama3)
    text += ", rope_scaling llama3 (factor " + format_shortest(s.rope_factor) + ", original context " +
            std::to_string(s.rope_original_positions) + ")";
  return text;
}

ParamLayout llama_layout(const ModelShape& s, TensorSplit t) {
  using R = TensorRole;
  using D = SplitDim;
  const std::int64_t C = s.d_model, F = s.hidden(), KV = s.kv_heads() * s.head_dim();
  ParamLayout layout;
  if (s.tie_embeddings) {
    layout.add_segment("embeddings", {{"wte", {rank_share(s.padded_vocab, t), C}, R::embedding, D::rows, {s.padded_vocab}}});
  } else {
    // The LM head sits with the embedding: both are held for the whole pass, as the tied one is.
    layout.add_segment("embeddings", {{"wte", {rank_share(s.padded_vocab, t), C}, R::embedding, D::rows, {s.padded_vocab}},
                                      {"lm_head.w", {rank_share(s.padded_vocab, t), C}, R::matrix, D::rows, {s.padded_vocab}}});
  }
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    layout.add_segment("block" + std::to_string(l),
                       {{p + "attn_norm.w", {C}, R::norm},
                        {p + "attn.qkv.w", {rank_shares({C, KV, KV}, t), C}, R::matrix, D::rows, {C, KV, KV}},
                        {p + "attn.proj.w", {C, rank_share(C, t)}, R::matrix, D::columns, {C}},
                        {p + "mlp_norm.w", {C}, R::norm},
                        {p + "mlp.gate_up.w", {rank_shares({F, F}, t), C}, R::matrix, D::rows, {F, F}},
                        {p + "mlp.down.w", {C, rank_share(F, t)}, R::matrix, D::columns, {F}}});
  }
  layout.add_segment("final_norm", {{"lnf.w", {C}, R::norm}});
  return layout;
}

std::vector<LinearProduct> llama_linear_products(const ModelShape& s, int tensor) {
  const TensorSplit t{tensor, 0};
  const std::int64_t C = s.d_model, F = s.hidden(), KV = s.kv_heads() * s.head_dim();
  return {{C, rank_shares({C, KV, KV}, t), false, false},      // attn.qkv
          {rank_share(C, t), C, false, false},                 // attn.proj
          {C, rank_shares({F, F}, t), false, false},           // mlp.gate_up
          {rank_share(F, t), C, false, false},                 // mlp.down
          {C, rank_share(s.padded_vocab, t), false, true}};    // the LM head (wte or lm_head)
}

ActivationSizes llama_activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute,
                                       int heads_at_once, bool device, int tensor, bool sequence_parallel, bool flash,
                                       bool bf16_logits) {
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  // The rows a rank keeps between split layers (R = N without sequence parallelism).
  const std::size_t R = split_rows(N, tensor, sequence_parallel);
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
      s.per_block = {4 * R * C + N * A + N * W + 3 * N * F, 2 * R + att.kept};
      break;
    case Recompute::selective:  // no probabilities (flash: its lse stays), no SwiGLU product
      s.per_block = {4 * R * C + N * A + N * W + 2 * N * F, 2 * R + att.kept};
      s.working = {0, att.working};
      break;
    case Recompute::full:  // the output only; one block's worth, less its output and product
      s.per_block = {R * C, 0};
      s.working = {3 * R * C + N * A + N * W + 2 * N * F, 2 * R + att.working + (flash ? att.kept : 0)};
      break;
  }
  // x0, the final norm (R C, R), logits (N V, bf16 where fused), losses (N), tmp (N C), then the backward scratch:
  // dres (R C), dtmp (N C), datty (N A), dqkv (N W), attention's backward scratch, two of the
  // MLP's width (2 N F each; the recomputed product goes to the second), and where the backend
  // folds grouped-query gradients (the host), the per-query-head gradient it folds from (3 N A).
  // With rows split: the gathered rows a split layer reads (N C), the rows' shares of the two
  // sums (R C each), and the norms' gradients on their way through the group (2 C).
  s.shared = {R * C + N * C + R * C + N * C + N * A + N * W + 2 * 2 * N * F + (sequence_parallel ? N * C + 2 * R * C : 0),
              att.backward + grouped_gradient_elements(device || flash, N, static_cast<int>(A), heads_here, kv_here) +
                  (sequence_parallel ? 2 * C : 0)};
  s.head = {R * C, R + N + logit_slice_scratch(N, tensor)};
  s.head += logit_count(N, V, bf16_logits);
  return s;
}

std::int64_t llama_matmul_params(const ModelShape& s) {
  const std::int64_t C = s.d_model;
  const std::int64_t block = s.qkv_width() * C + C * C + 3 * s.hidden() * C;
  return s.n_layer * block + s.padded_vocab * C;  // the LM head, tied or not; the lookup costs no FLOPs
}

// q, k and v (W C), the gate and up projections and the down projection (3 F C), forward:
// 2 x (W + C + 2 F) C, as the recomputation has always counted it.
double llama_recomputed_matmul_flops(const ModelShape& s) {
  const double C = static_cast<double>(s.d_model);
  return 2 * (static_cast<double>(s.qkv_width()) + C + 2 * static_cast<double>(s.hidden())) * C;
}

}  // namespace

const ArchSpec& llama_arch() {
  static const ArchSpec row{
      .arch = Arch::llama, .shape_from_deck = llama_shape_from_deck,
      // The gate and up projections fused: two stacked.
      .llama_keys = true, .checkpoint_names_arch = true, .rotary_positions = true, .mlp_up_projections = 2,
      .summary_prefix = "llama, ", .summary_keys = llama_summary_keys,
      .layout = llama_layout, .activation_sizes = llama_activation_sizes, .matmul_params = llama_matmul_params,
      .recomputed_matmul_flops = llama_recomputed_matmul_flops, .linear_products = llama_linear_products,
      .norm_parameter_vectors = 1,
      .make_float = make_family_model<Llama, float>, .make_double = make_family_model<Llama, double>,
      .make_bf16 = make_family_model<Llama, float, Bf16>};
  return row;
}

}  // namespace st
