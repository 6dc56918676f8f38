#pragma once
// The small models the classifier's and bf16 storage's model tests train
// (test_fused_classifier.cpp, test_bf16_storage_model.cpp): GPT-2, and Llama with grouped-query
// attention untied and tied; their token batches; and the passes of a step that accumulates two
// micro-batches and then a shorter one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "core/random.hpp"
#include "model/model.hpp"

namespace st::testing_support {

enum class Variant { gpt2, llama, llama_tied };

inline const char* variant_name(Variant v) {
  switch (v) {
    case Variant::gpt2: return "gpt2";
    case Variant::llama: return "llama";
    case Variant::llama_tied: return "llama_tied";
  }
  return "?";
}

// Small shapes: vocabulary 40 padded to 48; Llama with 4 query heads over 2 key/value heads.
inline ModelShape small_shape(Variant v) {
  if (v == Variant::gpt2) return {3, 24, 3, 9, 40, 48};
  ModelShape s{3, 24, 4, 9, 40, 48};
  s.arch = Arch::llama;
  s.n_kv_head = 2;
  s.ffn_dim = 40;
  s.tie_embeddings = v == Variant::llama_tied;
  return s;
}

inline std::vector<int> tokens_for(int count, int V, int salt) {
  std::vector<int> t(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 3 + 1) % static_cast<std::size_t>(V));
  return t;
}

// The architecture's initialisation, perturbed so that logits spread and no gradient is trivial.
inline std::vector<float> perturbed_params(const Model<float>& model) {
  std::vector<float> params(model.layout().total());
  model.init_params(params, 21);
  NormalStream noise(23, 5);
  for (float& p : params) p += static_cast<float>(0.2 * noise.next());
  return params;
}

struct TrainedPasses {
  std::vector<double> losses;
  std::vector<float> grads;
};

// Two micro-batches of B x T accumulated with the scale a step of two gives them, then one of 2 x
// 5, into gradients that start at `start`.
template <class S>
TrainedPasses train_passes(Model<float, S>& model, const std::vector<S>& params, int B, int T, float start = 0.0f) {
  TrainedPasses r;
  r.grads.assign(params.size(), start);
  const int V = static_cast<int>(model.shape().vocab_size);
  const std::span<const S> p(params);
  for (int micro = 0; micro < 2; ++micro) {
    const auto tokens = tokens_for(B * T, V, 2 * micro), targets = tokens_for(B * T, V, 2 * micro + 1);
    r.losses.push_back(model.forward(p, tokens.data(), targets.data(), B, T));
    model.backward(p, r.grads, 0.5f);
  }
  const auto tokens = tokens_for(2 * 5, V, 9), targets = tokens_for(2 * 5, V, 10);
  r.losses.push_back(model.forward(p, tokens.data(), targets.data(), 2, 5));
  model.backward(p, r.grads, 0.25f);
  return r;
}

// Each tensor's largest |got - want| over its largest |want| at most `bound` (and every tensor
// receives a gradient); returns the largest such share over the tensors.
inline double expect_gradients_within(const ParamLayout& layout, const std::vector<float>& got,
                                      const std::vector<float>& want, double bound) {
  double worst_share = 0;
  for (const TensorSlot* t : layout.all_tensors()) {
    double scale = 0, worst = 0;
    for (std::size_t i = t->offset; i < t->offset + t->size; ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(want[i])));
      worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
    }
    EXPECT_GT(scale, 1e-6) << t->name << " receives no gradient";
    EXPECT_LE(worst / scale, bound) << t->name << ": largest difference " << worst << " against " << scale;
    worst_share = std::max(worst_share, worst / scale);
  }
  return worst_share;
}

}  // namespace st::testing_support
