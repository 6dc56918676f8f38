#pragma once
// The parallel plan: one value, computed once from the deck's parallel settings, the model's
// layout and the world, that says how the ranks are arranged and what each of them holds and
// sends. ShardedStrategy allocates and communicates by it, `shardtrain check` and the planner
// print and time it, and the checkpoint writer asks it which rank writes what; none of them
// decides on its own what a ZeRO stage shards or how large an hsdp group is.
//
//   mesh        data-parallel replicas x shard group x tensor degree;
//   buffers     parameters, gradients, optimizer state: full or sharded over the shard group,
//               and their size on the rank with the largest shard (segment by segment through
//               shards(), the one padding rule);
//   buckets     ddp's gradient all-reduces: consecutive segments in the order backward
//               finishes them, each closed once it holds bucket_mb;
//   collectives what one step sends per rank, by kind and level (within the shard group,
//               across the replicas, within the tensor group), with the number of calls.
// Under tensor parallelism the layout is one rank's slice of the model (make_layout with a
// split) and the shard group and replicas are among the data-parallel ranks holding the same
// slice.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/choices.hpp"
#include "model/layout.hpp"
#include "parallel/shard_layout.hpp"

namespace st {

struct Mesh {
  int replicas = 1;  // groups holding the same shards (hsdp's replicas; 1 otherwise)
  int shards = 1;    // ranks a shard group splits the model over (ddp: the world, holding it whole)
  int tensor = 1;    // ranks splitting each layer (parallel.tensor), consecutive in the world
  int world() const { return replicas * shards * tensor; }
};

// The mesh a strategy forms on world_size ranks: hsdp shards within groups of `shard_group`
// ranks (parallel.shard_group, or the node's node_size ranks when it is 0) and replicates across
// them; every other strategy is one group of the whole world. Throws Error (all ranks) naming
// the key when hsdp's group does not divide the world. The only place hsdp's group size is
// computed.
Mesh make_mesh(StrategyKind strategy, std::int64_t shard_group, int world_size, int node_size,
               const std::string& deck_path);

enum class Extent { full, sharded };

// One buffer kind on the rank with the largest shard (rank 0 of its group).
struct BufferPlan {
  Extent extent = Extent::full;
  std::uint64_t elements = 0;  // of the buffer as allocated (padded where it is gathered/reduced in place)
  std::uint64_t bytes = 0;
};

// Within the shard group, across the groups, within the tensor group.
enum class Level { group, replicas, tensor };

// What a collective is for: the gradients' reduction, the parameters' gather, the gradient norm,
// and under tensor parallelism the activations the layers' slices exchange.
enum class Purpose { gradients, parameters, norm, activations };

// What a tensor group's layers exchange per micro-batch (Megatron's scheme without sequence
// parallelism): `rows` tokens of `d_model` fp32 activations, summed once after the embedding,
// after each block's two row-parallel projections, and in backward before the replicated layer
// beneath each split one (the LM head's and each block's two column-parallel projections'
// input gradients); `recompute_full` reruns each block's forward up to its MLP in backward (the
// attention's sum again, and with rows split both gathers). The
// cross-entropy gathers three numbers per token from each slice.
// With sequence parallelism (model/model.hpp TensorGroup) each of those sums is a
// reduce-scatter, and each split layer's input an all-gather: in forward before each block's two
// column-parallel projections and the LM head, in backward again (the inputs are not kept whole)
// with the gathered rows of each block's two row-parallel projections' output gradients and the
// embedding's; each segment's norms' gradients are summed (one call per segment holding norms).
// A pipeline stage exchanges its part's: n_layer is its blocks, and the embedding's and the
// head's exchanges (the cross-entropy's too) happen only where it `embeds` or `heads`.
struct ActivationTraffic {
  std::int64_t rows = 0, d_model = 0, n_layer = 0;
  bool recompute_full = false;
  bool sequence_parallel = false;
  bool embeds = true, heads = true;
  int value_bytes = 4;  // an activation's: 2 where the model stores bf16 (parallel.activations)
};

struct CollectivePlan {
  Collective kind = Collective::all_reduce;
  Level level = Level::group;
  Purpose purpose = Purpose::gradients;
  std::int64_t calls = 0;    // per step
  std::uint64_t bytes = 0;   // sent per rank per step, as the ring formula counts them (TrafficCounters)
};

struct GradientBucket {
  std::size_t begin = 0, end = 0;  // range of the padded gradient buffer
  int segments = 0;
};

// Bytes one step sends within two levels of links: inside a node and across nodes.
struct LevelBytes {
  std::uint64_t node = 0, network = 0;
};

class ParallelPlan {
 public:
  // micro_batches: per step (zero3 gathers every segment for each forward and backward);
  // bucket_mb: parallel.bucket_mb (ddp's buckets; 0: one bucket).
  // activations: what a tensor group exchanges (needed when mesh.tensor > 1).
  // reduction: parallel.grad_reduction, resolved (not automatic).
  ParallelPlan(const ParamLayout& layout, StrategyKind strategy, Precision precision, Mesh mesh,
               std::int64_t micro_batches, double bucket_mb, ActivationTraffic activations = {},
               GradReduction reduction = GradReduction::step);

  StrategyKind strategy() const { return strategy_; }
  Precision precision() const { return precision_; }
  const Mesh& mesh() const { return mesh_; }
  std::int64_t micro_batches() const { return micro_batches_; }
  bool mixed() const { return precision_ == Precision::bf16; }
  // The model stores bf16 activations and reads the strategy's bf16 parameters as they are
  // (ShardingSettings::bf16_params): no fp32 copies of segments in use, fp32 gradients held
  // across micro-batches.
  bool stores_bf16() const { return mixed() && activations_.value_bytes == 2; }
  std::size_t element_bytes() const { return mixed() ? 2 : 4; }  // a parameter or gradient

  // What is sharded over the shard group (ddp: nothing; zero1: the optimizer state; zero2: and
  // the gradients; zero3, fsdp, hsdp: and the parameters).
  bool optimizer_sharded() const { return optimizer_.extent == Extent::sharded; }
  bool grads_sharded() const { return grads_.extent == Extent::sharded; }
  bool params_sharded() const { return params_.extent == Extent::sharded; }
  // Gradients reduce-scattered segment by segment into a full buffer (zero1): sharded optimizer
  // state, full gradients.
  bool reduce_scatters_in_place() const { return optimizer_sharded() && !grads_sharded(); }
  // Sharded gradients reduce-scattered after every micro-batch and added into the gradient shard
  // (parallel.grad_reduction = "every_micro_batch" with several micro-batches a step): no
  // whole-model gradient buffer, the reduce-scatters' bytes once per micro-batch.
  bool reduces_each_micro_batch() const {
    return grads_sharded() && micro_batches_ > 1 && reduction_ == GradReduction::micro_batch;
  }
  GradReduction grad_reduction() const { return reduction_; }
  // Sharding within groups and replicating across them, on communicators of their own (hsdp,
  // even with a single group), rather than over the whole world.
  bool grouped() const { return strategy_ == StrategyKind::hsdp; }
  // The short description of what the strategy shards (check, the run log).
  std::string sharded_what() const;

  const ShardLayout& shards() const { return shards_; }  // over the shard group
  const BufferPlan& params() const { return params_; }
  const BufferPlan& grads() const { return grads_; }
  const BufferPlan& optimizer() const { return optimizer_; }  // elements per state array (master, m, v)
  // The ZeRO table: model state of the rank with the largest shard.
  struct ModelState {
    std::uint64_t params = 0, grads = 0, optimizer = 0;
    std::uint64_t total() const { return params + grads + optimizer; }
  };
  const ModelState& model_state() const { return model_state_; }

  // What member `part` of a shard group updates of segment s (its owned elements; the whole
  // segment where the optimizer state is not sharded), where they start in the flat layout and
  // in the optimizer's arrays.
  std::size_t owned(std::size_t s, int part) const;
  std::size_t owned_flat(std::size_t s, int part) const;
  std::size_t optimizer_offset(std::size_t s) const;

  // ddp's gradient all-reduces (empty for the sharding stages), and the bucket of each segment.
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  const std::vector<std::size_t>& bucket_of() const { return bucket_of_; }

  const std::vector<CollectivePlan>& collectives() const { return collectives_; }
  // Sent per rank per step for the gradients and parameters: within the shard group, across the
  // replicas (the norm's few bytes left out, as the traffic formulas leave them out).
  std::uint64_t group_bytes() const;
  std::uint64_t replica_bytes() const;
  std::int64_t group_calls() const;  // collective calls per step within the group (the norm's left out)
  // Bytes per kind of the data-parallel collectives (within the group and across replicas),
  // summed over purposes, as the strategy's communicators count a step.
  std::uint64_t bytes_of(Collective kind) const;
  // Within the tensor group per step: bytes of one kind, all of them, and the calls.
  std::uint64_t tensor_bytes_of(Collective kind) const;
  std::uint64_t tensor_bytes() const;
  std::int64_t tensor_calls() const;
  // Without replicas, over nodes of node_size ranks with two-level collectives: inside the node
  // on all the data, across nodes on 1/node_size of it.
  LevelBytes two_level_bytes(const ParamLayout& layout, int node_size) const;

  // Checkpoints: the range of the flat layout whose state a rank writes (its own elements of it);
  // disjoint across ranks, covering the model. Replicas hold the same state: only the first
  // replica of each shard writes. ddp: every rank holds everything, each writes a 1/N stripe.
  struct WrittenPiece {
    std::size_t segment = 0;
    std::size_t begin = 0, end = 0;  // flat layout
  };
  std::vector<WrittenPiece> checkpoint_pieces(int group_rank, int replica_rank) const;

 private:
  // The calls and bytes of the collectives `keep` accepts, summed.
  template <class Keep>
  CollectivePlan sum_of(Keep keep) const;

  StrategyKind strategy_;
  Precision precision_;
  Mesh mesh_;
  std::int64_t micro_batches_;
  double bucket_mb_;
  ActivationTraffic activations_;
  GradReduction reduction_;
  ShardLayout shards_;
  BufferPlan params_, grads_, optimizer_;
  ModelState model_state_;
  std::vector<GradientBucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<CollectivePlan> collectives_;
};

}  // namespace st
