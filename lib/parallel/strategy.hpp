#pragma once
// A parallel strategy owns one rank's share of the parameters, gradients and optimizer state and
// decides when to communicate. The step loop calls it; the model finds each segment's parameters
// and gradients through it (SegmentBuffers) and calls its hooks, where it gathers, releases and
// reduces.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/timeline.hpp"
#include "deck/config.hpp"
#include "exec/exec.hpp"
#include "model/hooks.hpp"
#include "model/layout.hpp"
#include "optim/adamw.hpp"

namespace st {

// Bytes this rank holds. Model state (the ZeRO table's terms): parameters in their compute
// precision, gradients, and the optimizer's fp32 state (master copy where there is one, Adam m
// and v). On top: workspace, the high-water mark of gathered segments, gradient buffers waiting
// for their reduction, and chunks on their way to a gather.
struct MemoryReport {
  std::uint64_t params = 0, grads = 0, optimizer = 0, workspace = 0;
  std::uint64_t model_state() const { return params + grads + optimizer; }
};

class Strategy : public SegmentBuffers<float> {
 public:
  // A fresh start: every rank passes the same full, flat parameters (fp32) and keeps what it
  // holds; the optimizer state starts from zero.
  virtual void load_params(std::span<const float> full) = 0;
  // The full fp32 parameters (the master copy in mixed precision), on every rank. Collective.
  virtual std::vector<float> gather_params() = 0;

  virtual void zero_grads() = 0;
  // Called before each micro-batch's forward (a pipeline stage: before each backward of one of
  // its chunks); `last` marks the backward that completes the gradients of the segments it runs
  // through (their reductions start during it, not before).
  virtual void begin_micro_batch(bool last) = 0;
  // After the last micro-batch: wait for the reductions; each rank then holds the reduced
  // gradients of what it updates.
  virtual void finish_grads() = 0;
  // Adds the squared L2 norm of the full, reduced gradient (the same on every rank) to *total, a
  // double in the backend's memory holding 0 (a step's StepScalars): queued, nothing comes back
  // to the host. Collective.
  virtual void add_grad_norm_squared(double* total) = 0;
  // AdamW at step `step` (1-based), every gradient multiplied first by *grad_scale, a float in the
  // backend's memory (StepScalars::grad_scale: NaN leaves the weights as they are).
  virtual void optimizer_step(double lr, const float* grad_scale, std::int64_t step) = 0;
  // Wait for collectives the strategy started ahead (prefetches for the next step), so that
  // what the communicators counted belongs to the step that ends here.
  virtual void settle() {}

  // Checkpoints. Ranges are of the flat layout. A checkpoint holds the fp32 parameters (the
  // master copy in mixed precision) and Adam m and v of every element, each written by one rank.
  struct StateRange {
    std::size_t offset = 0, count = 0;
  };
  // A contiguous piece of what this rank writes, with its parameters, m and v where the
  // strategy keeps them (valid until the next optimizer step or resume).
  struct StatePiece {
    std::size_t offset = 0, count = 0;
    const float* params = nullptr;
    const float* m = nullptr;
    const float* v = nullptr;
  };
  // What this rank writes, in order: disjoint across ranks, covering the model together.
  virtual std::vector<StatePiece> state_pieces() = 0;
  // Resuming reads straight into the strategy: the ranges of parameters this rank needs (the
  // whole model unless parameters are sharded) and of optimizer state (what it updates), each
  // with the fp32 memory its values go to. A mixed-precision strategy stages the parameters and
  // converts them in finish_load(), which must follow the reads.
  struct LoadTargets {
    std::vector<StateRange> param_ranges, optimizer_ranges;
    std::vector<float*> params, m, v;  // one per range
  };
  virtual LoadTargets load_targets() = 0;
  virtual void finish_load() = 0;

  // The reduced gradient of `segment` that this rank updates (its share of it where the optimizer
  // state is sharded), in the backend's memory and the strategy's gradient type: after
  // finish_grads, until optimizer_step. A pipeline sums there the shares of the embeddings that
  // its first and last stages both hold.
  virtual Buffer reduced_grads(std::size_t segment) = 0;

  virtual MemoryReport memory() const = 0;
  // Seconds the calling thread has spent waiting for communication so far (exposed time).
  virtual double comm_wait_seconds() const = 0;
  virtual std::string name() const = 0;
  // One line: what is sharded over which group, and the precision.
  virtual std::string description() const = 0;
};

// The communicators a strategy may use: the world's collectives (under tensor parallelism the
// data-parallel ranks: those holding the same slice), for hsdp the groups, and the tensor group.
struct StrategyComms {
  Communicator& world;
  Communicator* group = nullptr;     // hsdp: within a sharding group
  Communicator* replicas = nullptr;  // hsdp: across groups
  Communicator* tensor = nullptr;    // tensor parallelism: the ranks holding the other slices
  const ParamLayout* whole_layout = nullptr;  // ... and the whole model's layout (checkpoints hold it)
  // Pipeline parallelism: segments this rank holds as a copy of another stage's
  // (ShardingSettings::mirrored_segments); a pipeline stage's strategy has whole_layout too.
  std::vector<std::size_t> mirrored_segments = {};
};

struct ExecutionOrder {
  std::vector<std::size_t> forward, backward;  // segments in the order the model uses them
};


class ParallelPlan;

// The strategy the plan describes (what is sharded, the buckets, the collectives), over the
// communicators of the plan's mesh; overlap: parallel.overlap.
// parameters_only: for forward passes only (ShardingSettings::parameters_only).
std::unique_ptr<Strategy> make_strategy(const ParallelPlan& plan, bool overlap, const ParamLayout& layout,
                                        const ExecutionOrder& order, const AdamWSettings& adamw, StrategyComms comms,
                                        Timeline* timeline, Exec& exec = host_exec(), bool parameters_only = false);

}  // namespace st
