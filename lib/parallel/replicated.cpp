#include "parallel/replicated.hpp"

#include <algorithm>

namespace st {

ReplicatedStrategy::ReplicatedStrategy(const ParamLayout& layout, const AdamWSettings& adamw, Communicator& comm)
    : comm_(comm),
      adamw_(adamw, layout),
      params_(layout.total(), 0.0f),
      grads_(layout.total(), 0.0f),
      adam_m_(layout.total(), 0.0f),
      adam_v_(layout.total(), 0.0f) {}

void ReplicatedStrategy::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void ReplicatedStrategy::finish_grads() {
  // Each rank's gradients are already scaled by 1/(micro-batches x ranks): a sum gives the mean.
  if (comm_.size() > 1) comm_.all_reduce(std::span<float>(grads_), ReduceOp::sum);
}

double ReplicatedStrategy::grad_norm_squared() {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (std::size_t i = 0; i < grads_.size(); ++i) sum += static_cast<double>(grads_[i]) * grads_[i];
  return sum;
}

void ReplicatedStrategy::optimizer_step(double lr, double grad_scale, std::int64_t step) {
  adamw_.update(params_, grads_, adam_m_, adam_v_, 0, lr, grad_scale, step);
}

MemoryReport ReplicatedStrategy::memory() const {
  return {params_.size() * sizeof(float), grads_.size() * sizeof(float),
          (adam_m_.size() + adam_v_.size()) * sizeof(float)};
}

}  // namespace st
