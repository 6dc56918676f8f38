#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "exec/adamw_element.hpp"

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

namespace {
// Bias corrections and the decay factor in double, rounded once to float: what every form uses.
struct StepTerms {
  float beta1, beta2, step_size, inv_correction2, eps;
  float decay_factor(double lr, double weight_decay) const { return static_cast<float>(1.0 - lr * weight_decay); }
};
StepTerms step_terms(const AdamWSettings& s, double lr, std::int64_t t) {
  const double correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(t));
  const double correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(t));
  return {static_cast<float>(s.beta1), static_cast<float>(s.beta2), static_cast<float>(lr / correction1),
          static_cast<float>(1.0 / correction2), static_cast<float>(s.eps)};
}
}  // namespace

std::vector<AdamW::Piece> AdamW::pieces(std::size_t global_offset, std::size_t count, double lr, double grad_scale,
                                        std::int64_t t) const {
  const StepTerms terms = step_terms(settings_, lr, t);
  const std::size_t end = global_offset + count;
  std::vector<Piece> out;
  for (const auto& r : ranges_) {
    const std::size_t begin = std::max(r.begin, global_offset), stop = std::min(r.end, end);
    if (begin >= stop) continue;
    Piece p;
    p.first = begin - global_offset;
    p.count = stop - begin;
    p.constants.beta1 = terms.beta1;
    p.constants.beta2 = terms.beta2;
    p.constants.grad_scale = static_cast<float>(grad_scale);
    p.constants.decay_factor = terms.decay_factor(lr, r.decay ? settings_.weight_decay : 0.0);
    p.constants.step_size = terms.step_size;
    p.constants.inv_correction2 = terms.inv_correction2;
    p.constants.eps = terms.eps;
    out.push_back(p);
  }
  return out;
}

AdamWStepConstants AdamW::step_constants(double lr, std::int64_t t) const {
  const StepTerms terms = step_terms(settings_, lr, t);
  AdamWStepConstants c;
  c.beta1 = terms.beta1;
  c.beta2 = terms.beta2;
  c.step_size = terms.step_size;
  c.inv_correction2 = terms.inv_correction2;
  c.eps = terms.eps;
  c.decay_factor[0] = terms.decay_factor(lr, 0.0);
  c.decay_factor[1] = terms.decay_factor(lr, settings_.weight_decay);
  return c;
}

void AdamW::append_tiles(std::vector<AdamWTile>& tiles, std::size_t global_offset, std::size_t count, std::size_t param,
                         std::size_t grad, std::size_t state) const {
  const std::size_t end = global_offset + count;
  for (const auto& r : ranges_) {
    std::size_t begin = std::max(r.begin, global_offset);
    const std::size_t stop = std::min(r.end, end);
    for (; begin < stop; begin += kAdamWTileElements) {
      const std::size_t at = begin - global_offset;
      AdamWTile tile;
      tile.param = param + at;
      tile.grad = grad + at;
      tile.state = state + at;
      tile.count = static_cast<std::uint32_t>(std::min<std::size_t>(kAdamWTileElements, stop - begin));
      tile.decay = r.decay ? 1 : 0;
      tiles.push_back(tile);
    }
  }
}

void AdamW::update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                   std::size_t global_offset, double lr, double grad_scale, std::int64_t t) const {
  ST_REQUIRE(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(),
             "AdamW buffers differ in size");
  for (const Piece& p : pieces(global_offset, params.size(), lr, grad_scale, t)) {
    const AdamWConstants& c = p.constants;
    for (std::size_t i = p.first; i < p.first + p.count; ++i)
      adamw_element(params[i], grads[i], m[i], v[i], c.beta1, c.beta2, c.grad_scale, c.decay_factor, c.step_size,
                    c.inv_correction2, c.eps);
  }
}

}  // namespace st
