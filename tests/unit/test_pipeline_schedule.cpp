// The pipeline's schedules as values (parallel/pipeline_schedule.hpp): each pass once, in an
// order that cannot deadlock, with the activations in flight and the bubble of the literature.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "core/error.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace st {
namespace {

using Pass = PipelineAction::Pass;

std::string spelled(const std::vector<PipelineAction>& actions) {
  std::string text;
  for (const PipelineAction& a : actions) {
    if (!text.empty()) text += ' ';
    text += a.pass == Pass::forward ? 'F' : 'B';
    text += std::to_string(a.micro);
    if (a.chunk) text += '.' + std::to_string(a.chunk);
  }
  return text;
}

TEST(PipelineSchedule, OneFOneBFillsRunsSteadyAndDrains) {
  const PipelineShape shape{4, 6, 1};
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::one_f_one_b, shape, 0)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::one_f_one_b, shape, 2)),
            "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::one_f_one_b, shape, 3)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the fill stops at the micro-batches there are.
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::one_f_one_b, {4, 2, 1}, 0)), "F0 F1 B0 B1");
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::gpipe, {2, 3, 1}, 1)), "F0 F1 F2 B0 B1 B2");
}

TEST(PipelineSchedule, InterleavedVisitsChunksInGroupsOfStages) {
  // Megatron's order: micro-batches in groups of P, each group through chunk 0 then chunk 1;
  // backwards through the chunks in reverse.
  const PipelineShape shape{2, 4, 2};
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::interleaved, shape, 1)),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
}

TEST(PipelineSchedule, EveryPassRunsOnceAndEachForwardBeforeItsBackward) {
  for (const PipelineSchedule schedule :
       {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    for (const int P : {1, 2, 3, 4})
      for (const int m : {1, 2, 3, 4, 8, 12}) {
        const int V = schedule == PipelineSchedule::interleaved ? 2 + (m % 2) : 1;
        const PipelineShape shape{P, m, V};
        if (!pipeline_schedule_problem(schedule, shape).empty()) continue;
        for (int s = 0; s < P; ++s) {
          const auto actions = pipeline_actions(schedule, shape, s);
          ASSERT_EQ(actions.size(), static_cast<std::size_t>(2 * m * V));
          std::set<std::tuple<Pass, int, int>> seen;
          for (const PipelineAction& a : actions) {
            ASSERT_TRUE(seen.insert({a.pass, a.micro, a.chunk}).second) << name_of(schedule) << " repeats a pass";
            if (a.pass == Pass::backward) {
              ASSERT_TRUE(seen.count({Pass::forward, a.micro, a.chunk})) << name_of(schedule) << ": backward first";
            }
          }
        }
        // The stages' lists together never wait on each other in a cycle.
        EXPECT_NO_THROW(simulate_pipeline(schedule, shape, 1, 2)) << name_of(schedule) << " P " << P << " m " << m;
      }
}

TEST(PipelineSchedule, TheBubbleIsPMinusOneOverMV) {
  // Forward 1, backward 2 per stage: the step takes (m + P - 1) x 3 without interleaving, and
  // the idle time over the work, m x 3, is (P - 1) / m.
  for (const PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (const int P : {2, 4})
      for (const int m : {1, 4, 8}) {
        const PipelineShape shape{P, m, 1};
        const PipelineTiming t = simulate_pipeline(schedule, shape, 1, 2);
        EXPECT_DOUBLE_EQ(t.makespan, (m + P - 1) * 3.0) << name_of(schedule) << " P " << P << " m " << m;
        EXPECT_DOUBLE_EQ(t.makespan / (3.0 * m) - 1, pipeline_bubble(shape));
      }
  // Interleaved: each of V chunks takes 1/V of a stage's time, and the bubble shrinks V times.
  for (const int V : {2, 4}) {
    const PipelineShape shape{4, 8, V};
    const PipelineTiming t = simulate_pipeline(PipelineSchedule::interleaved, shape, 1.0 / V, 2.0 / V);
    EXPECT_DOUBLE_EQ(t.makespan / (3.0 * 8) - 1, pipeline_bubble(shape)) << "V " << V;
    EXPECT_DOUBLE_EQ(pipeline_bubble(shape), 3.0 / (8 * V));
  }
}

TEST(PipelineSchedule, ActivationsInFlight) {
  const PipelineShape shape{4, 8, 1};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(pipeline_peak_in_flight(PipelineSchedule::one_f_one_b, shape, s), 4 - s);
    EXPECT_EQ(pipeline_peak_in_flight(PipelineSchedule::gpipe, shape, s), 8);
  }
  EXPECT_EQ(pipeline_peak_in_flight(PipelineSchedule::one_f_one_b, {4, 2, 1}, 0), 2);
  // Interleaved keeps more chunks in flight on the first stage: its deeper warm-up, plus one.
  EXPECT_EQ(pipeline_peak_in_flight(PipelineSchedule::interleaved, {4, 8, 2}, 0), 2 * 3 + 4 + 1);
  const PipelineTiming t = simulate_pipeline(PipelineSchedule::one_f_one_b, shape, 1, 2);
  EXPECT_EQ(t.peak_in_flight, (std::vector<int>{4, 3, 2, 1}));
}

TEST(PipelineSchedule, ImpossibleShapesNameTheirKeys) {
  EXPECT_NE(pipeline_schedule_problem(PipelineSchedule::interleaved, {4, 6, 2}).find(
                "needs the micro-batches per step (6) to be a multiple of parallel.pipeline (4)"),
            std::string::npos);
  EXPECT_NE(pipeline_schedule_problem(PipelineSchedule::interleaved, {4, 8, 1}).find("parallel.virtual_stages >= 2"),
            std::string::npos);
  EXPECT_NE(pipeline_schedule_problem(PipelineSchedule::one_f_one_b, {4, 8, 2})
                .find("parallel.virtual_stages = 2 needs parallel.pipeline_schedule = \"interleaved\""),
            std::string::npos);
  EXPECT_EQ(pipeline_schedule_problem(PipelineSchedule::one_f_one_b, {4, 2, 1}), "");
  EXPECT_THROW(pipeline_actions(PipelineSchedule::interleaved, {4, 6, 2}, 0), Error);
}

// The blocks of each part along the model.
std::vector<std::int64_t> blocks_of(const std::vector<ModelPart>& parts, const ModelShape& shape) {
  std::vector<std::int64_t> blocks;
  std::int64_t next = 0;
  for (const ModelPart& p : parts) {
    EXPECT_EQ(p.first_block, next) << "parts are consecutive";
    next = p.end(shape);
    blocks.push_back(p.blocks(shape));
  }
  EXPECT_EQ(next, shape.n_layer) << "parts cover the model";
  return blocks;
}

ModelShape gpt2_shape(std::int64_t n_layer, std::int64_t d_model, std::int64_t vocab, std::int64_t seq) {
  ModelShape s;
  s.n_layer = n_layer;
  s.d_model = d_model;
  s.n_head = 12;
  s.vocab_size = vocab;
  s.padded_vocab = (vocab + 127) / 128 * 128;
  s.seq_len = seq;
  return s;
}

TEST(PipelineParts, BalancedByFlopsTheHeadCountsWithTheLastPart) {
  // GPT-2 124M: the LM head (768 x 50304) costs 4.5 blocks' FLOPs. Even parts (3 blocks each)
  // would make the last stage 3 + 4.5 blocks' worth; balanced, it holds one block, and the
  // others share the rest, the earlier ones taking the extra.
  const ModelShape gpt2 = gpt2_shape(12, 768, 50257, 1024);
  const double head = head_train_flops_per_token(gpt2) / block_train_flops_per_token(gpt2);
  EXPECT_NEAR(head, 4.46, 0.01);
  EXPECT_NEAR(12 * block_train_flops_per_token(gpt2) + head_train_flops_per_token(gpt2),
              train_flops_per_token(gpt2, 1024), 1e-6 * train_flops_per_token(gpt2, 1024));
  EXPECT_EQ(blocks_of(pipeline_parts(gpt2, 4), gpt2), (std::vector<std::int64_t>{4, 4, 3, 1}));
  EXPECT_EQ(blocks_of(pipeline_parts(gpt2, 2), gpt2), (std::vector<std::int64_t>{8, 4}));
  // A light head (the default deck's: 192 x 256 against 12 x 192^2 a block) leaves the parts
  // even, the first n_layer mod parts one block more.
  const ModelShape small = gpt2_shape(4, 192, 256, 128);
  EXPECT_LT(head_train_flops_per_token(small), block_train_flops_per_token(small));
  EXPECT_EQ(blocks_of(pipeline_parts(small, 2), small), (std::vector<std::int64_t>{2, 2}));
  const ModelShape seven = gpt2_shape(7, 192, 256, 128);
  EXPECT_EQ(blocks_of(pipeline_parts(seven, 3), seven), (std::vector<std::int64_t>{3, 2, 2}));
  EXPECT_EQ(blocks_of(pipeline_parts(seven, 7), seven), (std::vector<std::int64_t>(7, 1)));
}

// The memory-balanced cut: the FLOPs balance as far as each part's cap allows.
TEST(PipelineParts, CappedCutsKeepWithinEachPartsBlocksAndStayBalancedOtherwise) {
  const ModelShape gpt2 = gpt2_shape(12, 768, 50257, 1024);
  // Caps the FLOPs cut already keeps: that cut.
  EXPECT_EQ(capped_balanced_blocks(gpt2, {12, 12, 12, 12}), (std::vector<std::int64_t>{4, 4, 3, 1}));
  EXPECT_EQ(capped_balanced_blocks(gpt2, {4, 4, 3, 1}), (std::vector<std::int64_t>{4, 4, 3, 1}));
  // The first stage holds 2 at most: its blocks go to the next two. The head's stage (1 block +
  // 4.5 blocks' worth of head) stays the busiest, at 5.5 against 5, which no cut within the caps
  // avoids.
  EXPECT_EQ(capped_balanced_blocks(gpt2, {2, 12, 12, 12}), (std::vector<std::int64_t>{2, 5, 4, 1}));
  // The busiest stage's cost grows only as the caps force it: 5 + 5 + 1 + 1.
  EXPECT_EQ(capped_balanced_blocks(gpt2, {5, 5, 1, 1}), (std::vector<std::int64_t>{5, 5, 1, 1}));
  // Caps adding up to fewer than the blocks, or a cap of nothing: no cut.
  EXPECT_TRUE(capped_balanced_blocks(gpt2, {3, 3, 3, 2}).empty());
  EXPECT_TRUE(capped_balanced_blocks(gpt2, {12, 0, 12, 12}).empty());
}

TEST(PipelineParts, GivenBlocksAreTakenOrRefusedNamingTheKey) {
  const ModelShape gpt2 = gpt2_shape(12, 768, 50257, 1024);
  EXPECT_EQ(blocks_of(pipeline_parts(gpt2, 4, {3, 3, 3, 3}), gpt2), (std::vector<std::int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(blocks_of(pipeline_parts(gpt2, 2, {11, 1}), gpt2), (std::vector<std::int64_t>{11, 1}));
  // Through a stage's chunks with interleaving: chunk c of stage s is part c x P + s.
  const PipelineShape interleaved{2, 4, 2, {5, 4, 2, 1}};
  EXPECT_EQ(blocks_of(pipeline_parts(gpt2, 4, interleaved.blocks), gpt2), (std::vector<std::int64_t>{5, 4, 2, 1}));
  const std::vector<ModelPart> second = pipeline_stage_parts(gpt2, interleaved, 1);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].first_block, 5);
  EXPECT_EQ(second[1].first_block, 11);
  for (const std::vector<std::int64_t>& wrong : {std::vector<std::int64_t>{6, 6}, std::vector<std::int64_t>{4, 4, 4, 1},
                                                 std::vector<std::int64_t>{12, 0, 0, 0}}) {
    const std::string problem = stage_blocks_problem(gpt2, 4, wrong);
    EXPECT_NE(problem.find("parallel.stage_blocks gives " + std::to_string(wrong.size()) + " chunk(s)"), std::string::npos)
        << problem;
    EXPECT_NE(problem.find("adding up to model.n_layer = 12"), std::string::npos) << problem;
    EXPECT_THROW(pipeline_parts(gpt2, 4, wrong), Error);
  }
  EXPECT_EQ(stage_blocks_problem(gpt2, 4, {}), "");
}

}  // namespace
}  // namespace st
