#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "exec/exec.hpp"

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

std::vector<AdamW::Piece> AdamW::pieces(std::size_t global_offset, std::size_t count, double lr, double grad_scale,
                                        std::int64_t t) const {
  const double b1 = settings_.beta1, b2 = settings_.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
  const std::size_t end = global_offset + count;
  std::vector<Piece> out;
  for (const auto& r : ranges_) {
    const std::size_t begin = std::max(r.begin, global_offset), stop = std::min(r.end, end);
    if (begin >= stop) continue;
    Piece p;
    p.first = begin - global_offset;
    p.count = stop - begin;
    p.constants.beta1 = static_cast<float>(b1);
    p.constants.beta2 = static_cast<float>(b2);
    p.constants.grad_scale = static_cast<float>(grad_scale);
    p.constants.decay_factor = static_cast<float>(1.0 - lr * (r.decay ? settings_.weight_decay : 0.0));
    p.constants.step_size = static_cast<float>(lr / correction1);
    p.constants.inv_correction2 = static_cast<float>(1.0 / correction2);
    p.constants.eps = static_cast<float>(settings_.eps);
    out.push_back(p);
  }
  return out;
}

void AdamW::update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                   std::size_t global_offset, double lr, double grad_scale, std::int64_t t) const {
  ST_REQUIRE(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(),
             "AdamW buffers differ in size");
  for (const Piece& p : pieces(global_offset, params.size(), lr, grad_scale, t))
    host_exec().adamw(p.constants, params.data() + p.first, grads.data() + p.first, m.data() + p.first, v.data() + p.first,
               p.count);
}

}  // namespace st
