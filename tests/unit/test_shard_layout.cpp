// The shard layout and the parallel plan: pure arithmetic, no MPI.
#include <gtest/gtest.h>

#include "model/layout.hpp"
#include "parallel/plan.hpp"
#include "parallel/shard_layout.hpp"
#include "core/error.hpp"

namespace st {
namespace {

// The plan of `strategy` on `world` ranks sharding in groups of `group` (replicated across them).
ParallelPlan plan_of(const ParamLayout& layout, StrategyKind strategy, Precision precision, int world, int group,
                     std::int64_t micro_batches, double bucket_mb = 0) {
  return ParallelPlan(layout, strategy, precision, Mesh{world / group, group, 1}, micro_batches, bucket_mb);
}

ParamLayout small_layout() {
  // Sizes chosen so that no segment divides evenly by 3 or 4.
  return make_layout(ModelShape{2, 12, 3, 7, 11, 13});
}

TEST(ShardLayout, PartsCoverEverySegmentOnceWithPadding) {
  const ParamLayout layout = small_layout();
  for (int parts : {1, 2, 3, 4, 7}) {
    const ShardLayout shards(layout, parts);
    std::size_t padded = 0, shard = 0;
    for (std::size_t s = 0; s < layout.segments().size(); ++s) {
      const SegmentShard& seg = shards.segment(s);
      EXPECT_EQ(seg.offset, layout.segments()[s].offset);
      EXPECT_EQ(seg.padded_offset, padded);
      EXPECT_EQ(seg.shard_offset, shard);
      EXPECT_GE(shards.padded(s), seg.size);
      EXPECT_LT(shards.padded(s) - seg.size, static_cast<std::size_t>(parts));  // less than one element per part
      std::size_t covered = 0, next = seg.offset;
      for (int p = 0; p < parts; ++p) {
        if (shards.owned_count(s, p) == 0) continue;
        EXPECT_EQ(shards.owned_flat_offset(s, p), next) << "parts own consecutive, disjoint ranges";
        EXPECT_EQ(shards.owned_padded_offset(s, p) - seg.padded_offset, shards.owned_flat_offset(s, p) - seg.offset);
        next += shards.owned_count(s, p);
        covered += shards.owned_count(s, p);
      }
      EXPECT_EQ(covered, seg.size) << "segment " << s << ", " << parts << " parts";
      padded += shards.padded(s);
      shard += seg.chunk;
    }
    EXPECT_EQ(shards.padded_total(), padded);
    EXPECT_EQ(shards.shard_total(), shard);
    EXPECT_EQ(shards.flat_total(), layout.total());
  }
}

TEST(ParallelPlan, ModelStateFollowsTheZeroTable) {
  const ParamLayout layout = make_layout(ModelShape{4, 64, 4, 32, 256, 256});
  const double psi = static_cast<double>(layout.total());
  auto state = [&](StrategyKind strategy, Precision precision, int n) {
    return static_cast<double>(plan_of(layout, strategy, precision, n, n, 1).model_state().total());
  };
  for (int n : {1, 2, 4}) {
    // fp32: t = 4 bytes per parameter or gradient, K = 8; bf16: t = 2, K = 12.
    EXPECT_NEAR(state(StrategyKind::ddp, Precision::fp32, n), 16 * psi, 0.01 * psi);
    EXPECT_NEAR(state(StrategyKind::zero1, Precision::fp32, n), 8 * psi + 8 * psi / n, 0.01 * psi);
    EXPECT_NEAR(state(StrategyKind::zero2, Precision::fp32, n), 4 * psi + 12 * psi / n, 0.01 * psi);
    EXPECT_NEAR(state(StrategyKind::zero3, Precision::fp32, n), 16 * psi / n, 0.01 * psi);
    EXPECT_NEAR(state(StrategyKind::zero1, Precision::bf16, n), 4 * psi + 12 * psi / n, 0.01 * psi);
    EXPECT_NEAR(state(StrategyKind::zero3, Precision::bf16, n), 16 * psi / n, 0.01 * psi);
  }
}

TEST(ParallelPlan, TrafficFollowsTheFormulas) {
  const ParamLayout layout = make_layout(ModelShape{4, 64, 4, 32, 256, 256});
  const double psi4 = 4.0 * static_cast<double>(layout.total());
  const int n = 4;
  EXPECT_NEAR(plan_of(layout, StrategyKind::ddp, Precision::fp32, n, n, 1).group_bytes(), 2 * psi4 * 3 / 4, 0.01 * psi4);
  EXPECT_NEAR(plan_of(layout, StrategyKind::zero2, Precision::fp32, n, n, 1).group_bytes(), 2 * psi4 * 3 / 4, 0.01 * psi4);
  EXPECT_NEAR(plan_of(layout, StrategyKind::zero3, Precision::fp32, n, n, 1).group_bytes(), 3 * psi4 * 3 / 4, 0.01 * psi4);
  // zero3 with 2 micro-batches gathers twice per micro-batch, reduces once: 5 Psi (N-1)/N.
  EXPECT_NEAR(plan_of(layout, StrategyKind::zero3, Precision::fp32, n, n, 2).group_bytes(), 5 * psi4 * 3 / 4, 0.01 * psi4);
  // hsdp in groups of 2 on 4 ranks: zero3 within the group, one all-reduce of the shard across.
  const ParallelPlan hsdp = plan_of(layout, StrategyKind::hsdp, Precision::fp32, 4, 2, 1);
  EXPECT_NEAR(hsdp.group_bytes(), 3 * psi4 / 2, 0.01 * psi4);
  EXPECT_NEAR(hsdp.replica_bytes(), 2 * (psi4 / 2) / 2, 0.01 * psi4);
  EXPECT_EQ(plan_of(layout, StrategyKind::zero3, Precision::fp32, 1, 1, 1).group_bytes(), 0u);
}


// Padded elements of a segment of `size` split into `n` parts: ceil(size / n) x n.
std::size_t padded_size(std::size_t size, int n) {
  const auto parts = static_cast<std::size_t>(n);
  return (size + parts - 1) / parts * parts;
}

TEST(ParallelPlan, BuffersPerRankFollowTheZeroTableExactly) {
  const ParamLayout layout = small_layout();
  for (int n : {1, 2, 3, 4}) {
    std::size_t padded = 0, shard = 0;
    for (const Segment& seg : layout.segments()) {
      padded += padded_size(seg.size, n);
      shard += padded_size(seg.size, n) / static_cast<std::size_t>(n);
    }
    const std::uint64_t psi = layout.total();
    for (const Precision precision : {Precision::fp32, Precision::bf16}) {
      const std::uint64_t t = precision == Precision::bf16 ? 2 : 4, K = precision == Precision::bf16 ? 12 : 8;
      struct Row {
        StrategyKind strategy;
        Extent params, grads, optimizer;
        std::uint64_t param_elements, grad_elements, optimizer_elements;
      };
      const std::vector<Row> rows = {
          {StrategyKind::ddp, Extent::full, Extent::full, Extent::full, padded, padded, psi},
          {StrategyKind::zero1, Extent::full, Extent::full, Extent::sharded, padded, padded, shard},
          {StrategyKind::zero2, Extent::full, Extent::sharded, Extent::sharded, padded, shard, shard},
          {StrategyKind::zero3, Extent::sharded, Extent::sharded, Extent::sharded, shard, shard, shard},
          {StrategyKind::fsdp, Extent::sharded, Extent::sharded, Extent::sharded, shard, shard, shard},
      };
      for (const Row& r : rows) {
        const ParallelPlan plan = plan_of(layout, r.strategy, precision, n, n, 1);
        EXPECT_EQ(plan.params().extent, r.params) << r.strategy;
        EXPECT_EQ(plan.grads().extent, r.grads) << r.strategy;
        EXPECT_EQ(plan.optimizer().extent, r.optimizer) << r.strategy;
        EXPECT_EQ(plan.params().elements, r.param_elements) << r.strategy << " on " << n;
        EXPECT_EQ(plan.grads().elements, r.grad_elements) << r.strategy << " on " << n;
        EXPECT_EQ(plan.optimizer().elements, r.optimizer_elements) << r.strategy << " on " << n;
        EXPECT_EQ(plan.model_state().params, r.param_elements * t);
        EXPECT_EQ(plan.model_state().grads, r.grad_elements * t);
        EXPECT_EQ(plan.model_state().optimizer, r.optimizer_elements * K);
      }
    }
  }
}

TEST(ParallelPlan, HsdpShardsWithinItsGroupAndReplicatesAcross) {
  const ParamLayout layout = small_layout();
  const ParallelPlan hsdp = plan_of(layout, StrategyKind::hsdp, Precision::fp32, 6, 3, 1);
  const ParallelPlan zero3 = plan_of(layout, StrategyKind::zero3, Precision::fp32, 3, 3, 1);
  EXPECT_EQ(hsdp.mesh().replicas, 2);
  EXPECT_EQ(hsdp.mesh().shards, 3);
  EXPECT_EQ(hsdp.mesh().world(), 6);
  EXPECT_EQ(hsdp.model_state().total(), zero3.model_state().total());  // memory as zero3 over the group
  EXPECT_EQ(hsdp.group_bytes(), zero3.group_bytes());
  // One all-reduce of the gradient shard across the two replicas: 2 x shard x (2-1)/2.
  EXPECT_EQ(hsdp.replica_bytes(), 2 * ring_share(hsdp.shards().shard_total() * 4, 2));
}

TEST(ParallelPlan, GroupSizesComeFromTheDeckOrTheNode) {
  EXPECT_EQ(make_mesh(StrategyKind::ddp, 0, 8, 4, "d.toml").shards, 8);
  EXPECT_EQ(make_mesh(StrategyKind::zero3, 2, 8, 4, "d.toml").shards, 8);  // shard_group is hsdp's alone
  const Mesh node = make_mesh(StrategyKind::hsdp, 0, 8, 4, "d.toml");
  EXPECT_EQ(node.shards, 4);
  EXPECT_EQ(node.replicas, 2);
  EXPECT_EQ(node.tensor, 1);
  const Mesh set = make_mesh(StrategyKind::hsdp, 2, 8, 4, "d.toml");
  EXPECT_EQ(set.shards, 2);
  EXPECT_EQ(set.replicas, 4);
  try {
    make_mesh(StrategyKind::hsdp, 3, 8, 4, "d.toml");
    ADD_FAILURE() << "a group of 3 does not divide 8 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d.toml: hsdp's sharding group of 3 ranks (parallel.shard_group = 3)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_mesh(StrategyKind::hsdp, 0, 6, 4, "d.toml"), Error);  // nodes of 4 in 6 ranks
}

TEST(ParallelPlan, DdpBucketsCloseOnceTheyHoldBucketMb) {
  const ParamLayout layout = small_layout();
  const int n = 3;
  const std::size_t segments = layout.segments().size();
  // bucket_mb = 0: one bucket for the whole backward.
  const ParallelPlan one = plan_of(layout, StrategyKind::ddp, Precision::fp32, n, n, 1, 0);
  ASSERT_EQ(one.buckets().size(), 1u);
  EXPECT_EQ(one.buckets()[0].segments, static_cast<int>(segments));
  EXPECT_EQ(one.buckets()[0].end - one.buckets()[0].begin, one.shards().padded_total());
  // A bucket of one byte closes after every segment.
  const ParallelPlan each = plan_of(layout, StrategyKind::ddp, Precision::fp32, n, n, 1, 1.0 / (1024 * 1024));
  EXPECT_EQ(each.buckets().size(), segments);
  // In between: consecutive segments from the last, closed once a bucket holds the threshold.
  const double mb = 0.001;
  const std::size_t threshold = static_cast<std::size_t>(mb * 1024 * 1024) / 4;
  std::size_t expected = 0, filled = 0;
  for (std::size_t s = segments; s-- > 0;) {
    if (expected == 0 || filled >= threshold) ++expected, filled = 0;
    filled += padded_size(layout.segments()[s].size, n);
  }
  const ParallelPlan some = plan_of(layout, StrategyKind::ddp, Precision::fp32, n, n, 1, mb);
  EXPECT_EQ(some.buckets().size(), expected);
  EXPECT_GT(expected, 1u);
  EXPECT_LT(expected, segments);
  // The all-reduces: one per bucket, 2 x (N-1)/N of each bucket's bytes.
  std::uint64_t bytes = 0;
  for (const GradientBucket& b : some.buckets()) bytes += 2 * ring_share((b.end - b.begin) * 4, n);
  EXPECT_EQ(some.bytes_of(Collective::all_reduce), bytes);
  EXPECT_EQ(some.group_calls(), static_cast<std::int64_t>(expected));
  // Sharding stages have no buckets.
  EXPECT_TRUE(plan_of(layout, StrategyKind::zero1, Precision::fp32, n, n, 1, mb).buckets().empty());
}

TEST(ParallelPlan, CollectivesPerStepByKind) {
  const ParamLayout layout = small_layout();
  const int n = 4;
  const auto segments = static_cast<std::int64_t>(layout.segments().size());
  std::uint64_t pass = 0;  // one ring pass over every padded segment, bf16
  for (const Segment& seg : layout.segments()) pass += ring_share(padded_size(seg.size, n) * 2, n);
  const std::uint64_t norm = 2 * ring_share(sizeof(double), n);
  const ParallelPlan zero2 = plan_of(layout, StrategyKind::zero2, Precision::bf16, n, n, 3);
  EXPECT_EQ(zero2.bytes_of(Collective::reduce_scatter), pass);
  EXPECT_EQ(zero2.bytes_of(Collective::all_gather), pass);
  EXPECT_EQ(zero2.bytes_of(Collective::all_reduce), norm);
  EXPECT_EQ(zero2.group_calls(), 2 * segments);
  // zero3 with 3 micro-batches: a gather per forward and backward of each, one reduce-scatter.
  const ParallelPlan zero3 = plan_of(layout, StrategyKind::zero3, Precision::bf16, n, n, 3);
  EXPECT_EQ(zero3.bytes_of(Collective::all_gather), 6 * pass);
  EXPECT_EQ(zero3.bytes_of(Collective::reduce_scatter), pass);
  EXPECT_EQ(zero3.group_calls(), 7 * segments);
  EXPECT_EQ(zero3.group_bytes(), 7 * pass);  // the norm's bytes left out
  // One rank sends nothing.
  EXPECT_EQ(plan_of(layout, StrategyKind::ddp, Precision::fp32, 1, 1, 1).group_bytes(), 0u);
  EXPECT_TRUE(plan_of(layout, StrategyKind::ddp, Precision::fp32, 1, 1, 1).collectives().empty());
}

TEST(ParallelPlan, CheckpointPiecesCoverTheModelOnce) {
  const ParamLayout layout = small_layout();
  for (const StrategyKind strategy : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero3, StrategyKind::hsdp})
    for (int world : {1, 2, 3, 4}) {
      const int group = strategy == StrategyKind::hsdp && world % 2 == 0 ? 2 : world;
      const ParallelPlan plan = plan_of(layout, strategy, Precision::fp32, world, group, 1);
      std::vector<int> written(layout.total(), 0);
      for (int r = 0; r < world; ++r)
        for (const auto& piece : plan.checkpoint_pieces(r % group, r / group))
          for (std::size_t i = piece.begin; i < piece.end; ++i) ++written[i];
      for (std::size_t i = 0; i < written.size(); ++i)
        ASSERT_EQ(written[i], 1) << strategy << " on " << world << ": element " << i;
    }
}

}  // namespace
}  // namespace st
