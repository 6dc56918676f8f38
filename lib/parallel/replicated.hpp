#pragma once
#include <vector>

#include "parallel/strategy.hpp"

namespace st {

// DDP: every rank holds the whole model, its gradients and Adam state; the summed gradient is
// all-reduced once after the last micro-batch, then each rank applies the same update.
class ReplicatedStrategy final : public Strategy {
 public:
  ReplicatedStrategy(const ParamLayout& layout, const AdamWSettings& adamw, Communicator& comm);

  std::span<float> params() override { return params_; }
  std::span<float> grads() override { return grads_; }
  void zero_grads() override;
  void finish_grads() override;
  double grad_norm_squared() override;
  void optimizer_step(double lr, double grad_scale, std::int64_t step) override;
  MemoryReport memory() const override;
  std::string name() const override { return "ddp"; }

 private:
  Communicator& comm_;
  AdamW adamw_;
  std::vector<float> params_, grads_, adam_m_, adam_v_;
};

}  // namespace st
