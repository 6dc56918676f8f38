#pragma once
// Every strategy of the ZeRO family as one class, parameterised by what is sharded:
//
//   stage 0 (ddp)         nothing: full replicas; gradient buckets all-reduced during backward;
//   stage 1 (zero1)       optimizer state (and the fp32 master copy in mixed precision);
//                         gradients reduce-scattered, each rank updates its shard, params gathered;
//   stage 2 (zero2)       gradients too: each segment reduce-scattered as backward finishes it;
//   stage 3 (zero3, fsdp) parameters too: each segment gathered before its forward and again
//                         before its backward, released after use, the next one prefetched;
//   hsdp                  stage 3 within a group (by default the node), replicated across groups:
//                         the gradient shard is all-reduced over the replicas.
//
// The strategy holds the schedule: what to gather, reduce and release, and when. The arithmetic
// on its buffers (conversions, accumulation, norms, AdamW) runs on the execution backend
// (exec/exec.hpp), host or device, and every buffer lives in that backend's memory space.
//
// What is sharded, the buckets and the collectives are the parallel plan's (parallel/plan.hpp):
// the strategy follows it and decides nothing of its own. Sharding is per segment with the one
// padding rule (ShardLayout). T is the type of parameters
// and gradients for compute and communication: float, or Bf16 in mixed precision, where an fp32
// master copy is what the optimizer updates and the model computes on fp32 copies of each segment.
//
// Gradient accumulation (parallel.grad_reduction): reducing once, nothing is reduced before the
// last micro-batch, and with stage 2 and 3 the segments' gradients are held whole until then (as
// FSDP's no_sync), the memory of the full gradients while accumulating. Reducing every
// micro-batch, stage 2 and 3 reduce-scatter each micro-batch's segment as its backward finishes
// it and add the reduced chunk into the gradient shard (in bf16, into an fp32 sum of the shard):
// no whole-model gradient, the reduce-scatters' bytes once per micro-batch.
#include <deque>
#include <functional>
#include <type_traits>

#include "core/bf16.hpp"
#include "parallel/plan.hpp"
#include "parallel/shard_layout.hpp"
#include "parallel/strategy.hpp"
#include "parallel/workspace.hpp"

namespace st {

struct ShardingSettings {
  std::string name;              // as the deck says it
  bool overlap = true;           // false: wait for every collective where it starts, no prefetch
  // Forward passes only (generate, eval): the parameters as the stage shards them, and no
  // gradients or Adam state (a quarter of ddp's fp32 model state; in bf16 the fp32 master copy
  // the parameters are read into stays, reported as parameters). Backward, the optimizer and
  // checkpoint writes are refused.
  bool parameters_only = false;
  // Under tensor parallelism: the group whose ranks hold the other slices of each layer (the
  // strategy then shards and reduces this rank's slice over the data-parallel ranks, and the
  // gradient norm adds the group's slices, counting the tensors every rank holds once). Null:
  // no tensor parallelism.
  Communicator* tensor = nullptr;
  // With a tensor group: the whole model's layout, which checkpoints hold. The pieces this rank
  // writes and the ranges it reads are given in it (its slices' runs; the tensors every rank of
  // the group holds whole written by the group's first rank), so a checkpoint is the same file
  // whatever the split, and resumes under another.
  const ParamLayout* whole_layout = nullptr;
  // Under pipeline parallelism, the part of the model this rank's stage holds is `layout`, and
  // whole_layout the model's, as above (tensors paired by name). Segments this rank holds as a
  // copy of another stage's (the last stage's embeddings, for the tied LM head): that stage's
  // copy counts them in the gradient norm and writes them to checkpoints.
  std::vector<std::size_t> mirrored_segments;
  // Mixed precision with a model that stores bf16 (parallel.activations = "bf16",
  // model/bf16_storage_model.hpp): each segment's bf16 parameters are lent as they are
  // (bf16_params; params() is refused), with no fp32 copy, and where gradients are not sharded
  // (ddp, zero1) the model's fp32 gradients accumulate in fp32 across micro-batches, rounded to
  // bf16 once, at the last, for the reduction.
  bool bf16_params = false;
};

// Bytes of workspace a ShardedStrategy following `plan` keeps at its high-water mark (the pools
// of gathered segments, gradients awaiting their reduction and chunks on their way to a gather):
// what the planner adds to the model state and activations. Beside the pools' constants it counts.
std::uint64_t workspace_estimate(const ParallelPlan& plan);

template <class T>
class ShardedStrategy final : public Strategy {
 public:
  static constexpr bool kMixed = std::is_same_v<T, Bf16>;

  // plan: what to shard and send (its shard group is `group`'s size, its replicas `replicas`'s);
  // group: the sharding group (the world, or an hsdp group); replicas: across groups, or null.
  ShardedStrategy(const ParallelPlan& plan, const ParamLayout& layout, const ExecutionOrder& order, const AdamWSettings& adamw,
                  Communicator& group, Communicator* replicas, ShardingSettings settings, Timeline* timeline,
                  Exec& exec = host_exec());
  ~ShardedStrategy() override;

  const float* params(std::size_t s) override;
  const Bf16* bf16_params(std::size_t s) override;
  float* grads(std::size_t s) override;
  void before_forward(std::size_t s) override;
  void after_forward(std::size_t s) override;
  void before_backward(std::size_t s) override;
  void grad_ready(std::size_t s) override;

  void load_params(std::span<const float> full) override;
  std::vector<float> gather_params() override;
  void zero_grads() override;
  void begin_micro_batch(bool last) override;
  void finish_grads() override;
  void add_grad_norm_squared(double* total) override;
  void optimizer_step(double lr, const float* grad_scale, std::int64_t step) override;
  void settle() override;
  std::vector<StatePiece> state_pieces() override;
  LoadTargets load_targets() override;
  void finish_load() override;
  MemoryReport memory() const override;
  double comm_wait_seconds() const override { return wait_seconds_; }
  std::string name() const override { return settings_.name; }
  std::string description() const override;
  Buffer reduced_grads(std::size_t segment) override;

 private:
  // A collective in flight and what to do once it is done (copy a result, release buffers).
  struct Pending {
    Request request;
    std::function<void()> done;
    const char* what = "reduction";  // for the timeline's wait span
  };
  void wait(Request& request, const char* what);
  void complete_oldest();
  void drain(std::size_t keep);  // complete until at most `keep` are in flight

  void acquire_params(std::size_t s);
  void release_params(std::size_t s);
  void end_of_use(std::size_t s, const char* pass);  // release, and the compute span on the timeline
  void start_gather(std::size_t s);
  void prefetch(bool forward, std::size_t s);
  void drop_prefetched();
  // The parameters this rank holds, from the full flat fp32 parameters (master copy included).
  void place_params(std::span<const float> full);
  void start_reduction(std::size_t s);
  // Reducing every micro-batch: what to do with segment s's reduced chunk of this micro-batch
  // (`chunk`, from pool_): the first micro-batch's becomes the sum, later ones add to it.
  void add_reduced_chunk(std::size_t s, T* chunk, bool first);
  // A buffer of `count` elements the communicator `from` reduces or gathers again and again: on
  // the host its shared memory where it has some, else the backend's memory.
  template <class U>
  std::span<U> buffer(Memory& memory, Communicator* from, std::size_t count);
  // Resuming on a device: values read on the host, copied to their place in finish_load().
  float* load_target(float* destination, std::size_t count);

  // What this rank updates of segment s: the master copy, its gradients (type T), Adam state.
  std::span<float> master_slice(std::size_t s);
  std::span<T> grad_slice(std::size_t s);
  std::size_t owned(std::size_t s) const;        // elements
  std::size_t owned_flat(std::size_t s) const;   // first of them in the flat layout
  std::size_t opt_offset(std::size_t s) const;   // into master_, adam_m_, adam_v_
  // The buffers AdamW updates from: the parameters (master copy in mixed precision) and the
  // gradients the slices above lie in.
  std::span<float> update_params();
  std::span<T> update_grads();

  ShardingSettings settings_;
  ParallelPlan parallel_plan_;
  Exec& exec_;
  AdamW adamw_;
  Communicator& group_;
  Communicator* replicas_;
  Timeline* timeline_;
  const ShardLayout& shards_;  // the plan's, over the sharding group
  int rank_ = 0;               // in the group

  std::span<T> full_params_;     // stage < 3: padded full buffer
  // The buffers the group reduces and gathers from every step come from group_.allocate():
  // on a shared-memory group every rank maps them and the collectives work on them in place.
  // (hsdp's gradient shard comes from the replicas' communicator, which all-reduces it.)
  // zero1/zero2 gather the parameters in place, each rank's chunk already in full_params_.
  Memory full_params_memory_, full_grads_memory_, shard_params_memory_, grad_shard_memory_;
  Memory master_memory_, adam_m_memory_, adam_v_memory_, grad_sum_memory_, adamw_tiles_memory_;
  // Flat ranges of the tensors every rank of the tensor group holds whole (with a tensor group):
  // their gradients enter the norm on the group's first rank only.
  std::vector<std::pair<std::size_t, std::size_t>> replicated_;
  const ParamLayout* slice_layout_ = nullptr;  // with a whole layout: the layout this rank holds
  std::vector<const TensorSlot*> whole_tensors_;  // ... and each of its tensors' in the whole
  std::vector<bool> mirrored_;                    // per segment: ShardingSettings::mirrored_segments
  TensorSplit tensor_split() const {
    return settings_.tensor ? TensorSplit{settings_.tensor->size(), settings_.tensor->rank()} : TensorSplit{};
  }
  void add_owned_squares(std::size_t s, double* total);
  std::span<T> full_grads_;      // stage < 2: padded full buffer
  std::span<T> shard_params_;    // stage 3: this rank's chunks
  std::span<T> grad_shard_;      // stage >= 2: reduced gradients of this rank's chunks
  // Mixed precision, reducing every micro-batch: the fp32 sum of the micro-batches' reduced
  // chunks, rounded into grad_shard_ once they are all in.
  std::span<float> grad_sum_;
  std::span<float> master_;      // mixed precision: fp32 copy of what this rank updates
  std::span<float> adam_m_, adam_v_;
  std::span<AdamWTile> adamw_tiles_;  // in the backend's memory (Exec::adamw)
  // Resuming: fp32 parameters until finish_load() (mixed precision, or on a device: the whole
  // model unless parameters are sharded), on the host.
  std::vector<float> load_staging_;
  struct PendingUpload {
    float* destination;
    std::vector<float> values;
  };
  std::vector<PendingUpload> load_uploads_;  // resuming on a device: optimizer state, shards
  std::vector<float> state_copy_;            // checkpoints from a device: this rank's state on the host

  WorkspacePool<T> pool_;             // gathers, reduction inputs, chunks
  WorkspacePool<float> float_pool_;   // mixed precision: fp32 compute copies, gradient buffers

  std::vector<const float*> param_view_;  // per segment, while in use
  std::vector<float*> param_copy_;        // mixed precision: the fp32 copy behind param_view_
  std::vector<const T*> lent_;            // ShardingSettings::bf16_params: the bf16 segment, while in use
  bool in_use(std::size_t s) const { return param_view_[s] != nullptr || lent_[s] != nullptr; }
  std::vector<T*> gathered_;              // stage 3: gathered (or being gathered) segment
  std::vector<Request> gather_request_;
  std::vector<float*> grad_buffer_;       // per segment: gradients not yet reduced (pool)
  std::vector<std::size_t> next_forward_, next_backward_;  // prefetch order (npos: none)
  std::size_t forward_first_ = 0, backward_first_ = 0;
  std::vector<std::string> segment_names_;
  std::vector<double> compute_started_us_;  // timeline: when the segment's forward/backward began

  // ddp: segments each of the plan's buckets still waits for in the last micro-batch, set
  // again as the bucket's all-reduce starts.
  std::vector<int> waiting_;

  std::deque<Pending> in_flight_;
  bool last_micro_batch_ = true;
  // Per segment: whether its gradient was reduced into the shard since zero_grads (the first
  // reduction of a step assigns, later ones add). Per segment, not per micro-batch: a pipeline's
  // chunks take their micro-batches' backwards in turns (interleaved 1F1B).
  std::vector<char> reduced_this_step_;
  double wait_seconds_ = 0;
};

extern template class ShardedStrategy<float>;
extern template class ShardedStrategy<Bf16>;

}  // namespace st
