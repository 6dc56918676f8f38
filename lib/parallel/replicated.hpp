#pragma once
#include <vector>

#include "parallel/strategy.hpp"

namespace st {

// DDP: every rank holds the whole model, its gradients and Adam state, and applies the same
// update. Gradients are all-reduced in buckets of consecutive segments, in the order backward
// finishes them (last block first): during the last micro-batch's backward each bucket's
// all-reduce starts as soon as its segments are done, overlapping the rest of backward.
class ReplicatedStrategy final : public Strategy {
 public:
  // bucket_bytes: gradient bytes per all-reduce (0: one all-reduce after backward).
  ReplicatedStrategy(const ParamLayout& layout, const AdamWSettings& adamw, Communicator& comm,
                     std::size_t bucket_bytes);

  void begin_micro_batch(bool last) override;
  void grad_ready(std::size_t segment) override;

  std::span<float> params() override { return params_; }
  std::span<float> grads() override { return grads_; }
  void zero_grads() override;
  void finish_grads() override;
  double grad_norm_squared() override;
  void optimizer_step(double lr, double grad_scale, std::int64_t step) override;
  MemoryReport memory() const override;
  std::string name() const override { return "ddp"; }

 private:
  struct Bucket {
    std::size_t begin = 0, end = 0;  // element range of the flat gradient buffer
    int segments = 0;                // segments in it
  };
  Communicator& comm_;
  AdamW adamw_;
  std::vector<float> params_, grads_, adam_m_, adam_v_;
  std::vector<Bucket> buckets_;         // in the order backward completes them
  std::vector<std::size_t> bucket_of_;  // segment -> bucket
  std::vector<int> waiting_;            // segments of each bucket not yet ready
  std::vector<Request> in_flight_;
  bool last_micro_batch_ = true;
};

}  // namespace st
