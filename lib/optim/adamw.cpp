#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace st {

AdamW::AdamW(const AdamWSettings& settings, const ParamLayout& layout) : settings_(settings) {
  for (const TensorSlot* t : layout.all_tensors()) {
    bool decay = false;
    switch (t->role) {
      case TensorRole::matrix: decay = true; break;
      case TensorRole::embedding: decay = settings.decay_embeddings; break;
      case TensorRole::bias:
      case TensorRole::norm: decay = settings.decay_norms_and_biases; break;
    }
    ranges_.push_back({t->offset, t->offset + t->size, decay});
  }
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
}

bool AdamW::decays(std::size_t global_offset) const {
  for (const auto& r : ranges_)
    if (global_offset >= r.begin && global_offset < r.end) return r.decay;
  throw Error("offset outside the parameter layout");
}

void AdamW::update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                   std::size_t global_offset, double lr, double grad_scale, std::int64_t t) const {
  ST_REQUIRE(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(),
             "AdamW buffers differ in size");
  const double b1 = settings_.beta1, b2 = settings_.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
  const std::size_t end = global_offset + params.size();
  for (const auto& r : ranges_) {
    const std::size_t begin = std::max(r.begin, global_offset), stop = std::min(r.end, end);
    if (begin >= stop) continue;
    const float decay_factor = static_cast<float>(1.0 - lr * (r.decay ? settings_.weight_decay : 0.0));
    const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2), scale = static_cast<float>(grad_scale);
    const float step = static_cast<float>(lr / correction1);
    const float inv_c2 = static_cast<float>(1.0 / correction2), eps = static_cast<float>(settings_.eps);
    const std::ptrdiff_t first = static_cast<std::ptrdiff_t>(begin - global_offset);
    const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(stop - global_offset);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = first; i < last; ++i) {
      const float g = grads[i] * scale;
      m[i] = fb1 * m[i] + (1.0f - fb1) * g;
      v[i] = fb2 * v[i] + (1.0f - fb2) * g * g;
      params[i] = params[i] * decay_factor - step * m[i] / (std::sqrt(v[i] * inv_c2) + eps);
    }
  }
}

}  // namespace st
