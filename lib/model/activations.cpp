#include "model/activations.hpp"

#include <algorithm>

#include "exec/attention_probs.hpp"
#include "model/arch.hpp"

namespace st {

const char* recompute_name(Recompute recompute) {
  for (const auto& [value, name] : ChoiceNames<Recompute>::table)
    if (value == recompute) return name;
  return "?";
}

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

std::size_t logit_slice_scratch(std::size_t rows, int tensor) {
  return tensor > 1 ? (3 + 3 * static_cast<std::size_t>(tensor) + 2) * rows : 0;
}

std::size_t split_rows(std::size_t rows, int tensor, bool sequence_parallel) {
  if (tensor <= 1 || !sequence_parallel) return rows;
  return rows / static_cast<std::size_t>(tensor);
}

ActivationCount logit_count(std::size_t rows, std::size_t columns, bool bf16_logits) {
  return bf16_logits ? ActivationCount{0, 0, rows * columns} : ActivationCount{rows * columns, 0, 0};
}

ActivationSizes activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute, int heads_at_once,
                                 bool device, int tensor, bool sequence_parallel, bool flash, bool bf16_logits) {
  return arch_spec(shape.arch).activation_sizes(shape, max_batch, recompute, heads_at_once, device, tensor,
                                                sequence_parallel, flash, bf16_logits);
}

KernelWorkload kernel_workload(const ModelShape& shape, int max_batch, int tensor, bool sequence_parallel,
                               const ModelPart& part) {
  const ArchSpec& arch = arch_spec(shape.arch);
  std::vector<LinearProduct> products = arch.linear_products(shape, tensor);
  KernelWorkload w;
  const bool blocks = part.blocks(shape) > 0, heads = part.heads(shape);
  for (const LinearProduct& p : products)
    if (p.lm_head ? heads : blocks) w.products.push_back(p);
  w.rows = static_cast<std::int64_t>(max_batch) * shape.seq_len;
  // Every part has a norm: its blocks' and, on the part that ends the model, the final one.
  w.norm_rows = static_cast<std::int64_t>(split_rows(static_cast<std::size_t>(w.rows), tensor, sequence_parallel));
  w.norm_width = shape.d_model;
  w.norm_vectors = arch.norm_parameter_vectors;
  w.embeds = part.embeds();
  w.heads = heads;
  return w;
}

double recompute_flops_per_token(const ModelShape& shape, std::int64_t seq, Recompute recompute, bool flash) {
  const double L = static_cast<double>(shape.n_layer), C = static_cast<double>(shape.d_model);
  const double T = static_cast<double>(seq);
  // Per layer and token, counted as in train_flops_per_token (attention over all T): the
  // attention scores, 2 T C; a block's forward without its output projection: its matmuls (the
  // family's count) plus 4 T C of attention.
  const double matmuls = arch_spec(shape.arch).recomputed_matmul_flops(shape);
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
