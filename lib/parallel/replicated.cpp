#include "parallel/replicated.hpp"

#include <algorithm>

namespace st {

ReplicatedStrategy::ReplicatedStrategy(const ParamLayout& layout, const AdamWSettings& adamw, Communicator& comm,
                                       std::size_t bucket_bytes)
    : comm_(comm),
      adamw_(adamw, layout),
      params_(layout.total(), 0.0f),
      grads_(layout.total(), 0.0f),
      adam_m_(layout.total(), 0.0f),
      adam_v_(layout.total(), 0.0f) {
  // Backward finishes segments from the last to the first; a bucket gathers consecutive ones
  // (a contiguous range of the flat buffer) until it holds bucket_bytes.
  const auto& segments = layout.segments();
  bucket_of_.resize(segments.size());
  const std::size_t bucket_elements = bucket_bytes == 0 ? layout.total() : bucket_bytes / sizeof(float);
  for (std::size_t s = segments.size(); s-- > 0;) {
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= bucket_elements)
      buckets_.push_back({segments[s].offset, segments[s].offset + segments[s].size, 0});
    Bucket& b = buckets_.back();
    b.begin = segments[s].offset;
    ++b.segments;
    bucket_of_[s] = buckets_.size() - 1;
  }
  waiting_.assign(buckets_.size(), 0);
}

void ReplicatedStrategy::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  last_micro_batch_ = true;
}

void ReplicatedStrategy::begin_micro_batch(bool last) {
  last_micro_batch_ = last;
  for (std::size_t b = 0; b < buckets_.size(); ++b) waiting_[b] = buckets_[b].segments;
}

void ReplicatedStrategy::grad_ready(std::size_t segment) {
  // Before the last micro-batch gradients only accumulate locally.
  if (!last_micro_batch_ || comm_.size() == 1) return;
  const std::size_t b = bucket_of_[segment];
  if (--waiting_[b] > 0) return;
  const Bucket& bucket = buckets_[b];
  // Each rank's gradients are already scaled by 1/(micro-batches x ranks): a sum gives the mean.
  in_flight_.push_back(comm_.start_all_reduce(
      std::span<float>(grads_).subspan(bucket.begin, bucket.end - bucket.begin), ReduceOp::sum));
}

void ReplicatedStrategy::finish_grads() {
  for (auto& request : in_flight_) request.wait();
  in_flight_.clear();
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
