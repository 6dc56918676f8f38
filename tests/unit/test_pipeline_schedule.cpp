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

}  // namespace
}  // namespace st
