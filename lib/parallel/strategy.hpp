#pragma once
// A parallel strategy owns the flat parameter, gradient and optimizer-state buffers of one rank
// and decides when to communicate. The step loop calls it; the model calls its segment hooks.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "comm/communicator.hpp"
#include "deck/config.hpp"
#include "model/hooks.hpp"
#include "model/layout.hpp"
#include "optim/adamw.hpp"

namespace st {

// Bytes of model state this rank holds.
struct MemoryReport {
  std::uint64_t params = 0, grads = 0, optimizer = 0;
  std::uint64_t total() const { return params + grads + optimizer; }
};

class Strategy : public SegmentHooks {
 public:
  // Parameters the model reads (for a replicated strategy, the whole model).
  virtual std::span<float> params() = 0;
  // Where the model accumulates this micro-batch's gradients.
  virtual std::span<float> grads() = 0;
  virtual void zero_grads() = 0;
  // Called before each micro-batch's forward; `last` marks the one whose backward completes
  // the step's gradients (reductions may start during it, not before).
  virtual void begin_micro_batch(bool /*last*/) {}
  // After the last micro-batch: reduce gradients so each rank holds what it must update.
  virtual void finish_grads() = 0;
  // Squared L2 norm of the full, reduced gradient (the same on every rank).
  virtual double grad_norm_squared() = 0;
  virtual void optimizer_step(double lr, double grad_scale, std::int64_t step) = 0;
  virtual MemoryReport memory() const = 0;
  virtual std::string name() const = 0;
};

std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, const ParamLayout& layout,
                                        const AdamWSettings& adamw, Communicator& comm);

}  // namespace st
