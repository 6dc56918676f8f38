// Every strategy driven through the parallel plan on a small GPT-2 and a small Llama (grouped-
// query attention, untied LM head): a few steps with gradient
// accumulation on fixed batches, the parameters and gradient norms against one rank training on
// the whole batch, and the bytes each kind of collective moved in a step against the plan's
// prediction. Registered on 1..4 ranks and on 2 x 2 emulated nodes (hsdp then replicates
// across them). Tensor parallelism of 2 and 4 ranks on both architectures, each strategy over
// the ranks holding the same slice, against one rank likewise. ST_TEST_RANKS_PER_NODE
// (environment) sets the emulated node size.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <ostream>
#include <vector>

#include "comm/mpi_check.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/stack.hpp"
#include "core/error.hpp"
#include "comm/world.hpp"
#include "deck/config.hpp"
#include "model/bf16_storage_model.hpp"
#include "model/model.hpp"
#include "parallel/plan.hpp"
#include "parallel/strategy.hpp"

namespace st {
// Test names and messages show the architecture by name.
void PrintTo(Arch arch, std::ostream* out) { *out << arch_name(arch); }

namespace {

int emulated_ranks_per_node() {
  const char* v = std::getenv("ST_TEST_RANKS_PER_NODE");
  return v ? std::atoi(v) : 0;
}

// Sizes that divide by none of the rank counts, so that every segment is padded.
const ModelShape kShape{2, 12, 3, 7, 11, 13};
// The same sequence length and vocabulary (fill_sequence serves both).
const ModelShape kLlamaShape = [] {
  ModelShape s{2, 16, 4, 7, 11, 13};
  s.arch = Arch::llama;
  s.n_kv_head = 2;
  s.ffn_dim = 20;
  s.tie_embeddings = false;
  return s;
}();
const ModelShape& shape_of(Arch arch) { return arch == Arch::llama ? kLlamaShape : kShape; }
// Tensor parallelism over 2 and 4 ranks: heads, MLP width and padded vocabulary divide by both;
// the 11 real tokens fill 2.75 of 4 slices, so one slice holds padding only.
const ModelShape kTensorShape{2, 16, 4, 7, 11, 16};
// Llama's: 8 query heads reading 4 key/value heads, so that a rank of 4 holds 2 query heads and
// the 1 key/value head they share (of 2, 4 and 2); the MLP width 24 and the untied LM head's
// padded vocabulary divide by both degrees.
const ModelShape kLlamaTensorShape = [] {
  ModelShape s{2, 32, 8, 7, 11, 16};
  s.arch = Arch::llama;
  s.n_kv_head = 4;
  s.ffn_dim = 24;
  s.tie_embeddings = false;
  return s;
}();
const ModelShape& tensor_shape_of(Arch arch) { return arch == Arch::llama ? kLlamaTensorShape : kTensorShape; }
constexpr int kGlobalBatch = 24;  // sequences per step: 2 micro-batches on each of 1, 2, 3 or 4 ranks
constexpr int kMicroBatches = 2;
constexpr int kSteps = 4;
constexpr double kLr = 1e-2;
constexpr double kClip = 0.5;  // low enough to clip: the norm's reduction over the shards counts

// Sequence `i` of step `step`: fixed tokens, the targets the next ones.
void fill_sequence(int step, int i, int* tokens, int* targets) {
  for (int t = 0; t < kShape.seq_len; ++t) {
    const int x = (7 * step + 13 * i + 5 * t + (i * t) % 3) % static_cast<int>(kShape.vocab_size);
    tokens[t] = x;
    targets[t] = (x * 3 + 1) % static_cast<int>(kShape.vocab_size);
  }
}

struct Trained {
  std::vector<float> params;
  std::vector<double> norms;
  // Bytes per collective kind sent by this rank in steps 2..kSteps, step by step: by the
  // strategy's communicators, and within the tensor group.
  std::vector<TrafficCounters> per_step, tensor_per_step;
  std::unique_ptr<ParallelPlan> plan;  // the plan it trained by
};

TrafficCounters total_by_kind(const LevelTraffic& t) {
  TrafficCounters sum = t.intra;
  sum += t.inter;
  return sum;
}

TrafficCounters minus(const TrafficCounters& a, const TrafficCounters& b) {
  TrafficCounters d;
  for (std::size_t k = 0; k < kCollectiveKinds; ++k) d.bytes[k] = a.bytes[k] - b.bytes[k];
  return d;
}

// The communicators of a tensor-parallel layout of the world: consecutive groups of `degree`
// ranks split each layer; the ranks holding the same slice (one per group) form the data-parallel
// world the strategy runs on, with the emulated nodes' share of them per node.
struct TensorLayout {
  TensorLayout(World& world, int degree)
      : tensor_comm(split(world.comm(), world.rank() / degree, world.rank())),
        data_comm(split(world.comm(), world.rank() % degree, world.rank())),
        data(data_comm.get(), world.emulated() ? world.local_size() / degree : 0),
        tensor(tensor_comm.get(), TrafficLevel::intra, MpiWait::polling) {}
  static OwnedComm split(MPI_Comm comm, int color, int key) {
    MPI_Comm out = MPI_COMM_NULL;
    ST_CHECK_MPI(MPI_Comm_split(comm, color, key, &out));
    return OwnedComm(out);
  }
  OwnedComm tensor_comm, data_comm;
  World data;
  MpiCommunicator tensor;
};

// Trains kSteps steps of `strategy` on `world`'s ranks as the trainer does: each rank its share
// of the global batch in kMicroBatches micro-batches, clipping, AdamW. With tensor > 1, each
// consecutive group of `tensor` ranks splits the layers and shares one slice of the batch, and
// the strategy runs over the ranks holding the same slice; the parameters returned are whole.
Trained train(World& world, const ModelShape& shape, StrategyKind strategy, Precision precision, double bucket_mb,
              int tensor = 1,
              bool sequence_parallel = false, Recompute recompute = Recompute::none,
              GradReduction reduction = GradReduction::step, bool bf16_activations = false) {
  ParallelConfig parallel;
  parallel.strategy = strategy;
  parallel.precision = precision;
  parallel.bucket_mb = bucket_mb;
  parallel.collectives = Collectives::flat;  // one ring per group: the counters count what the formulas say
  CommStack::Settings settings;
  settings.mode = Collectives::flat;
  std::unique_ptr<TensorLayout> split;
  if (tensor > 1) split = std::make_unique<TensorLayout>(world, tensor);
  World& data = split ? split->data : world;
  CommStack comms(data, settings);
  const int ranks = data.size();
  const int per_rank = kGlobalBatch / ranks;
  const int micro = per_rank / kMicroBatches;
  const TensorGroup group =
      split ? TensorGroup{{tensor, world.rank() % tensor}, &split->tensor, sequence_parallel} : TensorGroup{};
  const std::unique_ptr<Model<float>> owned =
      bf16_activations ? std::make_unique<Bf16StorageModel>(shape, micro, host_exec(), recompute, group)
                       : make_model<float>(shape, micro, host_exec(), recompute, group);
  Model<float>& model = *owned;
  Mesh mesh = make_mesh(strategy, 0, ranks, data.local_size(), "test");
  mesh.tensor = tensor;
  auto plan_holder = std::make_unique<ParallelPlan>(model.layout(), strategy, precision, mesh, kMicroBatches, bucket_mb,
                                                    ActivationTraffic{micro * shape.seq_len, shape.d_model, shape.n_layer,
                                                                      recompute == Recompute::full, sequence_parallel,
                                                                      true, true, bf16_activations ? 2 : 4},
                                                    reduction);
  const ParallelPlan& plan = *plan_holder;
  StrategyComms strategy_comms{comms.collectives()};
  if (plan.grouped()) {
    const auto groups = comms.groups(plan.mesh().shards);
    strategy_comms.group = &groups.within;
    strategy_comms.replicas = &groups.across;
  }
  if (split) {
    strategy_comms.tensor = &split->tensor;
    strategy_comms.whole_layout = &model.whole_layout();
  }
  std::unique_ptr<Strategy> s = make_strategy(plan, parallel.overlap, model.layout(), {model.forward_order(), model.backward_order()},
                                              AdamWSettings{}, strategy_comms, nullptr);
  std::vector<float> init(model.whole_layout().total());
  model.init_params(init, 1234);
  s->load_params(model.slice_of(init));

  Trained out;
  std::vector<int> tokens(static_cast<std::size_t>(micro * kShape.seq_len)), targets(tokens.size());
  TrafficCounters before = total_by_kind(comms.traffic());
  const auto tensor_traffic = [&] { return split ? total_by_kind(split->tensor.traffic()) : TrafficCounters{}; };
  TrafficCounters tensor_before = tensor_traffic();
  const float loss_scale = 1.0f / static_cast<float>(kMicroBatches * ranks);
  for (int step = 0; step < kSteps; ++step) {
    s->zero_grads();
    for (int m = 0; m < kMicroBatches; ++m) {
      s->begin_micro_batch(m + 1 == kMicroBatches);
      for (int b = 0; b < micro; ++b)
        fill_sequence(step, data.rank() * per_rank + m * micro + b, tokens.data() + b * kShape.seq_len,
                      targets.data() + b * kShape.seq_len);
      model.forward(*s, tokens.data(), targets.data(), micro, static_cast<int>(kShape.seq_len));
      model.backward(*s, loss_scale);
    }
    s->finish_grads();
    double norm_squared = 0;
    s->add_grad_norm_squared(&norm_squared);
    const double norm = std::sqrt(norm_squared);
    out.norms.push_back(norm);
    const float grad_scale = static_cast<float>(norm > kClip ? kClip / (norm + 1e-6) : 1.0);
    s->optimizer_step(kLr, &grad_scale, step + 1);
    s->settle();
    const TrafficCounters now = total_by_kind(comms.traffic());
    // The first step gathers what the later ones find prefetched by the step before: from the
    // second on, every step sends the same.
    if (step > 0) out.per_step.push_back(minus(now, before));
    before = now;
    const TrafficCounters tensor_now = tensor_traffic();
    out.tensor_per_step.push_back(minus(tensor_now, tensor_before));
    tensor_before = tensor_now;
  }
  out.params = s->gather_params();
  out.params = model.whole_from_slices(out.params);
  out.plan = std::move(plan_holder);
  return out;
}

// One rank training on the whole batch with ddp: the reference every strategy must meet.
const Trained& reference(Arch arch) {
  static const Trained gpt2 = [] {
    World self(MPI_COMM_SELF);
    return train(self, kShape, StrategyKind::ddp, Precision::fp32, 0);
  }();
  static const Trained llama = [] {
    World self(MPI_COMM_SELF);
    return train(self, kLlamaShape, StrategyKind::ddp, Precision::fp32, 0);
  }();
  return arch == Arch::llama ? llama : gpt2;
}

// The same on the architecture's tensor-parallel shape, the reference of tensor parallelism.
const Trained& tensor_reference(Arch arch) {
  static const Trained gpt2 = [] {
    World self(MPI_COMM_SELF);
    return train(self, kTensorShape, StrategyKind::ddp, Precision::fp32, 0);
  }();
  static const Trained llama = [] {
    World self(MPI_COMM_SELF);
    return train(self, kLlamaTensorShape, StrategyKind::ddp, Precision::fp32, 0);
  }();
  return arch == Arch::llama ? llama : gpt2;
}

void expect_matches_plan(const Trained& t, const ParallelPlan& plan, const char* what) {
  ASSERT_EQ(t.per_step.size(), static_cast<std::size_t>(kSteps - 1));
  for (const TrafficCounters& step : t.per_step)
    for (const Collective kind : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
                                  Collective::broadcast})
      EXPECT_EQ(step.of(kind), plan.bytes_of(kind)) << what << ": collective kind " << static_cast<int>(kind);
}

// Parameters and every step's gradient norm equal the reference's within 1e-5.
void expect_equals_reference(const Trained& t, const Trained& ref, const std::string& what) {
  ASSERT_EQ(t.params.size(), ref.params.size()) << what;
  double worst = 0;
  for (std::size_t i = 0; i < t.params.size(); ++i) worst = std::max(worst, std::fabs(double(t.params[i]) - ref.params[i]));
  EXPECT_LT(worst, 1e-5) << what;
  for (int step = 0; step < kSteps; ++step)
    EXPECT_NEAR(t.norms[static_cast<std::size_t>(step)], ref.norms[static_cast<std::size_t>(step)], 1e-5)
        << what << ", step " << step;
}

class Strategies : public ::testing::TestWithParam<std::tuple<StrategyKind, Arch>> {
 protected:
  StrategyKind strategy() const { return std::get<0>(GetParam()); }
  Arch arch() const { return std::get<1>(GetParam()); }
};

TEST_P(Strategies, MatchOneRankAndSendWhatThePlanSays) {
  World world(MPI_COMM_WORLD, emulated_ranks_per_node());
  // ddp with small buckets: several all-reduces, each padded as the plan says.
  const double bucket_mb = strategy() == StrategyKind::ddp ? 0.002 : 0;
  const Trained t = train(world, shape_of(arch()), strategy(), Precision::fp32, bucket_mb);
  const ParallelPlan* plan = t.plan.get();
  const Trained& ref = reference(arch());
  expect_equals_reference(t, ref, name_of(strategy()) + " on " + std::to_string(world.size()) + " rank(s)");
  // Clipping was exercised (the reference's first norm is above the threshold).
  EXPECT_GT(ref.norms.front(), kClip);
  expect_matches_plan(t, *plan, "fp32");
  if (world.size() > 1 && strategy() == StrategyKind::ddp) {
    EXPECT_GT(plan->buckets().size(), 1u);
  }
  if (world.size() > 1 && strategy() != StrategyKind::hsdp) {
    EXPECT_GT(plan->group_bytes(), 0u);
  }
  if (world.node_count() > 1 && strategy() == StrategyKind::hsdp) {
    EXPECT_EQ(plan->mesh().replicas, world.node_count());
    EXPECT_GT(plan->replica_bytes(), 0u);
  }
}

TEST_P(Strategies, MixedPrecisionSendsWhatThePlanSays) {
  World world(MPI_COMM_WORLD, emulated_ranks_per_node());
  const Trained t = train(world, shape_of(arch()), strategy(), Precision::bf16, 0.001);
  expect_matches_plan(t, *t.plan, "bf16");
  // bf16 rounds: close to the fp32 reference, not equal.
  double worst = 0;
  for (std::size_t i = 0; i < t.params.size(); ++i)
    worst = std::max(worst, std::fabs(double(t.params[i]) - reference(arch()).params[i]));
  EXPECT_LT(worst, 0.1);
}

// bf16 activations (the model reads the strategy's bf16 parameters as they are, its fp32 gradients
// held across micro-batches where they are not sharded): the same collectives as bf16 with fp32
// activations, and close to the fp32 reference.
TEST_P(Strategies, Bf16ActivationsSendWhatThePlanSays) {
  World world(MPI_COMM_WORLD, emulated_ranks_per_node());
  const Trained t = train(world, shape_of(arch()), strategy(), Precision::bf16, 0.001, 1, false, Recompute::none,
                          GradReduction::step, true);
  ASSERT_TRUE(t.plan->stores_bf16());
  expect_matches_plan(t, *t.plan, "bf16 activations");
  double worst = 0;
  for (std::size_t i = 0; i < t.params.size(); ++i)
    worst = std::max(worst, std::fabs(double(t.params[i]) - reference(arch()).params[i]));
  EXPECT_LT(worst, 0.1);
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, Strategies,
                         ::testing::Combine(::testing::Values(StrategyKind::ddp, StrategyKind::zero1,
                                                              StrategyKind::zero2, StrategyKind::zero3,
                                                              StrategyKind::hsdp),
                                            ::testing::Values(Arch::gpt2, Arch::llama)),
                         [](const auto& param_info) {
                           return std::string(name_of(std::get<0>(param_info.param))) + "_" +
                                  arch_name(std::get<1>(param_info.param));
                         });

// The strategies that shard gradients, reduce-scattering each of the kMicroBatches micro-batches
// into the gradient shard (parallel.grad_reduction = "every_micro_batch") instead of accumulating a
// whole-model gradient: parameters and norms equal one rank's, the reduce-scatters run
// once per segment and micro-batch, and every kind what the plan says.
// In bf16 each micro-batch's reduced chunk is summed in fp32: close to the reference, and to the
// same run reducing once.
class EveryMicroBatch : public Strategies {};

TEST_P(EveryMicroBatch, MatchesOneRankAndSendsWhatThePlanSays) {
  World world(MPI_COMM_WORLD, emulated_ranks_per_node());
  const Trained t = train(world, shape_of(arch()), strategy(), Precision::fp32, 0, 1, false, Recompute::none,
                          GradReduction::micro_batch);
  ASSERT_TRUE(t.plan->reduces_each_micro_batch());
  const Trained& ref = reference(arch());
  expect_equals_reference(t, ref, name_of(strategy()) + " on " + std::to_string(world.size()) + " rank(s)");
  expect_matches_plan(t, *t.plan, "fp32, every micro-batch");
  // One reduce-scatter per segment and micro-batch (reducing once: per segment).
  for (const CollectivePlan& c : t.plan->collectives())
    if (c.kind == Collective::reduce_scatter) {
      EXPECT_EQ(c.calls, kMicroBatches * static_cast<std::int64_t>(t.plan->shards().segments().size()));
    }
  if (world.size() > 1 && strategy() != StrategyKind::hsdp) {
    EXPECT_GT(t.plan->bytes_of(Collective::reduce_scatter), 0u);
  }
}

TEST_P(EveryMicroBatch, MixedPrecisionSumsInFp32) {
  World world(MPI_COMM_WORLD, emulated_ranks_per_node());
  const Trained t = train(world, shape_of(arch()), strategy(), Precision::bf16, 0, 1, false, Recompute::none,
                          GradReduction::micro_batch);
  expect_matches_plan(t, *t.plan, "bf16, every micro-batch");
  const Trained once = train(world, shape_of(arch()), strategy(), Precision::bf16, 0);
  double from_reference = 0, from_once = 0;
  for (std::size_t i = 0; i < t.params.size(); ++i) {
    from_reference = std::max(from_reference, std::fabs(double(t.params[i]) - reference(arch()).params[i]));
    from_once = std::max(from_once, std::fabs(double(t.params[i]) - once.params[i]));
  }
  EXPECT_LT(from_reference, 0.1);
  // Both round each micro-batch's gradients to bf16 on their way through the links; they differ
  // only in where the micro-batches are summed.
  EXPECT_LT(from_once, 0.1);
  for (int step = 0; step < kSteps; ++step)
    EXPECT_NEAR(t.norms[static_cast<std::size_t>(step)], once.norms[static_cast<std::size_t>(step)],
                0.02 * once.norms[static_cast<std::size_t>(step)])
        << step;
}

INSTANTIATE_TEST_SUITE_P(ShardedGradients, EveryMicroBatch,
                         ::testing::Combine(::testing::Values(StrategyKind::zero2, StrategyKind::zero3,
                                                              StrategyKind::hsdp),
                                            ::testing::Values(Arch::gpt2, Arch::llama)),
                         [](const auto& param_info) {
                           return std::string(name_of(std::get<0>(param_info.param))) + "_" +
                                  arch_name(std::get<1>(param_info.param));
                         });

// Tensor parallelism of degree 2 (and 4 where the world allows) of either architecture, each
// data-parallel strategy over the ranks holding the same slice: parameters and gradient norms
// equal one rank training the whole model; the data-parallel collectives send what the plan of the slice says.
class TensorParallel : public ::testing::TestWithParam<std::tuple<StrategyKind, Arch>> {
 protected:
  StrategyKind strategy() const { return std::get<0>(GetParam()); }
  Arch arch() const { return std::get<1>(GetParam()); }
};

TEST_P(TensorParallel, MatchesOneRank) {
  World world(MPI_COMM_WORLD, emulated_ranks_per_node());
  const Trained& ref = tensor_reference(arch());
  EXPECT_GT(ref.norms.front(), kClip);
  // Also with sequence parallelism (the rows between split layers split over the group), and
  // with full recomputation (its sums and gathers again in backward).
  struct Case {
    int degree;
    bool rows_split;
    Recompute recompute;
  };
  for (const Case c : {Case{2, false, Recompute::none}, Case{2, true, Recompute::none}, Case{4, false, Recompute::none},
                       Case{4, true, Recompute::none}, Case{2, false, Recompute::full}, Case{2, true, Recompute::full}}) {
      const int degree = c.degree;
      const bool rows_split = c.rows_split;
      if (world.size() % degree != 0 || (world.emulated() && world.local_size() % degree != 0)) continue;
      const double bucket_mb = strategy() == StrategyKind::ddp ? 0.002 : 0;
      const Trained t = train(world, tensor_shape_of(arch()), strategy(), Precision::fp32, bucket_mb, degree,
                              rows_split, c.recompute);
      const std::string what = "tensor " + std::to_string(degree) + (rows_split ? " with sequence parallelism" : "") +
                               " x " + name_of(strategy()) + ", recompute " + recompute_name(c.recompute) + ", on " +
                               std::to_string(world.size()) + " ranks";
      ASSERT_EQ(t.params.size(), ref.params.size());
      double worst = 0;
      for (std::size_t i = 0; i < t.params.size(); ++i)
        worst = std::max(worst, std::fabs(double(t.params[i]) - ref.params[i]));
      EXPECT_LT(worst, 1e-5) << what;
      for (int step = 0; step < kSteps; ++step)
        EXPECT_NEAR(t.norms[static_cast<std::size_t>(step)], ref.norms[static_cast<std::size_t>(step)], 1e-5)
            << what << ", step " << step;
      expect_matches_plan(t, *t.plan, "tensor parallel");
      // Within the tensor group, every step (the first too: nothing is prefetched there).
      for (const TrafficCounters& step : t.tensor_per_step)
        for (const Collective kind : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
                                      Collective::broadcast})
          EXPECT_EQ(step.of(kind), t.plan->tensor_bytes_of(kind)) << what << ", kind " << static_cast<int>(kind);
      EXPECT_GT(t.plan->tensor_bytes(), 0u);
      if (rows_split) {
        EXPECT_GT(t.plan->tensor_bytes_of(Collective::reduce_scatter), 0u) << what;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, TensorParallel,
                         ::testing::Combine(::testing::Values(StrategyKind::ddp, StrategyKind::zero1,
                                                              StrategyKind::zero2, StrategyKind::zero3,
                                                              StrategyKind::hsdp),
                                            ::testing::Values(Arch::gpt2, Arch::llama)),
                         [](const auto& param_info) {
                           return std::string(name_of(std::get<0>(param_info.param))) + "_" +
                                  arch_name(std::get<1>(param_info.param));
                         });

}  // namespace
// Where gradients are not sharded (ddp, zero1), a model with bf16 activations sums its
// micro-batches' fp32 gradients in fp32 and rounds them to bf16 once, for the reduction: on a rank
// of its own, the reduced gradient is exactly the model's fp32 gradient of both micro-batches
// (accumulated in one fp32 buffer, as FlatBuffers gives it) rounded once. Rounded after each
// micro-batch, as the fp32-activation path does, it differs.
TEST(Bf16Activations, GradientsSumInFp32BeforeTheirOneRounding) {
  for (const StrategyKind kind : {StrategyKind::ddp, StrategyKind::zero1}) {
    World self(MPI_COMM_SELF);
    CommStack::Settings settings;
    settings.mode = Collectives::flat;
    CommStack comms(self, settings);
    const int micro = 3;
    Bf16StorageModel model(kShape, micro, host_exec(), Recompute::none);
    const ParallelPlan plan(model.layout(), kind, Precision::bf16, make_mesh(kind, 0, 1, 1, "test"), 2, 0,
                            ActivationTraffic{micro * kShape.seq_len, kShape.d_model, kShape.n_layer, false, false,
                                              true, true, 2});
    ASSERT_TRUE(plan.stores_bf16());
    std::unique_ptr<Strategy> s = make_strategy(plan, true, model.layout(), {model.forward_order(), model.backward_order()},
                                                AdamWSettings{}, StrategyComms{comms.collectives()}, nullptr);
    std::vector<float> init(model.whole_layout().total());
    model.init_params(init, 1234);
    s->load_params(init);
    std::vector<float> rounded(init.size()), want(init.size(), 0.0f);
    for (std::size_t i = 0; i < init.size(); ++i) rounded[i] = to_float(to_bf16(init[i]));
    std::vector<int> tokens(static_cast<std::size_t>(micro * kShape.seq_len)), targets(tokens.size());
    s->zero_grads();
    for (int m = 0; m < 2; ++m) {
      s->begin_micro_batch(m == 1);
      for (int b = 0; b < micro; ++b)
        fill_sequence(0, m * micro + b, tokens.data() + b * kShape.seq_len, targets.data() + b * kShape.seq_len);
      model.forward(*s, tokens.data(), targets.data(), micro, static_cast<int>(kShape.seq_len));
      model.backward(*s, 0.5f);
      model.forward(std::span<const float>(rounded), tokens.data(), targets.data(), micro,
                    static_cast<int>(kShape.seq_len));
      model.backward(std::span<const float>(rounded), want, 0.5f);
    }
    s->finish_grads();
    for (std::size_t seg = 0; seg < model.layout().segments().size(); ++seg) {
      const Segment& segment = model.layout().segments()[seg];
      const Buffer got = s->reduced_grads(seg);
      ASSERT_EQ(got.count, segment.size);
      const Bf16* g = static_cast<const Bf16*>(got.data);
      for (std::size_t i = 0; i < segment.size; ++i) {
        const float w = want[segment.offset + i];
        ASSERT_EQ(g[i].bits, to_bf16(w).bits) << name_of(kind) << ": " << segment.name << "[" << i << "]";
      }
    }
  }
}

}  // namespace st
