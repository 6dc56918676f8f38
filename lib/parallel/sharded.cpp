#include "parallel/sharded.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace st {
namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);
// Reductions in flight at once during backward: enough to overlap, few enough that the
// workspace holding their inputs stays at a couple of segments.
constexpr std::size_t kReductionsInFlight = 2;
// Segments gathered ahead of the one in use (zero3, hsdp).
constexpr int kPrefetchDepth = 2;

// Typed views for the execution backend.
template <class U>
Buffer view(U* data, std::size_t count) {
  return Buffer::of(std::span<U>(data, count));
}

std::vector<std::size_t> successors(const std::vector<std::size_t>& order, std::size_t segments) {
  std::vector<std::size_t> next(segments, kNone);
  for (std::size_t i = 0; i + 1 < order.size(); ++i) next[order[i]] = order[i + 1];
  return next;
}

// The runs of the flat range [begin, begin + count) of a rank's layout (a tensor-parallel slice,
// a pipeline stage's part, or both) in the whole model's layout, in the slice's order: out(whole
// offset, offset into the range, count). `wholes` pairs each of the slice's tensors with the
// whole model's. The tensors every rank of a tensor group holds whole are left out unless
// `whole_tensors`.
template <class Out>
void runs_in_whole(const std::vector<const TensorSlot*>& wholes, const ParamLayout& slice, TensorSplit split,
                   std::size_t begin, std::size_t count, bool whole_tensors, Out&& out) {
  const auto slices = slice.all_tensors();
  const std::size_t end = begin + count;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const TensorSlot& t = *slices[i];
    if (t.offset >= end || t.offset + t.size <= begin) continue;
    if (t.split == SplitDim::none && !whole_tensors) continue;
    for_each_tensor_run(*wholes[i], t, split, [&](std::size_t w, std::size_t s, std::size_t n) {
      const std::size_t lo = std::max(t.offset + s, begin), hi = std::min(t.offset + s + n, end);
      if (lo < hi) out(wholes[i]->offset + w + (lo - t.offset - s), lo - begin, hi - lo);
    });
  }
}

// Ranges and the memory each one goes to, sorted by where they lie in the file.
void sort_ranges(std::vector<Strategy::StateRange>& ranges, std::vector<std::vector<float*>*> targets) {
  std::vector<std::size_t> order(ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ranges[a].offset < ranges[b].offset; });
  std::vector<Strategy::StateRange> sorted;
  for (const std::size_t i : order) sorted.push_back(ranges[i]);
  ranges = std::move(sorted);
  for (std::vector<float*>* pointers : targets) {
    std::vector<float*> moved;
    for (const std::size_t i : order) moved.push_back((*pointers)[i]);
    *pointers = std::move(moved);
  }
}

}  // namespace

// The counts in workspace_estimate were measured with these: measure them again when they change.
static_assert(kReductionsInFlight == 2 && kPrefetchDepth == 2, "workspace_estimate counts the pools at these depths");

// What the pools above hold at their high-water mark (docs/planner.md). The counts below are
// those of the constants at the top of this file (kReductionsInFlight reductions beside the
// segment being written; kPrefetchDepth gathers ahead of the segment in use), as the
// pools were seen to reach them in instrumented runs of 4- and 10-segment models: the pools keep
// a block per size class in use at once, and the tied embedding is in use at both ends of the
// model. fp32: gradient buffers (the embedding's, the final norm's and three blocks'; all of
// them while micro-batches accumulate to be reduced once), zero3's gathered segments (the embedding and five
// blocks, or every segment of a smaller model), zero1's reduced chunks (three of the largest and
// the smallest). bf16 adds fp32 copies of the segments in use with their fp32 gradients, zero2's
// bf16 inputs of the reductions (AdamW reads the bf16 gradients as they are).
// Reducing every micro-batch adds the reduced chunks on their way into the shard (as zero1's),
// and in bf16 the shard's fp32 sum with a chunk widened to be added to it. A model with bf16
// activations (ParallelPlan::stores_bf16) makes no fp32 copies: its fp32 gradients alone.
std::uint64_t workspace_estimate(const ParallelPlan& plan) {
  const ShardLayout& shards = plan.shards();
  const bool mixed = plan.mixed();
  // Gradient buffers are held whole across micro-batches only when they are reduced once a step.
  const bool whole_gradient = plan.grads_sharded() && plan.micro_batches() > 1 && !plan.reduces_each_micro_batch();
  const std::size_t count = shards.segments().size();
  std::vector<std::uint64_t> padded, chunks, blocks;
  std::uint64_t largest_chunk = 0, largest_block = 0;
  for (std::size_t s = 0; s < count; ++s) {
    padded.push_back(shards.padded(s));
    chunks.push_back(shards.segment(s).chunk);
    if (s > 0 && s + 1 < count) {
      blocks.push_back(shards.padded(s));
      largest_block = std::max<std::uint64_t>(largest_block, shards.segment(s).size);
    }
    largest_chunk = std::max<std::uint64_t>(
        largest_chunk, plan.optimizer_sharded() ? shards.segment(s).chunk : shards.segment(s).size);
  }
  auto sum_largest = [](std::vector<std::uint64_t> v, std::size_t k) {
    std::sort(v.rbegin(), v.rend());
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < std::min(k, v.size()); ++i) total += v[i];
    return total;
  };
  // The three largest and the smallest (every segment when there are at most four).
  auto three_and_smallest = [&](const std::vector<std::uint64_t>& v) {
    return v.size() <= 4 ? sum_largest(v, v.size()) : sum_largest(v, 3) + *std::min_element(v.begin(), v.end());
  };
  const std::uint64_t embedding = shards.padded(0), norm = count > 1 ? shards.padded(count - 1) : 0;
  const std::uint64_t t = mixed ? 2 : 4;
  std::uint64_t bytes = 0;
  // zero1's reduced chunks; reducing every micro-batch, the chunks on their way into the shard.
  if (plan.reduce_scatters_in_place() || plan.reduces_each_micro_batch()) bytes += three_and_smallest(chunks) * t;
  if (plan.params_sharded()) bytes += (embedding + sum_largest(blocks, 5) + (blocks.size() < 5 ? norm : 0)) * t;
  if (!mixed) {
    if (plan.grads_sharded())
      bytes += (whole_gradient ? shards.padded_total() : embedding + norm + sum_largest(blocks, 3)) * 4;
    return bytes;
  }
  const std::uint64_t unpadded_embedding = shards.segment(0).size;
  const std::uint64_t unpadded_norm = count > 1 ? shards.segment(count - 1).size : 0;
  std::uint64_t fp32 = unpadded_embedding + 2 * largest_block + std::max(largest_block, unpadded_embedding) + 2 * unpadded_norm;
  if (plan.stores_bf16()) {
    // No fp32 copies of the segments in use: the model reads bf16. Its fp32 gradient buffers
    // (padded): the embedding's (held for the whole backward), a block's and the norm's; all of
    // them while micro-batches accumulate to be reduced once (ddp and zero1 always do).
    const bool held = plan.micro_batches() > 1 && !plan.reduces_each_micro_batch();
    fp32 = held ? shards.padded_total() : embedding + sum_largest(blocks, 1) + norm;  // padded, as the pool's
  } else if (whole_gradient) {
    fp32 += shards.padded_total();
  }
  // Reducing every micro-batch: the fp32 sum of the shard, and a chunk widened to be added to it.
  if (plan.reduces_each_micro_batch()) fp32 += shards.shard_total() + largest_chunk;
  bytes += fp32 * 4;
  if (plan.grads_sharded() && !plan.params_sharded()) bytes += three_and_smallest(padded) * t;
  return bytes;
}

template <class T>
ShardedStrategy<T>::ShardedStrategy(const ParallelPlan& plan, const ParamLayout& layout, const ExecutionOrder& order,
                                    const AdamWSettings& adamw, Communicator& group, Communicator* replicas,
                                    ShardingSettings settings, Timeline* timeline, Exec& exec)
    : settings_(std::move(settings)),
      parallel_plan_(plan),
      exec_(exec),
      adamw_(adamw, layout),
      group_(group),
      replicas_(replicas),
      timeline_(timeline),
      shards_(parallel_plan_.shards()),
      rank_(group.rank()),
      pool_(exec),
      float_pool_(exec) {
  ST_REQUIRE(layout.total() == shards_.flat_total(), "the parallel plan was made for another layout");
  ST_REQUIRE(!settings_.tensor || settings_.whole_layout, "a tensor group's strategy needs the whole model's layout");
  if (settings_.whole_layout) {
    slice_layout_ = &layout;
    for (const TensorSlot* t : layout.all_tensors()) whole_tensors_.push_back(&settings_.whole_layout->tensor(t->name));
  }
  mirrored_.assign(layout.segments().size(), false);
  for (const std::size_t s : settings_.mirrored_segments) {
    ST_REQUIRE(s < mirrored_.size(), "a mirrored segment outside the layout");
    mirrored_[s] = true;
  }
  if (settings_.tensor)
    for (const TensorSlot* t : layout.all_tensors())
      if (t->split == SplitDim::none) replicated_.emplace_back(t->offset, t->offset + t->size);
  ST_REQUIRE(group.size() == parallel_plan_.mesh().shards, "the sharding group is not the plan's");
  ST_REQUIRE((replicas ? replicas->size() : 1) == parallel_plan_.mesh().replicas, "the replicas are not the plan's");
  // Every buffer as the plan sizes it: full (padded, so that a segment is one collective) or
  // this rank's shard.
  const std::size_t opt_total = parallel_plan_.optimizer().elements;
  const bool training = !settings_.parameters_only;
  const std::size_t param_elements = parallel_plan_.params().elements, grad_elements = parallel_plan_.grads().elements;
  // Full parameters are gathered in place where the optimizer state is sharded (zero1/zero2).
  if (!parallel_plan_.params_sharded())
    full_params_ = buffer<T>(full_params_memory_, parallel_plan_.optimizer_sharded() ? &group : nullptr, param_elements);
  if (!parallel_plan_.grads_sharded() && training) full_grads_ = buffer<T>(full_grads_memory_, &group, grad_elements);
  if (parallel_plan_.params_sharded()) shard_params_ = buffer<T>(shard_params_memory_, &group, param_elements);
  if (parallel_plan_.grads_sharded() && training) grad_shard_ = buffer<T>(grad_shard_memory_, replicas_, grad_elements);
  if (kMixed && parallel_plan_.reduces_each_micro_batch() && training)
    grad_sum_ = buffer<float>(grad_sum_memory_, nullptr, grad_elements);
  // Mixed precision keeps the fp32 master copy even for forward passes only: a checkpoint's
  // parameters are read into it and converted from there.
  if (kMixed) master_ = buffer<float>(master_memory_, nullptr, opt_total);
  if (training) {
    adam_m_ = buffer<float>(adam_m_memory_, nullptr, opt_total);
    adam_v_ = buffer<float>(adam_v_memory_, nullptr, opt_total);
  }

  const std::size_t n = shards_.segments().size();
  param_view_.assign(n, nullptr);
  param_copy_.assign(n, nullptr);
  lent_.assign(n, nullptr);
  gathered_.assign(n, nullptr);
  gather_request_.resize(n);
  grad_buffer_.assign(n, nullptr);
  compute_started_us_.assign(n, 0.0);
  next_forward_ = successors(order.forward, n);
  next_backward_ = successors(order.backward, n);
  forward_first_ = order.forward.empty() ? kNone : order.forward.front();
  backward_first_ = order.backward.empty() ? kNone : order.backward.front();
  for (const Segment& segment : layout.segments()) segment_names_.push_back(segment.name);

  for (const GradientBucket& bucket : parallel_plan_.buckets()) waiting_.push_back(bucket.segments);
  reduced_this_step_.assign(n, 0);

  if (training) {
    // The update's tiles, made once: where each owned run lies in the parameter, gradient and
    // Adam buffers, and whether it decays.
    std::vector<AdamWTile> tiles;
    const float* params = update_params().data();
    const T* grads = update_grads().data();
    for (std::size_t s = 0; s < n; ++s)
      if (owned(s) > 0)
        adamw_.append_tiles(tiles, owned_flat(s), owned(s), static_cast<std::size_t>(master_slice(s).data() - params),
                            static_cast<std::size_t>(grad_slice(s).data() - grads), opt_offset(s));
    adamw_tiles_ = buffer<AdamWTile>(adamw_tiles_memory_, nullptr, tiles.size());
    exec_.upload(adamw_tiles_.data(), tiles.data(), tiles.size() * sizeof(AdamWTile));
  }
}

template <class T>
template <class U>
std::span<U> ShardedStrategy<T>::buffer(Memory& memory, Communicator* from, std::size_t count) {
  const std::size_t bytes = count * sizeof(U);
  if (exec_.space() == MemorySpace::host) memory = from ? from->allocate(bytes) : Memory::private_memory(bytes);
  else memory = exec_.allocate(bytes);
  return memory.template as<U>();
}

template <class T>
ShardedStrategy<T>::~ShardedStrategy() = default;

template <class T>
Buffer ShardedStrategy<T>::reduced_grads(std::size_t segment) {
  ST_REQUIRE(!settings_.parameters_only, "a strategy made for forward passes only holds no gradients or optimizer state");
  return Buffer::of(grad_slice(segment));
}

template <class T>
std::string ShardedStrategy<T>::description() const {
  std::string line = settings_.name + ": " + parallel_plan_.sharded_what();
  if (parallel_plan_.optimizer_sharded()) line += " over " + std::to_string(group_.size()) + " rank(s)";
  if (replicas_) line += ", replicated over " + std::to_string(replicas_->size()) + " group(s)";
  line += kMixed ? "; bf16 params/grads, fp32 master weights and Adam state" : "; fp32";
  if (exec_.space() == MemorySpace::device) line += "; on the GPU";
  return line;
}

// ---- bookkeeping of collectives in flight ----

template <class T>
void ShardedStrategy<T>::wait(Request& request, const char* what) {
  Stopwatch clock;
  {
    Timeline::Span span(timeline_, "compute", std::string("wait: ") + what);
    request.wait();
  }
  wait_seconds_ += clock.seconds();
}

template <class T>
void ShardedStrategy<T>::complete_oldest() {
  Pending pending = std::move(in_flight_.front());
  in_flight_.pop_front();
  wait(pending.request, pending.what);
  if (pending.done) pending.done();
}

template <class T>
void ShardedStrategy<T>::drain(std::size_t keep) {
  while (in_flight_.size() > keep) complete_oldest();
}

// ---- where each segment's parameters and gradients are ----

template <class T>
std::size_t ShardedStrategy<T>::owned(std::size_t s) const {
  return parallel_plan_.owned(s, rank_);
}

template <class T>
std::size_t ShardedStrategy<T>::owned_flat(std::size_t s) const {
  return parallel_plan_.owned_flat(s, rank_);
}

template <class T>
std::size_t ShardedStrategy<T>::opt_offset(std::size_t s) const {
  return parallel_plan_.optimizer_offset(s);
}

template <class T>
std::span<float> ShardedStrategy<T>::master_slice(std::size_t s) {
  const std::size_t n = owned(s);
  if constexpr (kMixed) {
    return {master_.data() + opt_offset(s), n};
  } else {
    if (parallel_plan_.params_sharded()) return {shard_params_.data() + shards_.segment(s).shard_offset, n};
    const std::size_t at =
        parallel_plan_.optimizer_sharded() ? shards_.owned_padded_offset(s, rank_) : shards_.segment(s).padded_offset;
    return {full_params_.data() + at, n};
  }
}

template <class T>
std::span<float> ShardedStrategy<T>::update_params() {
  if constexpr (kMixed) return master_;
  else return parallel_plan_.params_sharded() ? shard_params_ : full_params_;
}

template <class T>
std::span<T> ShardedStrategy<T>::update_grads() {
  return parallel_plan_.grads_sharded() ? grad_shard_ : full_grads_;
}

template <class T>
std::span<T> ShardedStrategy<T>::grad_slice(std::size_t s) {
  const std::size_t n = owned(s);
  if (!parallel_plan_.optimizer_sharded()) return {full_grads_.data() + shards_.segment(s).padded_offset, n};
  if (!parallel_plan_.grads_sharded()) return {full_grads_.data() + shards_.owned_padded_offset(s, rank_), n};
  return {grad_shard_.data() + shards_.segment(s).shard_offset, n};
}

template <class T>
const float* ShardedStrategy<T>::params(std::size_t s) {
  ST_REQUIRE(!settings_.bf16_params, "fp32 parameters asked of a strategy that lends bf16 ones (bf16_params)");
  ST_REQUIRE(param_view_[s] != nullptr, "segment parameters used outside their hooks");
  return param_view_[s];
}

template <class T>
const Bf16* ShardedStrategy<T>::bf16_params(std::size_t s) {
  if constexpr (!kMixed) {
    return nullptr;
  } else {
    if (!settings_.bf16_params) return nullptr;
    ST_REQUIRE(lent_[s] != nullptr, "segment parameters used outside their hooks");
    return lent_[s];
  }
}

template <class T>
float* ShardedStrategy<T>::grads(std::size_t s) {
  if constexpr (!kMixed)
    if (!parallel_plan_.grads_sharded()) return full_grads_.data() + shards_.segment(s).padded_offset;
  if (!grad_buffer_[s]) {
    const std::size_t n = shards_.padded(s);
    grad_buffer_[s] = float_pool_.acquire(n);
    exec_.zero(grad_buffer_[s], n * sizeof(float));
  }
  return grad_buffer_[s];
}

template <class T>
void ShardedStrategy<T>::start_gather(std::size_t s) {
  const SegmentShard& seg = shards_.segment(s);
  T* buffer = pool_.acquire(shards_.padded(s));
  gathered_[s] = buffer;
  // The block may still be read by kernels queued before (its last user released it): the
  // gather is ordered after everything queued so far.
  const void* ready = exec_.before_communication();
  gather_request_[s] = group_.start_all_gather(
      Buffer::of(std::span<const T>(shard_params_.data() + seg.shard_offset, seg.chunk), ready),
      Buffer::of(std::span<T>(buffer, shards_.padded(s)), ready));
}

template <class T>
void ShardedStrategy<T>::prefetch(bool forward, std::size_t s) {
  if (!parallel_plan_.params_sharded() || !settings_.overlap) return;
  // Gather the next segments that are not in use, up to kPrefetchDepth ahead: the collectives
  // run in order on one progress thread, so a gather issued only one segment ahead would queue
  // behind the reduce-scatter of the segment just finished. The end of forward runs on into
  // the start of backward; a forward without backward (validation) uses what was gathered the
  // next time, as the parameters have not changed.
  const std::vector<std::size_t>* next = forward ? &next_forward_ : &next_backward_;
  auto step = [&](std::size_t from) {
    std::size_t to = (*next)[from];
    if (to == kNone && next == &next_forward_) {
      next = &next_backward_;
      to = backward_first_;
    }
    return to;
  };
  int started = 0;
  for (std::size_t n = step(s); n != kNone && started < kPrefetchDepth; n = step(n)) {
    if (in_use(n)) continue;
    if (!gathered_[n]) start_gather(n);
    ++started;
  }
}

template <class T>
void ShardedStrategy<T>::drop_prefetched() {
  for (std::size_t s = 0; s < gathered_.size(); ++s)
    if (gathered_[s] && !in_use(s)) {
      gather_request_[s].wait();
      pool_.release(gathered_[s]);
      gathered_[s] = nullptr;
    }
}

template <class T>
void ShardedStrategy<T>::acquire_params(std::size_t s) {
  ST_REQUIRE(!in_use(s), "segment acquired twice");
  if (timeline_) compute_started_us_[s] = timeline_->now_us();
  const std::size_t n = shards_.segment(s).size;
  const T* source = nullptr;
  if (parallel_plan_.params_sharded()) {
    if (!gathered_[s]) start_gather(s);
    wait(gather_request_[s], "gather");
    source = gathered_[s];
  } else {
    source = full_params_.data() + shards_.segment(s).padded_offset;
  }
  if constexpr (kMixed) {
    if (settings_.bf16_params) {  // the model reads bf16: the segment itself (a gathered one kept until release)
      lent_[s] = source;
      return;
    }
    // The fp32 kernels: an fp32 copy of the bf16 segment for as long as it is used.
    float* copy = float_pool_.acquire(n);
    exec_.convert(view(copy, n), view(source, n));
    param_copy_[s] = copy;
    param_view_[s] = copy;
    if (gathered_[s]) {
      pool_.release(gathered_[s]);
      gathered_[s] = nullptr;
    }
  } else {
    param_view_[s] = source;
  }
}

template <class T>
void ShardedStrategy<T>::release_params(std::size_t s) {
  param_view_[s] = nullptr;
  lent_[s] = nullptr;
  if (param_copy_[s]) {
    float_pool_.release(param_copy_[s]);
    param_copy_[s] = nullptr;
  }
  if (gathered_[s]) {  // stage 3 in fp32: the gathered segment itself was in use
    pool_.release(gathered_[s]);
    gathered_[s] = nullptr;
  }
}

// ---- hooks ----

template <class T>
void ShardedStrategy<T>::before_forward(std::size_t s) {
  acquire_params(s);
  prefetch(true, s);
}

template <class T>
void ShardedStrategy<T>::end_of_use(std::size_t s, const char* pass) {
  release_params(s);
  if (timeline_ && timeline_->enabled())
    timeline_->record("compute", pass + segment_names_[s], compute_started_us_[s], timeline_->now_us());
}

template <class T>
void ShardedStrategy<T>::after_forward(std::size_t s) {
  end_of_use(s, "forward ");
}

template <class T>
void ShardedStrategy<T>::before_backward(std::size_t s) {
  ST_REQUIRE(!settings_.parameters_only, "a strategy made for forward passes only holds no gradients or optimizer state");
  acquire_params(s);
  prefetch(false, s);
}

template <class T>
void ShardedStrategy<T>::grad_ready(std::size_t s) {
  end_of_use(s, "backward ");
  if constexpr (kMixed) {
    // A model that stores bf16 keeps its fp32 gradients until the last micro-batch.
    const bool hold = settings_.bf16_params && !last_micro_batch_;
    if (!parallel_plan_.grads_sharded() && !hold) {
      // Accumulate this micro-batch's fp32 gradients into the bf16 gradient buffer.
      T* into = full_grads_.data() + shards_.segment(s).padded_offset;
      exec_.accumulate(view(into, shards_.segment(s).size), grad_buffer_[s]);
      float_pool_.release(grad_buffer_[s]);
      grad_buffer_[s] = nullptr;
    }
  }
  if (last_micro_batch_ || parallel_plan_.reduces_each_micro_batch()) start_reduction(s);
}

template <class T>
void ShardedStrategy<T>::add_reduced_chunk(std::size_t s, T* chunk, bool first) {
  const SegmentShard& seg = shards_.segment(s);
  if constexpr (kMixed) {
    const Buffer sum = view(grad_sum_.data() + seg.shard_offset, seg.chunk);
    if (first) {
      exec_.convert(sum, view(chunk, seg.chunk));
    } else {
      float* widened = float_pool_.acquire(seg.chunk);
      exec_.convert(view(widened, seg.chunk), view(chunk, seg.chunk));
      exec_.accumulate(sum, widened);
      float_pool_.release(widened);
    }
  } else {
    exec_.accumulate(view(grad_shard_.data() + seg.shard_offset, seg.chunk), chunk);
  }
  pool_.release(chunk);
}

template <class T>
void ShardedStrategy<T>::start_reduction(std::size_t s) {
  const SegmentShard& seg = shards_.segment(s);
  const std::size_t padded = shards_.padded(s);
  if (!parallel_plan_.optimizer_sharded()) {
    if (group_.size() == 1) return;
    const std::size_t b = parallel_plan_.bucket_of()[s];
    if (--waiting_[b] > 0) return;
    // Each rank's gradients are already scaled by 1/(micro-batches x ranks): a sum gives the mean.
    const GradientBucket& bucket = parallel_plan_.buckets()[b];
    waiting_[b] = bucket.segments;
    const void* ready = exec_.before_communication();
    in_flight_.push_back(
        {group_.start_all_reduce(
             Buffer::of(std::span<T>(full_grads_.data() + bucket.begin, bucket.end - bucket.begin), ready), ReduceOp::sum),
         {}});
    if (!settings_.overlap) drain(0);
    return;
  }
  if (parallel_plan_.reduce_scatters_in_place()) {
    // Reduce-scatter the segment; this rank's reduced chunk replaces its slice of the buffer.
    T* chunk = pool_.acquire(seg.chunk);
    const void* ready = exec_.before_communication();
    in_flight_.push_back({group_.start_reduce_scatter(
                              Buffer::of(std::span<const T>(full_grads_.data() + seg.padded_offset, padded), ready),
                              Buffer::of(std::span<T>(chunk, seg.chunk), ready), ReduceOp::sum),
                          [this, s, chunk] {
                            exec_.copy(full_grads_.data() + shards_.owned_padded_offset(s, rank_), chunk,
                                       owned(s) * sizeof(T));
                            pool_.release(chunk);
                          }});
  } else {
    // Reduce-scatter the segment's gradient buffer straight into this rank's gradient shard.
    float* buffer = grad_buffer_[s];
    grad_buffer_[s] = nullptr;
    std::function<void()> release;
    const T* input = nullptr;
    if constexpr (kMixed) {
      T* rounded = pool_.acquire(padded);
      exec_.convert(view(rounded, padded), view(buffer, padded));
      float_pool_.release(buffer);
      input = rounded;
      release = [this, rounded] { pool_.release(rounded); };
    } else {
      input = buffer;
      release = [this, buffer] { float_pool_.release(buffer); };
    }
    const void* ready = exec_.before_communication();
    // Once a step, or the first of several micro-batches in fp32, the reduced chunk lands in the
    // gradient shard; otherwise it goes through a chunk of the pool and is added there.
    const bool first = !reduced_this_step_[s];
    reduced_this_step_[s] = 1;
    const bool into_shard = !parallel_plan_.reduces_each_micro_batch() || (first && !kMixed);
    T* chunk = into_shard ? grad_shard_.data() + seg.shard_offset : pool_.acquire(seg.chunk);
    if (!into_shard)
      release = [this, s, chunk, first, release = std::move(release)] {
        release();
        add_reduced_chunk(s, chunk, first);
      };
    in_flight_.push_back({group_.start_reduce_scatter(Buffer::of(std::span<const T>(input, padded), ready),
                                                      Buffer::of(std::span<T>(chunk, seg.chunk), ready), ReduceOp::sum),
                          std::move(release)});
  }
  drain(settings_.overlap ? kReductionsInFlight : 0);
}

// ---- the step ----

template <class T>
void ShardedStrategy<T>::zero_grads() {
  ST_REQUIRE(!settings_.parameters_only, "a strategy made for forward passes only holds no gradients or optimizer state");
  exec_.zero(full_grads_.data(), full_grads_.size_bytes());
  last_micro_batch_ = true;
  std::fill(reduced_this_step_.begin(), reduced_this_step_.end(), 0);
  for (std::size_t b = 0; b < waiting_.size(); ++b) waiting_[b] = parallel_plan_.buckets()[b].segments;
}

template <class T>
void ShardedStrategy<T>::begin_micro_batch(bool last) {
  last_micro_batch_ = last;
}

template <class T>
void ShardedStrategy<T>::finish_grads() {
  drain(0);
  for (float* buffer : grad_buffer_) ST_REQUIRE(buffer == nullptr, "a segment's gradients were never reduced");
  if (!grad_sum_.empty()) exec_.convert(Buffer::of(grad_shard_), Buffer::of(std::span<const float>(grad_sum_)));
  if (replicas_ && replicas_->size() > 1) {
    // hsdp: every group holds the same shard layout; sum the shards across groups.
    const void* ready = exec_.before_communication();
    Request request = replicas_->start_all_reduce(Buffer::of(std::span<T>(grad_shard_), ready), ReduceOp::sum);
    wait(request, "replica all-reduce");
  }
}

template <class T>
void ShardedStrategy<T>::add_owned_squares(std::size_t s, double* total) {
  const std::span<T> grads = grad_slice(s);
  if (!settings_.tensor) {
    const Buffer whole = Buffer::of(grads);
    return exec_.add_sum_squares(total, std::span<const Buffer>(&whole, 1));
  }
  // The tensor group's slices partition the split tensors; the whole ones are the same on every
  // rank of the group and count once, on its first rank.
  const std::size_t begin = owned_flat(s), end = begin + grads.size();
  const bool first = settings_.tensor->rank() == 0;
  std::vector<Buffer> parts;
  std::size_t at = begin;
  auto add = [&](std::size_t from, std::size_t to) {
    if (to > from) parts.push_back(Buffer::of(grads.subspan(from - begin, to - from)));
  };
  for (const auto& [r_begin, r_end] : replicated_) {
    const std::size_t lo = std::max(r_begin, begin), hi = std::min(r_end, end);
    if (lo >= hi) continue;
    add(at, lo);
    if (first) add(lo, hi);
    at = hi;
  }
  add(at, end);
  exec_.add_sum_squares(total, parts);
}

template <class T>
void ShardedStrategy<T>::add_grad_norm_squared(double* total) {
  for (std::size_t s = 0; s < shards_.segments().size(); ++s)
    if (!mirrored_[s]) add_owned_squares(s, total);
  // The shards of a group partition the gradient; replicas hold the same shards; the tensor
  // group's ranks hold the slices of each layer. Summed in place, in the backend's memory: a
  // device communicator reduces device buffers only, and nothing comes back to the host.
  if (parallel_plan_.optimizer_sharded() && group_.size() > 1)
    group_.all_reduce(Buffer::of(std::span<double>(total, 1), exec_.before_communication()), ReduceOp::sum);
  if (settings_.tensor && settings_.tensor->size() > 1)
    settings_.tensor->all_reduce(Buffer::of(std::span<double>(total, 1), exec_.before_communication()), ReduceOp::sum);
}

template <class T>
void ShardedStrategy<T>::optimizer_step(double lr, const float* grad_scale, std::int64_t step) {
  ST_REQUIRE(!settings_.parameters_only, "a strategy made for forward passes only holds no gradients or optimizer state");
  drop_prefetched();  // gathered before the update: stale after it
  // Everything this rank updates, in one launch (bf16 gradients are widened as they are read).
  exec_.adamw(adamw_.step_constants(lr, step), adamw_tiles_.data(), adamw_tiles_.size(), update_params().data(),
              Buffer::of(update_grads()), adam_m_.data(), adam_v_.data(), grad_scale);

  // Publish the updated parameters where the model reads them.
  if (!parallel_plan_.optimizer_sharded()) {
    if constexpr (kMixed)
      for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
        const std::span<float> m = master_slice(s);
        exec_.convert(view(full_params_.data() + shards_.segment(s).padded_offset, m.size()), Buffer::of(m));
      }
  } else if (parallel_plan_.params_sharded()) {
    if constexpr (kMixed)
      for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
        const std::span<float> m = master_slice(s);
        exec_.convert(view(shard_params_.data() + shards_.segment(s).shard_offset, m.size()), Buffer::of(m));
      }
    // The next forward's first segments move while the step's loss is reduced and logged.
    if (settings_.overlap && forward_first_ != kNone) {
      start_gather(forward_first_);
      prefetch(true, forward_first_);
    }
  } else {
    // zero1/zero2: all-gather every segment's updated chunks into the full parameters, in place:
    // this rank's chunk is its block of the segment (fp32: the update wrote it there already).
    for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
      const SegmentShard& seg = shards_.segment(s);
      T* chunk = full_params_.data() + shards_.owned_padded_offset(s, rank_);
      const std::span<float> m = master_slice(s);
      if constexpr (kMixed) exec_.convert(view(chunk, m.size()), Buffer::of(m));
      exec_.zero(chunk + m.size(), (seg.chunk - m.size()) * sizeof(T));
      const void* ready = exec_.before_communication();
      in_flight_.push_back(
          {group_.start_all_gather(
               Buffer::of(std::span<const T>(chunk, seg.chunk), ready),
               Buffer::of(std::span<T>(full_params_.data() + seg.padded_offset, shards_.padded(s)), ready)),
           [] {}, "parameter gather"});
      drain(kReductionsInFlight);  // a few gathers in flight at a time
    }
    drain(0);
  }
}

template <class T>
void ShardedStrategy<T>::settle() {
  for (std::size_t s = 0; s < gathered_.size(); ++s)
    if (gathered_[s] && !in_use(s)) wait(gather_request_[s], "gather");
}

// ---- whole-model views ----

template <class T>
void ShardedStrategy<T>::load_params(std::span<const float> full) {
  ST_REQUIRE(full.size() == shards_.flat_total(), "parameter buffer does not match the layout");
  place_params(full);
  if (!settings_.parameters_only) {
    exec_.zero(adam_m_.data(), adam_m_.size_bytes());
    exec_.zero(adam_v_.data(), adam_v_.size_bytes());
  }
  drop_prefetched();
}

template <class T>
void ShardedStrategy<T>::place_params(std::span<const float> full) {
  // Segment by segment: on a device the fp32 values go over to a staging block first; then each
  // copy this rank holds is converted from them.
  const bool on_device = exec_.space() == MemorySpace::device;
  for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
    const SegmentShard& seg = shards_.segment(s);
    const float* source = full.data() + seg.offset;
    float* staged = nullptr;
    if (on_device) {
      staged = float_pool_.acquire(seg.size);
      exec_.upload(staged, source, seg.size * sizeof(float));
      source = staged;
    }
    if (!parallel_plan_.params_sharded()) exec_.convert(view(full_params_.data() + seg.padded_offset, seg.size), view(source, seg.size));
    const std::size_t n = owned(s), local = owned_flat(s) - seg.offset;
    if (parallel_plan_.params_sharded()) exec_.convert(view(shard_params_.data() + seg.shard_offset, n), view(source + local, n));
    if constexpr (kMixed) exec_.copy(master_slice(s).data(), source + local, n * sizeof(float));
    if (staged) float_pool_.release(staged);
  }
}

template <class T>
std::vector<float> ShardedStrategy<T>::gather_params() {
  std::vector<float> full(shards_.flat_total());
  // The gather's buffers: the backend's memory on a device (from the pool), plain vectors on the
  // host (this runs once, at the end: the pool keeps what it hands out).
  const bool on_device = exec_.space() == MemorySpace::device;
  std::vector<float> host_chunk, host_gathered;
  for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
    const SegmentShard& seg = shards_.segment(s);
    const std::span<float> m = master_slice(s);
    if (!parallel_plan_.optimizer_sharded()) {  // every rank holds the whole model
      exec_.download(full.data() + seg.offset, m.data(), m.size_bytes());
      continue;
    }
    float* chunk = nullptr;
    float* gathered = nullptr;
    if (on_device) {
      chunk = float_pool_.acquire(seg.chunk);
      gathered = float_pool_.acquire(shards_.padded(s));
    } else {
      host_chunk.resize(seg.chunk);
      host_gathered.resize(shards_.padded(s));
      chunk = host_chunk.data();
      gathered = host_gathered.data();
    }
    exec_.copy(chunk, m.data(), m.size_bytes());
    exec_.zero(chunk + m.size(), (seg.chunk - m.size()) * sizeof(float));
    const void* ready = exec_.before_communication();
    group_.all_gather(Buffer::of(std::span<const float>(chunk, seg.chunk), ready),
                      Buffer::of(std::span<float>(gathered, shards_.padded(s)), ready));
    exec_.download(full.data() + seg.offset, gathered, seg.size * sizeof(float));
    if (on_device) {
      float_pool_.release(gathered);
      float_pool_.release(chunk);
    }
  }
  return full;
}

// ---- checkpoints ----

template <class T>
std::vector<Strategy::StatePiece> ShardedStrategy<T>::state_pieces() {
  ST_REQUIRE(!settings_.parameters_only, "a strategy made for forward passes only holds no gradients or optimizer state");
  // Which part of the model this rank writes is the plan's; the strategy says where it lies.
  std::vector<StatePiece> pieces;
  for (const ParallelPlan::WrittenPiece& w : parallel_plan_.checkpoint_pieces(rank_, replicas_ ? replicas_->rank() : 0)) {
    const std::size_t s = w.segment, local = w.begin - owned_flat(s);
    if (mirrored_[s]) continue;
    pieces.push_back({w.begin, w.end - w.begin, master_slice(s).data() + local, adam_m_.data() + opt_offset(s) + local,
                      adam_v_.data() + opt_offset(s) + local});
  }
  if (exec_.space() == MemorySpace::device) {
    // The writer reads host memory: this rank's share comes over, piece by piece, into one copy.
    std::size_t total = 0;
    for (const StatePiece& p : pieces) total += p.count;
    state_copy_.resize(3 * total);
    float* at = state_copy_.data();
    for (StatePiece& p : pieces)
      for (const float** field : {&p.params, &p.m, &p.v}) {
        exec_.download(at, *field, p.count * sizeof(float));
        *field = at;
        at += p.count;
      }
  }
  if (!settings_.whole_layout) return pieces;
  // The file holds the whole model: each piece goes where this rank's slices lie in it.
  const TensorSplit split = tensor_split();
  std::vector<StatePiece> in_whole;
  for (const StatePiece& p : pieces)
    runs_in_whole(whole_tensors_, *slice_layout_, split, p.offset, p.count, split.rank == 0,
                  [&](std::size_t at, std::size_t off, std::size_t n) {
                    in_whole.push_back({at, n, p.params + off, p.m + off, p.v + off});
                  });
  std::sort(in_whole.begin(), in_whole.end(), [](const StatePiece& a, const StatePiece& b) { return a.offset < b.offset; });
  return in_whole;
}

template <class T>
Strategy::LoadTargets ShardedStrategy<T>::load_targets() {
  LoadTargets t;
  const bool on_device = exec_.space() == MemorySpace::device;
  // Parameters held whole are staged on the host and placed by finish_load() where they are
  // converted (mixed precision) or live on a device.
  const bool staged_whole = !parallel_plan_.params_sharded() && (kMixed || on_device);
  if (staged_whole) load_staging_.assign(shards_.flat_total(), 0.0f);
  load_uploads_.clear();
  for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
    const SegmentShard& seg = shards_.segment(s);
    if (!parallel_plan_.params_sharded()) {  // every rank holds the whole segment
      t.param_ranges.push_back({seg.offset, seg.size});
      if (staged_whole) t.params.push_back(load_staging_.data() + seg.offset);
      else t.params.push_back(reinterpret_cast<float*>(full_params_.data()) + seg.padded_offset);
    } else if (owned(s) > 0) {  // the master slice: the shard itself in fp32
      t.param_ranges.push_back({owned_flat(s), owned(s)});
      t.params.push_back(load_target(master_slice(s).data(), owned(s)));
    }
    if (owned(s) > 0 && !settings_.parameters_only) {
      t.optimizer_ranges.push_back({owned_flat(s), owned(s)});
      t.m.push_back(load_target(adam_m_.data() + opt_offset(s), owned(s)));
      t.v.push_back(load_target(adam_v_.data() + opt_offset(s), owned(s)));
    }
  }
  if (!settings_.whole_layout) return t;
  // The file holds the whole model: each range is read from where this rank's slices lie in it.
  const TensorSplit split = tensor_split();
  LoadTargets in_whole;
  for (std::size_t i = 0; i < t.param_ranges.size(); ++i)
    runs_in_whole(whole_tensors_, *slice_layout_, split, t.param_ranges[i].offset, t.param_ranges[i].count,
                  true, [&](std::size_t at, std::size_t off, std::size_t n) {
                    in_whole.param_ranges.push_back({at, n});
                    in_whole.params.push_back(t.params[i] + off);
                  });
  for (std::size_t i = 0; i < t.optimizer_ranges.size(); ++i)
    runs_in_whole(whole_tensors_, *slice_layout_, split, t.optimizer_ranges[i].offset,
                  t.optimizer_ranges[i].count, true, [&](std::size_t at, std::size_t off, std::size_t n) {
                    in_whole.optimizer_ranges.push_back({at, n});
                    in_whole.m.push_back(t.m[i] + off);
                    in_whole.v.push_back(t.v[i] + off);
                  });
  sort_ranges(in_whole.param_ranges, {&in_whole.params});
  sort_ranges(in_whole.optimizer_ranges, {&in_whole.m, &in_whole.v});
  return in_whole;
}

template <class T>
float* ShardedStrategy<T>::load_target(float* destination, std::size_t count) {
  if (exec_.space() == MemorySpace::host) return destination;
  load_uploads_.push_back({destination, std::vector<float>(count)});
  return load_uploads_.back().values.data();
}

template <class T>
void ShardedStrategy<T>::finish_load() {
  for (const PendingUpload& u : load_uploads_)
    exec_.upload(u.destination, u.values.data(), u.values.size() * sizeof(float));
  load_uploads_ = {};
  if (!load_staging_.empty()) {
    place_params(load_staging_);  // the whole model was staged
  } else if (kMixed && parallel_plan_.params_sharded()) {  // the master slices were read: their bf16 copies follow
    for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
      const std::span<float> master = master_slice(s);
      exec_.convert(view(shard_params_.data() + shards_.segment(s).shard_offset, master.size()), Buffer::of(master));
    }
  }
  load_staging_ = {};
  drop_prefetched();
}

template <class T>
MemoryReport ShardedStrategy<T>::memory() const {
  MemoryReport r;
  r.params = (full_params_.size() + shard_params_.size()) * sizeof(T);
  r.grads = (full_grads_.size() + grad_shard_.size()) * sizeof(T);
  r.optimizer = (master_.size() + adam_m_.size() + adam_v_.size()) * sizeof(float);
  // Forward passes only: the fp32 master copy is where the parameters were read into, not state
  // an optimizer keeps.
  if (settings_.parameters_only) r.params += std::exchange(r.optimizer, 0);
  r.workspace = pool_.bytes() + float_pool_.bytes() + grad_sum_.size_bytes();
  return r;
}

template class ShardedStrategy<float>;
template class ShardedStrategy<Bf16>;

}  // namespace st
