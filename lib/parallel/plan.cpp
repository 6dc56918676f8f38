#include "parallel/plan.hpp"

#include <algorithm>

#include "comm/shard.hpp"
#include "core/error.hpp"

namespace st {

Mesh make_mesh(StrategyKind strategy, std::int64_t shard_group, int world_size, int node_size,
               const std::string& deck_path) {
  ST_REQUIRE(world_size >= 1, "a world has at least one rank");
  Mesh mesh;
  if (strategy != StrategyKind::hsdp) {
    mesh.shards = world_size;
    return mesh;
  }
  const int group = shard_group > 0 ? static_cast<int>(shard_group) : node_size;
  if (group <= 0 || world_size % group != 0)
    throw Error(deck_path + ": hsdp's sharding group of " + std::to_string(group) + " ranks (" +
                    (shard_group > 0 ? "parallel.shard_group = " + std::to_string(group)
                                     : std::string("parallel.shard_group = 0: the ranks of a node")) +
                    ") does not divide the world of " + std::to_string(world_size) +
                    " ranks; hsdp needs groups of equal size: set parallel.shard_group to a divisor of " +
                    std::to_string(world_size),
                ErrorScope::all_ranks);
  mesh.shards = group;
  mesh.replicas = world_size / group;
  return mesh;
}

ParallelPlan::ParallelPlan(const ParamLayout& layout, StrategyKind strategy, Precision precision, Mesh mesh,
                           std::int64_t micro_batches, double bucket_mb, ActivationTraffic activations,
                           GradReduction reduction)
    : strategy_(strategy),
      precision_(precision),
      mesh_(mesh),
      micro_batches_(micro_batches),
      bucket_mb_(bucket_mb),
      activations_(activations),
      reduction_(reduction),
      shards_(layout, mesh.shards) {
  const int stage = zero_stage(strategy);
  ST_REQUIRE(stage >= 0, "parallel.strategy = \"auto\" must be resolved before the parallel plan is made");
  ST_REQUIRE(mesh.tensor == 1 || activations.rows > 0, "a tensor-parallel plan needs the activations' sizes");
  ST_REQUIRE(strategy == StrategyKind::hsdp || mesh.replicas == 1, "only hsdp replicates across shard groups");
  ST_REQUIRE(reduction != GradReduction::automatic,
             "parallel.grad_reduction = \"auto\" must be resolved before the parallel plan is made");
  // The stage rule, the only copy: what each ZeRO stage shards over the shard group.
  const auto extent = [&](int from_stage) { return stage >= from_stage ? Extent::sharded : Extent::full; };
  const std::uint64_t t = element_bytes();
  params_.extent = extent(3);
  params_.elements = params_sharded() ? shards_.shard_total() : shards_.padded_total();
  params_.bytes = params_.elements * t;
  grads_.extent = extent(2);
  grads_.elements = grads_sharded() ? shards_.shard_total() : shards_.padded_total();
  grads_.bytes = grads_.elements * t;
  optimizer_.extent = extent(1);
  optimizer_.elements = optimizer_sharded() ? shards_.shard_total() : shards_.flat_total();
  // (master,) m, v in fp32
  optimizer_.bytes = optimizer_.elements * 4 * (mixed() ? 3 : 2);
  model_state_ = {params_.bytes, grads_.bytes, optimizer_.bytes};

  const std::size_t segments = shards_.segments().size();
  const int n = mesh.shards;
  // ddp's buckets: consecutive segments in the order backward finishes them, each a contiguous
  // range of the padded gradient buffer, until a bucket holds bucket_mb.
  if (!optimizer_sharded()) {
    const auto bucket_bytes = static_cast<std::size_t>(bucket_mb * 1024 * 1024);
    const std::size_t bucket_elements =
        bucket_bytes == 0 ? shards_.padded_total() : std::max<std::size_t>(1, bucket_bytes / t);
    bucket_of_.assign(segments, 0);
    for (std::size_t s = segments; s-- > 0;) {
      const SegmentShard& seg = shards_.segment(s);
      if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= bucket_elements)
        buckets_.push_back({seg.padded_offset, seg.padded_offset + shards_.padded(s), 0});
      buckets_.back().begin = seg.padded_offset;
      ++buckets_.back().segments;
      bucket_of_[s] = buckets_.size() - 1;
    }
  }

  // The collectives of one step, as the strategy issues them (on a group of one rank the
  // sharding stages still call theirs, sending nothing; ddp skips its all-reduces).
  const auto add = [&](Collective kind, Purpose purpose, std::int64_t calls, std::uint64_t bytes) {
    collectives_.push_back({kind, Level::group, purpose, calls, bytes});
  };
  if (!optimizer_sharded()) {
    if (n > 1) {
      // ddp: one all-reduce per bucket during backward.
      std::uint64_t sent = 0;
      for (const GradientBucket& b : buckets_) sent += 2 * ring_share((b.end - b.begin) * t, n);
      add(Collective::all_reduce, Purpose::gradients, static_cast<std::int64_t>(buckets_.size()), sent);
    }
  } else {
    std::uint64_t segment_share = 0;  // one ring pass over every padded segment
    for (std::size_t s = 0; s < segments; ++s) segment_share += ring_share(shards_.padded(s) * t, n);
    const auto count = static_cast<std::int64_t>(segments);
    // zero1/zero2/zero3: each segment's gradients reduce-scattered once, or once per micro-batch.
    const std::int64_t reductions = reduces_each_micro_batch() ? micro_batches : 1;
    add(Collective::reduce_scatter, Purpose::gradients, reductions * count,
        static_cast<std::uint64_t>(reductions) * segment_share);
    // zero1/zero2 gather the updated parameters once; zero3 gathers each segment before every
    // micro-batch's forward and backward.
    const std::int64_t gathers = params_sharded() ? 2 * micro_batches : 1;
    add(Collective::all_gather, Purpose::parameters, gathers * count,
        static_cast<std::uint64_t>(gathers) * segment_share);
    // The gradient norm's sum over the shards.
    if (n > 1) add(Collective::all_reduce, Purpose::norm, 1, 2 * ring_share(sizeof(double), n));
  }
  if (strategy == StrategyKind::hsdp && mesh.replicas > 1)
    collectives_.push_back({Collective::all_reduce, Level::replicas, Purpose::gradients, 1,
                            2 * ring_share(shards_.shard_total() * t, mesh.replicas)});

  if (mesh.tensor > 1) {
    // Per micro-batch, as the model issues them (model/gpt2.cpp, model/llama.cpp): the
    // embedding's sum, two per block forward (and again in a full recomputation), two per block
    // backward and the LM head's input gradient, in the model's storage (fp32 or bf16); the
    // cross-entropy's gather of 3 fp32 per token; the norms' gradients (fp32) of split rows.
    const ActivationTraffic& a = activations;
    const auto T = mesh.tensor;
    const std::uint64_t tokens = static_cast<std::uint64_t>(a.rows) * static_cast<std::uint64_t>(a.d_model) *
                                 static_cast<std::uint64_t>(a.value_bytes);
    // A full recomputation reruns a block's forward up to its MLP: the attention's sum again.
    const std::int64_t per_block = a.recompute_full ? 5 : 4;
    const std::int64_t embeds = a.embeds ? 1 : 0, heads = a.heads ? 1 : 0;
    const std::int64_t sums = micro_batches * (embeds + heads + per_block * a.n_layer);
    if (!a.sequence_parallel) {
      collectives_.push_back({Collective::all_reduce, Level::tensor, Purpose::activations, sums,
                              static_cast<std::uint64_t>(sums) * 2 * ring_share(tokens, T)});
    } else {
      // The same sums as reduce-scatters; the gathers: 2 per block forward (again in a full
      // recomputation) and 4 in backward, the LM head's input twice and the embedding's gradient.
      const std::int64_t gathers = micro_batches * (embeds + 2 * heads + (a.recompute_full ? 8 : 6) * a.n_layer);
      collectives_.push_back({Collective::reduce_scatter, Level::tensor, Purpose::activations, sums,
                              static_cast<std::uint64_t>(sums) * ring_share(tokens, T)});
      collectives_.push_back({Collective::all_gather, Level::tensor, Purpose::activations, gathers,
                              static_cast<std::uint64_t>(gathers) * ring_share(tokens, T)});
      // Each segment's norms' gradients (computed from the rank's rows) in one sum per micro-batch.
      std::int64_t calls = 0;
      std::uint64_t bytes = 0;
      for (const Segment& segment : layout.segments()) {
        std::uint64_t norms = 0;
        for (const TensorSlot& tensor_slot : segment.tensors)
          if (tensor_slot.role == TensorRole::norm) norms += tensor_slot.size * 4;
        if (norms == 0) continue;
        ++calls;
        bytes += 2 * ring_share(norms, T);
      }
      collectives_.push_back({Collective::all_reduce, Level::tensor, Purpose::activations, micro_batches * calls,
                              static_cast<std::uint64_t>(micro_batches) * bytes});
    }
    if (a.heads) {
      const std::uint64_t gathered = static_cast<std::uint64_t>(a.rows) * 3 * 4 * static_cast<std::uint64_t>(T);
      collectives_.push_back({Collective::all_gather, Level::tensor, Purpose::activations, micro_batches,
                              static_cast<std::uint64_t>(micro_batches) * ring_share(gathered, T)});
    }
    // The gradient norm's sum over the tensor group.
    collectives_.push_back({Collective::all_reduce, Level::tensor, Purpose::norm, 1, 2 * ring_share(sizeof(double), T)});
  }
}

std::string ParallelPlan::sharded_what() const {
  if (params_sharded()) return "parameters, gradients and optimizer state sharded";
  if (grads_sharded()) return "optimizer state and gradients sharded";
  if (optimizer_sharded()) return "optimizer state sharded";
  return "nothing sharded: full replicas, gradient buckets all-reduced during backward";
}

std::size_t ParallelPlan::owned(std::size_t s, int part) const {
  return optimizer_sharded() ? shards_.owned_count(s, part) : shards_.segment(s).size;
}

std::size_t ParallelPlan::owned_flat(std::size_t s, int part) const {
  return optimizer_sharded() ? shards_.owned_flat_offset(s, part) : shards_.segment(s).offset;
}

std::size_t ParallelPlan::optimizer_offset(std::size_t s) const {
  return optimizer_sharded() ? shards_.segment(s).shard_offset : shards_.segment(s).offset;
}

template <class Keep>
CollectivePlan ParallelPlan::sum_of(Keep keep) const {
  CollectivePlan sum;
  for (const CollectivePlan& c : collectives_)
    if (keep(c)) {
      sum.calls += c.calls;
      sum.bytes += c.bytes;
    }
  return sum;
}

namespace {
// Within the group or the tensor group, the gradient norm's few bytes left out (as the traffic
// formulas leave them out).
bool carries_data(const CollectivePlan& c, Level level) { return c.level == level && c.purpose != Purpose::norm; }
}  // namespace

std::uint64_t ParallelPlan::group_bytes() const {
  return sum_of([](const CollectivePlan& c) { return carries_data(c, Level::group); }).bytes;
}

std::uint64_t ParallelPlan::replica_bytes() const {
  return sum_of([](const CollectivePlan& c) { return c.level == Level::replicas; }).bytes;
}

std::int64_t ParallelPlan::group_calls() const {
  return sum_of([](const CollectivePlan& c) { return carries_data(c, Level::group); }).calls;
}

std::uint64_t ParallelPlan::bytes_of(Collective kind) const {
  return sum_of([kind](const CollectivePlan& c) { return c.kind == kind && c.level != Level::tensor; }).bytes;
}

std::uint64_t ParallelPlan::tensor_bytes_of(Collective kind) const {
  return sum_of([kind](const CollectivePlan& c) { return c.kind == kind && c.level == Level::tensor; }).bytes;
}

std::uint64_t ParallelPlan::tensor_bytes() const {
  return sum_of([](const CollectivePlan& c) { return carries_data(c, Level::tensor); }).bytes;
}

std::int64_t ParallelPlan::tensor_calls() const {
  return sum_of([](const CollectivePlan& c) { return carries_data(c, Level::tensor); }).calls;
}

LevelBytes ParallelPlan::two_level_bytes(const ParamLayout& layout, int node_size) const {
  ST_REQUIRE(mesh_.replicas == 1 && node_size >= 1 && mesh_.shards % node_size == 0,
             "two-level traffic is planned for one group of whole nodes");
  const int nodes = mesh_.shards / node_size;
  LevelBytes bytes;
  if (node_size > 1)
    bytes.node = ParallelPlan(layout, strategy_, precision_, Mesh{1, node_size, 1}, micro_batches_, bucket_mb_, {}, reduction_)
                     .group_bytes();
  bytes.network = ParallelPlan(layout, strategy_, precision_, Mesh{1, nodes, 1}, micro_batches_, bucket_mb_, {}, reduction_)
                      .group_bytes() /
                  static_cast<std::uint64_t>(node_size);
  return bytes;
}

std::vector<ParallelPlan::WrittenPiece> ParallelPlan::checkpoint_pieces(int group_rank, int replica_rank) const {
  // Replicas hold the same state: the first replica of each shard writes it.
  if (replica_rank != 0) return {};
  std::size_t lo = 0, hi = shards_.flat_total();
  if (!optimizer_sharded()) {
    // ddp: every rank holds everything; each writes a 1/N stripe so all ranks share the I/O.
    const ShardRange stripe = shard_range(shards_.flat_total(), mesh_.shards, group_rank);
    lo = std::min(stripe.begin, hi);
    hi = std::min(stripe.begin + stripe.real(), hi);
  }
  std::vector<WrittenPiece> pieces;
  for (std::size_t s = 0; s < shards_.segments().size(); ++s) {
    const std::size_t first = owned_flat(s, group_rank), count = owned(s, group_rank);
    const std::size_t begin = std::max(lo, first), end = std::min(hi, first + count);
    if (begin < end) pieces.push_back({s, begin, end});
  }
  return pieces;
}

}  // namespace st
