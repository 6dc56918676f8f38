// The shard layout and the strategy plan: pure arithmetic, no MPI.
#include <gtest/gtest.h>

#include "model/layout.hpp"
#include "parallel/plan.hpp"
#include "parallel/shard_layout.hpp"

namespace st {
namespace {

ParamLayout small_layout() {
  // Sizes chosen so that no segment divides evenly by 3 or 4.
  return make_gpt2_layout(Gpt2Shape{2, 12, 3, 7, 11, 13});
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

TEST(StrategyPlan, ModelStateFollowsTheZeroTable) {
  const ParamLayout layout = make_gpt2_layout(Gpt2Shape{4, 64, 4, 32, 256, 256});
  const double psi = static_cast<double>(layout.total());
  auto state = [&](StrategyKind strategy, Precision precision, int n) {
    return static_cast<double>(plan_strategy(layout, strategy, precision, n, n, 1).memory.model_state());
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

TEST(StrategyPlan, TrafficFollowsTheFormulas) {
  const ParamLayout layout = make_gpt2_layout(Gpt2Shape{4, 64, 4, 32, 256, 256});
  const double psi4 = 4.0 * static_cast<double>(layout.total());
  const int n = 4;
  EXPECT_NEAR(plan_strategy(layout, StrategyKind::ddp, Precision::fp32, n, n, 1).group_bytes, 2 * psi4 * 3 / 4, 0.01 * psi4);
  EXPECT_NEAR(plan_strategy(layout, StrategyKind::zero2, Precision::fp32, n, n, 1).group_bytes, 2 * psi4 * 3 / 4, 0.01 * psi4);
  EXPECT_NEAR(plan_strategy(layout, StrategyKind::zero3, Precision::fp32, n, n, 1).group_bytes, 3 * psi4 * 3 / 4, 0.01 * psi4);
  // zero3 with 2 micro-batches gathers twice per micro-batch, reduces once: 5 Psi (N-1)/N.
  EXPECT_NEAR(plan_strategy(layout, StrategyKind::zero3, Precision::fp32, n, n, 2).group_bytes, 5 * psi4 * 3 / 4, 0.01 * psi4);
  // hsdp in groups of 2 on 4 ranks: zero3 within the group, one all-reduce of the shard across.
  const StrategyPlan hsdp = plan_strategy(layout, StrategyKind::hsdp, Precision::fp32, 4, 2, 1);
  EXPECT_NEAR(hsdp.group_bytes, 3 * psi4 / 2, 0.01 * psi4);
  EXPECT_NEAR(hsdp.replica_bytes, 2 * (psi4 / 2) / 2, 0.01 * psi4);
  EXPECT_EQ(plan_strategy(layout, StrategyKind::zero3, Precision::fp32, 1, 1, 1).group_bytes, 0u);
}

}  // namespace
}  // namespace st
