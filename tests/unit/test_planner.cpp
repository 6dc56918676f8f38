// The planner on real topologies (tests/data/topo): what it recommends, and why, for a model that
// fits, one that fits only sharded, and GPUs joined by slow links.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <regex>

#include "core/error.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "deck/parse.hpp"
#include "model/activations.hpp"
#include "model/deck_shape.hpp"
#include "model/gpt2.hpp"
#include "parallel/deck_plan.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/plan.hpp"
#include "parallel/shard_layout.hpp"
#include "parallel/sharded.hpp"
#include "plan/fit.hpp"
#include "plan/planner.hpp"

namespace st {
namespace {

// GPT-2 XL's shape (1.5 billion parameters), 64 sequences of 1024 per step.
const char* kXl = R"(
[run]
steps = 10
[model]
n_layer = 48
d_model = 1600
n_head = 25
seq_len = 1024
vocab_size = 50257
[data]
path = "unused.txt"
global_batch = 64
micro_batch = 1
)";

Machine machine_of(const std::string& fixture, double gpu_mem_gb, int nodes = 1, double inter_gbps = 0,
                   double tflops = 400) {
  const Topology t = read_topology_file(std::string(ST_SOURCE_DIR) + "/tests/data/topo/" + fixture);
  return gpu_machine(t, nodes, 0, gpu_mem_gb, tflops, inter_gbps, 0);
}

const StrategyPrediction& chosen(const PlanResult& r) {
  EXPECT_GE(r.chosen, 0) << r.reason;
  return r.rows.at(static_cast<std::size_t>(std::max(r.chosen, 0)));
}

const Config kConfig = parse_deck(kXl, "xl.toml", {});

TEST(Planner, NvswitchWithAModelThatFitsPicksDdp) {
  const PlanResult r = plan_strategies(kConfig, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80));
  EXPECT_EQ(chosen(r).strategy, StrategyKind::ddp);
  EXPECT_NE(r.reason.find("fits in 80.00 GiB"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("sends the least"), std::string::npos) << r.reason;
  for (const auto& row : r.rows) EXPECT_TRUE(row.fits) << row.strategy;
}

TEST(Planner, AModelThatFitsOnlyShardedPicksZero) {
  const PlanResult r = plan_strategies(kConfig, machine_of("03_a100-sxm4-80gb-8gpu_nv12_8nic_dual-socket.txt", 24));
  const StrategyPrediction& c = chosen(r);
  EXPECT_TRUE(c.strategy == StrategyKind::zero3 || c.strategy == StrategyKind::zero2 || c.strategy == StrategyKind::zero1) << c.strategy;
  EXPECT_NE(r.reason.find("ddp does not fit"), std::string::npos) << r.reason;
  for (const auto& row : r.rows)
    if (row.strategy == StrategyKind::ddp) {
      EXPECT_FALSE(row.fits);
    }
}

// GPT-2 XL in fp32 with 8 micro-batches a step on each of 8 GPUs: zero3 reducing once holds a
// whole-model fp32 gradient (4 Psi, 6.2 GB) beside its shards; reducing every micro-batch holds
// only the buffers of the segments in flight and the chunks on their way into the shard, and
// sends the reduce-scatters 8 times. On a GPU too small for the first, "auto" takes the second.
TEST(Planner, AccumulationReducesEveryMicroBatchWhereAWholeGradientWouldNotFit) {
  const Machine roomy = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80);
  const Config once = parse_deck(kXl, "xl.toml", {"parallel.grad_reduction=once"});
  const Config each = parse_deck(kXl, "xl.toml", {"parallel.grad_reduction=every_micro_batch"});
  const StrategyPrediction p_once = predict_strategy(once, roomy, StrategyKind::zero3, 0);
  const StrategyPrediction p_each = predict_strategy(each, roomy, StrategyKind::zero3, 0);
  EXPECT_FALSE(p_once.reduces_each_micro_batch);
  EXPECT_TRUE(p_each.reduces_each_micro_batch);
  const ShardLayout shards(make_layout(model_shape(once.model)), 8);
  const double whole_gradient = 4.0 * static_cast<double>(shards.padded_total());
  EXPECT_EQ(p_once.state_bytes, p_each.state_bytes);
  EXPECT_GT(static_cast<double>(p_once.workspace_bytes - p_each.workspace_bytes), 0.8 * whole_gradient)
      << p_once.workspace_bytes << " against " << p_each.workspace_bytes;
  // zero3 sends (2m + 1) passes over the model once (its gathers and one reduce-scatter), 3m
  // reducing every micro-batch: the fast level's bytes grow by (3m) / (2m + 1), m = 8.
  EXPECT_NEAR(static_cast<double>(p_each.fast_bytes) / static_cast<double>(p_once.fast_bytes), 24.0 / 17.0, 1e-3);
  EXPECT_GT(p_each.step_s, p_once.step_s - 1e-12);

  // auto: once where it fits; on a GPU between the two, every micro-batch, with the table saying so.
  const Config automatic = parse_deck(kXl, "xl.toml", {});
  EXPECT_FALSE(predict_strategy(automatic, roomy, StrategyKind::zero3, 0).reduces_each_micro_batch);
  const double between = (static_cast<double>(p_once.total_bytes()) + static_cast<double>(p_each.total_bytes())) / 2;
  const Machine tight = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", between / (1024.0 * 1024 * 1024));
  EXPECT_FALSE(predict_strategy(once, tight, StrategyKind::zero3, 0).fits);
  const PlanResult r = plan_strategies(automatic, tight);
  const StrategyPrediction& c = chosen(r);
  EXPECT_EQ(c.strategy, StrategyKind::zero3) << r.reason;
  EXPECT_TRUE(c.reduces_each_micro_batch);
  EXPECT_EQ(c.grad_reduction, GradReduction::micro_batch);
  const std::string table = format_plan(r, tight);
  EXPECT_NE(table.find("zero3*"), std::string::npos) << table;
  EXPECT_NE(table.find("*: gradients reduce-scattered every micro-batch"), std::string::npos) << table;
  Config resolved = parse_deck(kXl, "xl.toml", {"parallel.strategy=zero3"});
  resolve_grad_reduction(resolved, tight);
  EXPECT_EQ(resolved.parallel.grad_reduction, GradReduction::micro_batch);
  EXPECT_EQ(resolved.origin["parallel.grad_reduction"], "auto: a whole-model gradient would not fit");
  resolved = parse_deck(kXl, "xl.toml", {"parallel.strategy=zero3"});
  resolve_grad_reduction(resolved, roomy);
  EXPECT_EQ(resolved.parallel.grad_reduction, GradReduction::step);
  EXPECT_EQ(resolved.origin["parallel.grad_reduction"], "auto: the whole-model gradient fits");
}

TEST(Planner, NvlinkPairsJoinedBySysPickHsdpInPairs) {
  const PlanResult r = plan_strategies(kConfig, machine_of("06_rtx-a6000-8gpu_nvlink-bridge-pairs-nv4_dual-socket_2nic.txt", 48));
  EXPECT_EQ(chosen(r).strategy, StrategyKind::hsdp);
  EXPECT_EQ(chosen(r).group, 2);
  EXPECT_NE(r.reason.find("across the SYS"), std::string::npos) << r.reason;
}

TEST(Planner, PcieSocketsPickHsdpPerSocket) {
  // One micro-batch per step (with several, hsdp gathers every segment again for each of them and
  // the PCIe switches become the bottleneck: the planner then prefers zero1).
  const Config config = parse_deck(kXl, "xl.toml", {"data.global_batch=16", "data.micro_batch=2"});
  const PlanResult r =
      plan_strategies(config, machine_of("14_rtx-a5000-8gpu_pcie-pxb-pix_dual-socket_mlx5.txt", 48, 1, 0, 30));
  EXPECT_EQ(chosen(r).strategy, StrategyKind::hsdp);
  EXPECT_EQ(chosen(r).group, 4);
  EXPECT_NE(r.reason.find("inside the fast groups (PXB"), std::string::npos) << r.reason;
}

// The fastest row (rows come fastest first) with `stages` pipeline stages that fits.
const StrategyPrediction* fastest_with(const PlanResult& r, int stages) {
  for (const auto& row : r.rows)
    if (row.fits && row.pipeline == stages) return &row;
  return nullptr;
}

TEST(Planner, NodesOnASlowNetworkShardInsideTheNode) {
  // Without a pipeline hsdp keeps its gathers inside the node. On 12.5 GB/s between nodes a
  // pipeline of one node per stage, which sends only activations over the network, is faster
  // still; on 100 GB/s it is not, and hsdp is the choice.
  const Machine slow = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 12.5);
  const PlanResult r = plan_strategies(kConfig, slow);
  const StrategyPrediction* flat = fastest_with(r, 1);
  ASSERT_NE(flat, nullptr);
  EXPECT_EQ(flat->strategy, StrategyKind::hsdp);
  EXPECT_EQ(flat->group, 8);
  EXPECT_GT(chosen(r).pipeline, 1);
  EXPECT_NE(r.reason.find("Without a pipeline the fastest, hsdp, is predicted"), std::string::npos) << r.reason;
  const PlanResult fast = plan_strategies(kConfig, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 100));
  EXPECT_EQ(chosen(fast).pipeline, 1) << fast.reason;
  EXPECT_EQ(chosen(fast).strategy, StrategyKind::hsdp) << fast.reason;
  EXPECT_EQ(chosen(fast).group, 8);
  EXPECT_NE(fast.reason.find("across the network"), std::string::npos) << fast.reason;
}

TEST(Planner, NothingFitsSaysWhatItWouldTake) {
  const PlanResult r = plan_strategies(kConfig, machine_of("12_rtx4090-1gpu_single.txt", 8));
  EXPECT_EQ(r.chosen, -1);
  EXPECT_NE(r.reason.find("nothing fits"), std::string::npos) << r.reason;
}

TEST(Planner, MemoryIsTheStrategiesOwnArithmeticPlusActivations) {
  const Machine m = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80);
  const ParamLayout layout = make_layout(model_shape(kConfig.model));
  // A GPU rank works on the heads of one sequence at a time.
  const std::uint64_t activations =
      4 * activation_sizes(model_shape(kConfig.model), 1, Recompute::none, static_cast<int>(kConfig.model.n_head), true)
              .total();
  for (const StrategyKind s : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3}) {
    const StrategyPrediction p = predict_strategy(kConfig, m, s, 0);
    EXPECT_EQ(p.state_bytes, ParallelPlan(layout, s, Precision::fp32, Mesh{1, 8, 1}, 8, 0).model_state().total()) << s;
    EXPECT_EQ(p.activation_bytes, activations) << s;
  }
  // ZeRO-3 on 8 ranks holds an eighth of ddp's model state (up to padding).
  const double ratio = static_cast<double>(predict_strategy(kConfig, m, StrategyKind::zero3, 0).state_bytes) /
                       static_cast<double>(predict_strategy(kConfig, m, StrategyKind::ddp, 0).state_bytes);
  EXPECT_NEAR(ratio, 1.0 / 8, 0.001);
}

TEST(Planner, StepTimeFollowsTheLinks) {
  // The same GPUs, NVSwitch against PCIe across sockets: ddp's communication scales with the
  // bandwidth of the slowest link of its ring (450 GB/s NV18 against 16 GB/s SYS).
  const StrategyPrediction fast = predict_strategy(kConfig, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80), StrategyKind::ddp, 0);
  const StrategyPrediction slow =
      predict_strategy(kConfig, machine_of("08_rtx4090-8gpu_pcie-only-all-sys_dual-socket_2nic_tabs.txt", 80), StrategyKind::ddp, 0);
  EXPECT_DOUBLE_EQ(fast.compute_s, slow.compute_s);
  EXPECT_NEAR(slow.comm_s / fast.comm_s, 450.0 / 16.0, 0.5);
}

TEST(Planner, AutoBecomesTheChoiceWithHsdpGroupsAtTheFastLinks) {
  Config config = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto"});
  const std::string table =
      resolve_auto_strategy(config, machine_of("06_rtx-a6000-8gpu_nvlink-bridge-pairs-nv4_dual-socket_2nic.txt", 48));
  EXPECT_EQ(config.parallel.strategy, StrategyKind::hsdp);
  EXPECT_EQ(config.parallel.shard_group, 2);
  EXPECT_EQ(config.resolved.at("parallel.strategy"), "\"hsdp\"");
  EXPECT_EQ(config.resolved.at("parallel.shard_group"), "2");
  EXPECT_NE(config.origin.at("parallel.strategy").find("auto"), std::string::npos);
  EXPECT_NE(table.find("recommendation: hsdp with groups of 2"), std::string::npos) << table;
}

TEST(Planner, AutoThatCannotFitIsAnErrorForEveryRank) {
  Config config = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto"});
  try {
    resolve_auto_strategy(config, machine_of("12_rtx4090-1gpu_single.txt", 8));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.scope(), ErrorScope::all_ranks);
    EXPECT_NE(std::string(e.what()).find("xl.toml: parallel.strategy = \"auto\": nothing fits"), std::string::npos)
        << e.what();
  }
}

// The smallest total of any strategy with this recomputation, on a machine with room for all.
std::uint64_t smallest_need(const Config& config, Recompute recompute) {
  const Machine roomy = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 10000);
  std::uint64_t smallest = UINT64_MAX;
  for (const StrategyKind s : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3})
    smallest = std::min(smallest, predict_strategy(config, roomy, s, 0, recompute).total_bytes());
  return smallest;
}

TEST(Planner, RecomputationIsTheLeverWhenNothingElseFits) {
  // Four sequences of 1024 per GPU: the attention probabilities dominate.
  const Config config = parse_deck(kXl, "xl.toml", {"data.micro_batch=4"});
  const std::uint64_t none = smallest_need(config, Recompute::none);
  const std::uint64_t selective = smallest_need(config, Recompute::selective);
  const std::uint64_t full = smallest_need(config, Recompute::full);
  ASSERT_LT(selective, none);
  ASSERT_LT(full, selective);
  const double GiB = 1024.0 * 1024.0 * 1024.0;
  auto plan_with = [&](std::uint64_t between_a, std::uint64_t between_b) {
    const double gb = (static_cast<double>(between_a) + static_cast<double>(between_b)) / 2 / GiB;
    return plan_strategies(config, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", gb));
  };
  const ModelShape shape = model_shape(config.model);
  const double tokens_per_rank = 64.0 * 1024 / 8;
  for (const auto& [lower, upper, lever] : {std::tuple{selective, none, Recompute::selective},
                                            std::tuple{full, selective, Recompute::full}}) {
    const PlanResult r = plan_with(lower, upper);
    const StrategyPrediction& c = chosen(r);
    ASSERT_TRUE(r.recompute.has_value()) << r.reason;
    EXPECT_EQ(*r.recompute, lever);
    EXPECT_EQ(c.recompute, lever);
    EXPECT_TRUE(c.fits);
    const std::string setting = std::string("model.recompute = \"") + recompute_name(lever) + "\"";
    EXPECT_NE(r.reason.find("with " + setting + ": nothing fits with model.recompute = \"none\""), std::string::npos)
        << r.reason;
    EXPECT_NE(r.reason.find("Set " + setting + " in the deck"), std::string::npos) << r.reason;
    EXPECT_NE(r.reason.find("% step time"), std::string::npos) << r.reason;
    // What it costs: the recomputed FLOPs at the machine's rate, inside the step.
    EXPECT_DOUBLE_EQ(c.recompute_s, recompute_flops_per_token(shape, 1024, lever) * tokens_per_rank / (400e12));
    EXPECT_GT(c.step_s, c.recompute_s + c.exposed_s);
    // The table shows the recomputation of every row.
    EXPECT_NE(format_plan(r, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80)).find(recompute_name(lever)),
              std::string::npos);
  }
  // Below even full recomputation's need: nothing, and the reason says so.
  const PlanResult none_fits = plan_with(full / 2, full / 2);
  EXPECT_EQ(none_fits.chosen, -1);
  EXPECT_NE(none_fits.reason.find("not even model.recompute = \"full\""), std::string::npos) << none_fits.reason;
  // A deck that asks for recomputation itself is planned with it, and needs no lever.
  const Config selective_deck = parse_deck(kXl, "xl.toml", {"data.micro_batch=4", "model.recompute=\"selective\""});
  const double gb = (static_cast<double>(selective) + static_cast<double>(none)) / 2 / GiB;
  const PlanResult asked = plan_strategies(selective_deck, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", gb));
  EXPECT_FALSE(asked.recompute.has_value());
  EXPECT_EQ(chosen(asked).recompute, Recompute::selective);
}

TEST(Planner, AutoLeavesRecomputationToTheDeck) {
  Config config = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto", "data.micro_batch=4"});
  const double gb = (static_cast<double>(smallest_need(config, Recompute::selective)) +
                     static_cast<double>(smallest_need(config, Recompute::none))) /
                    2 / (1024.0 * 1024.0 * 1024.0);
  try {
    resolve_auto_strategy(config, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", gb));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.scope(), ErrorScope::all_ranks);
    EXPECT_NE(std::string(e.what()).find("Set model.recompute = \"selective\" in the deck"), std::string::npos)
        << e.what();
  }
}

// A 22B-parameter GPT whose activations do not fit beside zero3's shards on one 8-GPU node:
// heads, MLP width and padded vocabulary split by 2, 4 and 8.
const char* kBig = R"(
[run]
steps = 10
[model]
n_layer = 48
d_model = 6144
n_head = 48
seq_len = 2048
vocab_size = 50257
vocab_pad_to = 128
[data]
path = "unused.txt"
global_batch = 8
micro_batch = 1
[parallel]
precision = "bf16"
)";

TEST(Planner, NvswitchWithAModelTooBigForShardingAloneGetsTensorParallelInTheNode) {
  const Config config = parse_deck(kBig, "big.toml", {});
  const Machine nvswitch = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80);
  const PlanResult r = plan_strategies(config, nvswitch);
  for (const auto& row : r.rows) {
    if (row.tensor == 1) {
      EXPECT_FALSE(row.fits) << row.strategy << " fits with whole layers: the case is not one";
    }
  }
  const StrategyPrediction& c = chosen(r);
  EXPECT_GT(c.tensor, 1);
  EXPECT_LE(c.tensor, nvswitch.fast_group);
  EXPECT_TRUE(c.fits);
  EXPECT_FALSE(r.recompute.has_value()) << r.reason;
  EXPECT_GT(c.tensor_bytes, 0u);
  EXPECT_GT(c.tensor_s, 0.0);
  EXPECT_NE(r.reason.find("parallel.tensor = " + std::to_string(c.tensor)), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("inside an NVLink group (NV18"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("With whole layers nothing fits"), std::string::npos) << r.reason;
  // Its figures are the rows': the smallest whole-layer row's need, the split row's exchange.
  std::uint64_t smallest_whole = UINT64_MAX;
  for (const auto& row : r.rows)
    if (row.tensor == 1) smallest_whole = std::min(smallest_whole, row.total_bytes());
  EXPECT_NE(r.reason.find("needs " + format_bytes(static_cast<double>(smallest_whole)) + " per rank"), std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find("exchange " + format_bytes(static_cast<double>(c.tensor_bytes)) + " per rank per step"),
            std::string::npos)
      << r.reason;
  // The split rank's memory is the slice's: the plan of the slice's layout plus its activations.
  const ModelShape shape = model_shape(config.model);
  const ParallelPlan slice(make_layout(shape, TensorSplit{c.tensor, 0}), c.strategy, Precision::bf16,
                           Mesh{1, 8 / c.tensor, c.tensor}, 8 / (8 / c.tensor),
                           config.parallel.bucket_mb, ActivationTraffic{2048, 6144, 48});
  EXPECT_EQ(c.state_bytes, slice.model_state().total());
  EXPECT_EQ(c.tensor_bytes, slice.tensor_bytes());
  EXPECT_EQ(c.activation_bytes, predicted_activation_bytes(config, nvswitch, 1, Recompute::none, c.tensor));
  // The table's chosen row shows the degree in its tensor column.
  const std::string table = format_plan(r, nvswitch);
  const std::size_t chosen_at = table.find("<- chosen");
  ASSERT_NE(chosen_at, std::string::npos);
  const std::string chosen_row = table.substr(table.rfind('\n', chosen_at) + 1, chosen_at - table.rfind('\n', chosen_at));
  char columns[32];
  std::snprintf(columns, sizeof columns, "%-8s %6d", name_of(c.strategy).c_str(), c.tensor);
  EXPECT_NE(chosen_row.find(columns), std::string::npos) << chosen_row;
  // parallel.strategy = "auto" takes the degree with the strategy.
  Config automatic = parse_deck(kBig, "big.toml", {"parallel.strategy=auto"});
  resolve_auto_strategy(automatic, nvswitch);
  EXPECT_EQ(automatic.parallel.tensor, c.tensor);
  EXPECT_EQ(automatic.parallel.strategy, c.strategy);
}

TEST(Planner, PcieOnlyNodeNeverSplitsLayersAcrossItsLinks) {
  const Config config = parse_deck(kBig, "big.toml", {});
  for (const char* pcie : {"08_rtx4090-8gpu_pcie-only-all-sys_dual-socket_2nic_tabs.txt",
                           "14_rtx-a5000-8gpu_pcie-pxb-pix_dual-socket_mlx5.txt"}) {
    const PlanResult r = plan_strategies(config, machine_of(pcie, 80));
    for (const auto& row : r.rows) EXPECT_EQ(row.tensor, 1) << pcie;
    bool said = false;
    for (const auto& note : r.notes) said = said || note.find("tensor parallelism: not planned") != std::string::npos;
    EXPECT_TRUE(said) << pcie;
  }
}

TEST(Planner, MoreRanksThanSequencesSplitLayersInstead) {
  // 4 sequences per step on 8 GPUs: whole layers cannot split the batch; pairs of GPUs can.
  const Config config = parse_deck(kXl, "xl.toml", {"data.global_batch=4", "model.n_head=32", "model.vocab_pad_to=128"});
  const PlanResult r = plan_strategies(config, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80));
  const StrategyPrediction& c = chosen(r);
  EXPECT_EQ(c.tensor, 2) << r.reason;
  EXPECT_NE(r.reason.find("cannot split the global batch"), std::string::npos) << r.reason;
}

// ---- The reasons' numbers are the rows' ----

// The row of a strategy with whole layers and the deck's recomputation.
const StrategyPrediction& row_of(const PlanResult& r, StrategyKind s) {
  for (const auto& row : r.rows)
    if (row.strategy == s && row.tensor == 1 && row.pipeline == 1 && row.recompute == Recompute::none) return row;
  ADD_FAILURE() << "no " << s << " row";
  return r.rows.front();
}

std::uint64_t sent(const StrategyPrediction& p) { return p.fast_bytes + p.slow_bytes; }

// The first match of `pattern` in the reason (its first group), as a number; NaN when absent.
double number_in(const std::string& reason, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(reason, m, std::regex(pattern))) {
    ADD_FAILURE() << "no /" << pattern << "/ in: " << reason;
    return std::nan("");
  }
  return std::stod(m[1].str());
}

// A printed figure equals the rows' to its printed precision: half a unit of its last digit.
void expect_printed(double printed, double from_rows, double last_digit, const std::string& reason) {
  EXPECT_NEAR(printed, from_rows, last_digit / 2 + 1e-9) << reason;
}

// The figures every reason ends with: the chosen row's step, compute and exposed time.
void expect_step_figures(const PlanResult& r) {
  const StrategyPrediction& c = chosen(r);
  const std::regex step(R"(Predicted step ([\d.]+) ms \(compute ([\d.]+), exposed communication ([\d.]+)\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.reason, m, step)) << r.reason;
  for (int i = 1; i <= 3; ++i) {
    const std::string text = m[i].str();
    const double digit = std::pow(10.0, -static_cast<double>(text.size() - text.find('.') - 1));
    const double row = (i == 1 ? c.step_s : i == 2 ? c.compute_s : c.exposed_s) * 1e3;
    expect_printed(std::stod(text), row, digit, r.reason);
  }
}

TEST(PlannerReasons, DdpAgainstZero3SaysTheRowsByteRatio) {
  // Micro-batches per rank 4, 8 and 16: zero3 gathers every segment again for each, so its
  // traffic against ddp's is (2 x micro-batches + 1) / 2, not the 1.5x of one micro-batch.
  const Machine nvswitch = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80);
  for (const int global : {32, 64, 128}) {
    const Config config = parse_deck(kXl, "xl.toml", {"data.global_batch=" + std::to_string(global)});
    const PlanResult r = plan_strategies(config, nvswitch);
    ASSERT_EQ(chosen(r).strategy, StrategyKind::ddp) << r.reason;
    const StrategyPrediction &ddp = row_of(r, StrategyKind::ddp), &zero3 = row_of(r, StrategyKind::zero3);
    const double rows = static_cast<double>(sent(zero3)) / static_cast<double>(sent(ddp));
    const double printed = number_in(r.reason, R"(but send [\d.]+ \w+, ([\d.]+)x as much)");
    expect_printed(printed, rows, 0.1, r.reason);
    EXPECT_GT(rows, 4.0) << "the case must be far from 1.5x";
    EXPECT_NEAR(rows, (2.0 * (global / 8) + 1) / 2, 0.05) << r.reason;
    EXPECT_NE(r.reason.find("send " + format_bytes(static_cast<double>(sent(zero3))) + ","), std::string::npos)
        << r.reason;
    EXPECT_NE(r.reason.find("the least per step (" + format_bytes(static_cast<double>(sent(ddp))) + ")"),
              std::string::npos)
        << r.reason;
    expect_step_figures(r);
  }
}

TEST(PlannerReasons, TieMarginSaysHowMuchSlowerTheChoiceIs) {
  // 8 micro-batches: zero3 is predicted a little faster, within the 5% margin that prefers ddp.
  const PlanResult r = plan_strategies(kConfig, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80));
  ASSERT_GT(r.chosen, 0) << "the case must be a tie won by the less sharded strategy: " << r.reason;
  const double slower = 100 * (chosen(r).step_s / r.rows.front().step_s - 1);
  expect_printed(number_in(r.reason, R"(this choice (\d+)% slower)"), slower, 1, r.reason);
  expect_printed(number_in(r.reason, name_of(r.rows.front().strategy) + R"( is predicted ([\d.]+) ms)"),
                 r.rows.front().step_s * 1e3, 0.01, r.reason);
}

TEST(PlannerReasons, Zero3SaysItsTrafficAgainstDdpAndWhatComputeHides) {
  const PlanResult r = plan_strategies(kConfig, machine_of("03_a100-sxm4-80gb-8gpu_nv12_8nic_dual-socket.txt", 20, 1, 0, 300));
  const StrategyPrediction& c = chosen(r);
  ASSERT_EQ(c.strategy, StrategyKind::zero3) << r.reason;
  const double rows = static_cast<double>(sent(c)) / static_cast<double>(sent(row_of(r, StrategyKind::ddp)));
  expect_printed(number_in(r.reason, R"(\(([\d.]+)x ddp's\))"), rows, 0.1, r.reason);
  EXPECT_GT(std::abs(rows - 1.5), 1.0) << r.reason;
  expect_printed(number_in(r.reason, R"(([\d.]+) of its [\d.]+ ms of communication hidden)"),
                 (c.comm_s - c.exposed_s) * 1e3, 0.01, r.reason);
  expect_printed(number_in(r.reason, R"(of its ([\d.]+) ms of communication hidden)"), c.comm_s * 1e3, 0.01, r.reason);
  expect_step_figures(r);
}

TEST(PlannerReasons, Zero1SaysItSendsAsMuchAsDdpWhenItDoes) {
  const PlanResult r = plan_strategies(kConfig, machine_of("03_a100-sxm4-80gb-8gpu_nv12_8nic_dual-socket.txt", 24, 1, 0, 300));
  const StrategyPrediction& c = chosen(r);
  ASSERT_EQ(c.strategy, StrategyKind::zero1) << r.reason;
  EXPECT_EQ(sent(c), sent(row_of(r, StrategyKind::ddp)));
  EXPECT_NE(r.reason.find("sending " + format_bytes(static_cast<double>(sent(c))) + " per step (as much as ddp)"),
            std::string::npos)
      << r.reason;
  expect_step_figures(r);
}

TEST(PlannerReasons, HsdpSaysZero3sBytesAcrossTheSlowLinksAndTheirRatio) {
  const PlanResult r =
      plan_strategies(kConfig, machine_of("06_rtx-a6000-8gpu_nvlink-bridge-pairs-nv4_dual-socket_2nic.txt", 48));
  const StrategyPrediction& c = chosen(r);
  ASSERT_EQ(c.strategy, StrategyKind::hsdp) << r.reason;
  const StrategyPrediction& zero3 = row_of(r, StrategyKind::zero3);
  EXPECT_EQ(zero3.slow_level, c.slow_level);
  EXPECT_NE(r.reason.find("sends " + format_bytes(static_cast<double>(c.slow_bytes)) + " per step across the SYS"),
            std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find("zero3 over all ranks sends " + format_bytes(static_cast<double>(zero3.slow_bytes))),
            std::string::npos)
      << r.reason;
  expect_printed(number_in(r.reason, R"(through it \(([\d.]+)x as much\))"),
                 static_cast<double>(zero3.slow_bytes) / static_cast<double>(c.slow_bytes), 0.1, r.reason);
  expect_step_figures(r);
}

TEST(PlannerReasons, NvswitchWithTooSmallABatchNamesTheBatchNotTheLinks) {
  // 4 sequences on 8 GPUs: whole layers cannot split them, and GPT-2 XL's 25 heads split by no
  // power of two, so no tensor-parallel degree can either. The node has NVSwitch.
  const Config config = parse_deck(kXl, "xl.toml", {"data.global_batch=4"});
  const PlanResult r = plan_strategies(config, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80));
  EXPECT_EQ(r.chosen, -1);
  EXPECT_NE(r.reason.find("data.global_batch = 4 cannot be split over 8 ranks"), std::string::npos) << r.reason;
  const std::string notes = join(r.notes, "\n");
  EXPECT_EQ(notes.find("no NVLink group"), std::string::npos) << notes;
  EXPECT_NE(notes.find("tensor parallelism: not planned, though whole layers cannot split the global batch of 4 "
                       "sequences over the 8 ranks"),
            std::string::npos)
      << notes;
  for (const int t : {2, 4, 8})
    EXPECT_NE(notes.find("parallel.tensor = " + std::to_string(t) + ": n_head 25 does not divide by " +
                         std::to_string(t)),
              std::string::npos)
        << notes;
}

TEST(PlannerReasons, NvswitchThatNeedsRecomputationNamesTheHeadsNotTheLinks) {
  // Nothing fits with whole layers and no recomputation; the 25 heads rule out tensor parallelism
  // and selective recomputation makes the model fit.
  const Config config = parse_deck(kXl, "xl.toml", {"data.micro_batch=4"});
  const PlanResult r = plan_strategies(config, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 30));
  ASSERT_TRUE(r.recompute.has_value()) << r.reason;
  const std::string notes = join(r.notes, "\n");
  EXPECT_EQ(notes.find("no NVLink group"), std::string::npos) << notes;
  EXPECT_NE(notes.find("tensor parallelism: not planned, though no strategy fits with whole layers: parallel.tensor "
                       "= 2: n_head 25 does not divide"),
            std::string::npos)
      << notes;
}

TEST(PlannerReasons, PcieNodeNamesItsLinks) {
  const Config config = parse_deck(kBig, "big.toml", {});
  const PlanResult r = plan_strategies(config, machine_of("08_rtx4090-8gpu_pcie-only-all-sys_dual-socket_2nic_tabs.txt", 80));
  const std::string notes = join(r.notes, "\n");
  EXPECT_NE(notes.find("no NVLink group to split layers in (fast links: SYS"), std::string::npos) << notes;
}

// ---- Pipelines ----

// Llama 3.1 405B's shape in bf16: 512 sequences of 8192 a step, one per micro-batch, each layer
// split over the 8 GPUs of a node with sequence parallelism (as Megatron and torchtitan train it),
// recomputing each block in backward.
Config llama_405b(const std::vector<std::string>& sets = {}) {
  const std::string path = std::string(ST_SOURCE_DIR) + "/tests/data/decks/llama3_405b.toml";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << path;
  return parse_deck(text.str(), path, sets);
}

// 64 nodes of 8 H100s (80 GiB, 400 TFLOP/s) joined by 100 Gb/s.
Machine h100_nodes(int nodes) { return machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80, nodes, 12.5); }

TEST(PlannerPipeline, Llama405bOn64NodesGetsAPipelineWithTensorInsideTheNode) {
  const Machine m = h100_nodes(64);
  const Config config = llama_405b();
  const PlanResult r = plan_strategies(config, m);
  const StrategyPrediction& c = chosen(r);
  ASSERT_GT(c.pipeline, 1) << r.reason;
  EXPECT_EQ(m.nodes % c.pipeline, 0) << "stages of whole nodes";
  EXPECT_GT(c.tensor, 1);
  EXPECT_LE(c.tensor, m.fast_group) << "layers split inside the node";
  EXPECT_TRUE(c.fits);
  EXPECT_FALSE(r.recompute.has_value()) << r.reason;
  // Chosen because it is faster beyond the tie margin than anything without a pipeline.
  const StrategyPrediction* flat = fastest_with(r, 1);
  ASSERT_NE(flat, nullptr);
  EXPECT_LT(c.step_s * 1.05, flat->step_s) << r.reason;
  // Between stages: one micro-batch (one sequence) per message, this rank's 8192 / tensor rows
  // of 16384 fp32 values, forward and back from a middle stage, m of them a step.
  const std::int64_t data_ranks = m.world() / c.pipeline / c.tensor;
  const std::int64_t micro_batches = 512 / data_ranks;
  const std::uint64_t message = static_cast<std::uint64_t>(8192 / c.tensor) * 16384 * 4;
  EXPECT_EQ(c.pipeline_bytes, static_cast<std::uint64_t>((c.pipeline > 2 ? 2 : 1) * micro_batches) * message);
  EXPECT_EQ(c.pipeline_level, "network");
  // The bubble: (P - 1) / m of the stage's own work.
  EXPECT_NEAR(c.bubble_s, (c.compute_s - c.bubble_s) * (c.pipeline - 1) / static_cast<double>(micro_batches),
              1e-9 * c.compute_s);
  EXPECT_NEAR(c.step_s, c.compute_s + c.exposed_s + c.optimizer_s, 1e-9 * c.step_s);
  EXPECT_GE(c.exposed_s, c.pipeline_exposed_s);
  EXPECT_NE(r.reason.find("within each of " + std::to_string(c.pipeline) + " pipeline stages"), std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find(format_bytes(static_cast<double>(c.pipeline_bytes)) +
                          " per step from the busiest rank over the network"),
            std::string::npos)
      << r.reason;
  const long bubble_percent = std::lround(100.0 * (c.pipeline - 1) / static_cast<double>(micro_batches));
  EXPECT_NE(r.reason.find("(P - 1) / m = " + std::to_string(bubble_percent) + "%"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("Set parallel.pipeline = " + std::to_string(c.pipeline) + ", parallel.tensor = " +
                          std::to_string(c.tensor) + " in the deck"),
            std::string::npos)
      << r.reason;
  expect_step_figures(r);
  // The table shows the stages in the pipe column.
  const std::string table = format_plan(r, m);
  const std::size_t chosen_at = table.find("<- chosen");
  ASSERT_NE(chosen_at, std::string::npos);
  const std::string chosen_row = table.substr(table.rfind('\n', chosen_at) + 1, chosen_at - table.rfind('\n', chosen_at));
  char columns[40];
  std::snprintf(columns, sizeof columns, "%-8s %6d %4d", name_of(c.strategy).c_str(), c.tensor, c.pipeline);
  EXPECT_NE(chosen_row.find(columns), std::string::npos) << chosen_row;

  // Without recomputation nothing fits at all: the planner recommends full recomputation with
  // the pipeline.
  const PlanResult none = plan_strategies(llama_405b({"model.recompute=none"}), m);
  ASSERT_TRUE(none.recompute.has_value()) << none.reason;
  EXPECT_EQ(*none.recompute, Recompute::full);
  EXPECT_EQ(chosen(none).pipeline, c.pipeline);
  EXPECT_NE(none.reason.find("and parallel.pipeline = " + std::to_string(c.pipeline)), std::string::npos)
      << none.reason;
}

TEST(PlannerPipeline, An8bModelOnOneNvswitchNodeNeverGetsAPipeline) {
  // Llama 3 8B's shape, with and without the deck splitting layers.
  const std::vector<std::string> shape = {"model.n_layer=32", "model.d_model=4096", "model.n_head=32",
                                          "model.n_kv_head=8", "model.ffn_dim=14336", "data.global_batch=64"};
  for (const std::string tensor : {"parallel.tensor=1", "parallel.tensor=8"}) {
    std::vector<std::string> sets = shape;
    sets.push_back(tensor);
    if (tensor == "parallel.tensor=1") sets.push_back("parallel.sequence_parallel=false");
    const Machine node = h100_nodes(1);
    const PlanResult r = plan_strategies(llama_405b(sets), node);
    EXPECT_GE(r.chosen, 0) << r.reason;
    for (const auto& row : r.rows) EXPECT_EQ(row.pipeline, 1) << tensor << ": " << row.strategy;
    EXPECT_EQ(format_plan(r, node).find("pipe: stages"), std::string::npos);
  }
}

TEST(PlannerPipeline, AutoTakesThePipelineOnCpuRanksAndNotYetOnGpus) {
  // GPT-2 XL on 4 nodes joined by 12.5 GB/s (NodesOnASlowNetworkShardInsideTheNode): a pipeline.
  const Config config = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto"});
  const Machine gpus = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 12.5);
  const PlanResult r = plan_strategies(config, gpus);
  ASSERT_GT(chosen(r).pipeline, 1) << r.reason;
  // GPUs: the planner's pick among the rows without a pipeline, the origin saying why.
  Config on_gpus = config;
  resolve_auto_strategy(on_gpus, gpus);
  const int pick = choose_row(r.rows, 1);
  ASSERT_GE(pick, 0);
  const StrategyPrediction* flat = &r.rows[static_cast<std::size_t>(pick)];
  EXPECT_LE(flat->step_s, fastest_with(r, 1)->step_s * 1.05);
  EXPECT_EQ(on_gpus.parallel.pipeline, 1);
  EXPECT_EQ(on_gpus.parallel.strategy, flat->strategy);
  EXPECT_NE(on_gpus.origin["parallel.strategy"].find(
                "through host memory in this version, which the planner does not time"),
            std::string::npos)
      << on_gpus.origin["parallel.strategy"];
  // The same figures on CPU ranks: the deck takes the pipeline, and stops sampling (the stages
  // hold the model in parts).
  Machine cpus = gpus;
  cpus.gpu = false;
  const PlanResult cpu_plan = plan_strategies(config, cpus);
  ASSERT_GT(chosen(cpu_plan).pipeline, 1) << cpu_plan.reason;
  Config on_cpus = config;
  on_cpus.run.sample_every = 100;
  resolve_auto_strategy(on_cpus, cpus);
  EXPECT_EQ(on_cpus.parallel.pipeline, chosen(cpu_plan).pipeline);
  EXPECT_EQ(on_cpus.parallel.strategy, chosen(cpu_plan).strategy);
  EXPECT_EQ(on_cpus.run.sample_every, 0);
  EXPECT_NE(on_cpus.origin["parallel.pipeline"].find("auto"), std::string::npos);
}

// A deck's own split is planned beside the rows without it; where auto's choice has another,
// the deck takes the choice's, with nothing left over that only the deck's split could use.
TEST(PlannerPipeline, AutoReplacesTheDecksPipelineWithItsChoice) {
  const Config config = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto", "parallel.pipeline=2",
                                                    "parallel.stage_blocks=[30,18]"});
  const Machine gpus = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 12.5);
  // GPUs run no pipeline yet: the choice is the planner's pick among the rows without one.
  Config on_gpus = config;
  resolve_auto_strategy(on_gpus, gpus);
  const PlanResult r = plan_strategies(config, gpus);
  const int pick = choose_row(r.rows, 1);
  ASSERT_GE(pick, 0);
  const StrategyPrediction* flat = &r.rows[static_cast<std::size_t>(pick)];
  EXPECT_EQ(on_gpus.parallel.strategy, flat->strategy);
  EXPECT_EQ(on_gpus.parallel.pipeline, 1);
  EXPECT_EQ(on_gpus.parallel.tensor, flat->tensor);
  EXPECT_TRUE(on_gpus.parallel.stage_blocks.empty());
  EXPECT_NE(on_gpus.origin["parallel.pipeline"].find("without a pipeline"), std::string::npos)
      << on_gpus.origin["parallel.pipeline"];
  EXPECT_NO_THROW(deck_pipeline_degree(on_gpus, gpus.world()));
}

// The choice among rows that fit: the fastest, or within 5% of it fewer stages, then a smaller
// tensor degree, then a less sharded strategy; none where nothing fits.
TEST(PlannerChoice, WithinTheMarginTheSimplerRowWins) {
  const auto row = [](StrategyKind s, double ms, int pipeline = 1, int tensor = 1, bool fits = true) {
    StrategyPrediction p;
    p.strategy = s;
    p.step_s = ms / 1000;
    p.pipeline = pipeline;
    p.tensor = tensor;
    p.fits = fits;
    return p;
  };
  using enum StrategyKind;
  EXPECT_EQ(choose_row({row(zero3, 100), row(ddp, 104)}), 1);
  EXPECT_EQ(choose_row({row(zero3, 100), row(ddp, 106)}), 0);
  EXPECT_EQ(choose_row({row(ddp, 200, 1, 1, false), row(zero3, 100)}), 1);
  EXPECT_EQ(choose_row({row(zero1, 99, 2), row(zero3, 100)}), 1) << "fewer stages within the margin";
  EXPECT_EQ(choose_row({row(zero1, 90, 2), row(zero3, 100)}), 0);
  EXPECT_EQ(choose_row({row(zero1, 90, 2), row(zero3, 100)}, 1), 1) << "rows of more stages left out";
  EXPECT_EQ(choose_row({row(zero1, 90, 2)}, 1), -1);
  EXPECT_EQ(choose_row({row(ddp, 99, 1, 2), row(zero2, 100, 1, 1)}), 1) << "a smaller tensor degree within the margin";
  EXPECT_EQ(choose_row({row(zero2, 100), row(ddp, 80, 1, 1, false)}), 0);
}

// Interleaved 1F1B: each stage holds two chunks of the blocks. The bubble halves, each
// micro-batch crosses between the stages three times (both chunks' activations on, the second
// chunk's input gradient back), and the first stage keeps more micro-batch chunks in flight.
TEST(PlannerPipeline, InterleavedChunksHalveTheBubbleAndSendAMessagePerChunk) {
  // GPT-2 XL on 4 nodes of 8 GPUs in 2 stages: 16 data-parallel ranks, 4 micro-batches each.
  const Machine m = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80, 4, 12.5);
  const Config one_chunk = parse_deck(kXl, "xl.toml", {"parallel.pipeline=2"});
  const Config two_chunks = parse_deck(
      kXl, "xl.toml", {"parallel.pipeline=2", "parallel.pipeline_schedule=\"interleaved\"", "parallel.virtual_stages=2"});
  const StrategyPrediction a = predict_strategy(one_chunk, m, StrategyKind::zero1, 0);
  const StrategyPrediction b = predict_strategy(two_chunks, m, StrategyKind::zero1, 0);
  ASSERT_EQ(a.pipeline, 2);
  ASSERT_EQ(b.pipeline, 2);
  // The bubble, (P - 1) / (m V) of the stage's work.
  EXPECT_NEAR(a.bubble_s / (a.compute_s - a.bubble_s), 1.0 / 4, 1e-12);
  EXPECT_NEAR(b.bubble_s / (b.compute_s - b.bubble_s), 1.0 / 8, 1e-12);
  // A micro-batch's 1024 rows of 1600 fp32 values: once a micro-batch from an end stage of two,
  // three times with two chunks.
  const std::uint64_t message = 1024ull * 1600 * 4;
  EXPECT_EQ(a.pipeline_bytes, 4 * message);
  EXPECT_EQ(b.pipeline_bytes, 3 * 4 * message);
  // With bf16 activations the stages pass 2 bytes a value.
  Config bf16_rows = one_chunk;
  bf16_rows.parallel.precision = Precision::bf16;
  bf16_rows.parallel.activations = ActivationStorage::bf16;
  EXPECT_EQ(predict_strategy(bf16_rows, m, StrategyKind::zero1, 0).pipeline_bytes, 4 * message / 2);
  // In flight on the first stage (Megatron's warm-up of 4 chunk passes): chunk 0 takes all 4
  // micro-batches before its first backward, chunk 1 two; 1f1b keeps 2 of the whole stage.
  const PipelineShape interleaved{2, 4, 2};
  EXPECT_EQ(pipeline_chunk_in_flight(PipelineSchedule::interleaved, interleaved, 0, 0), 4);
  EXPECT_EQ(pipeline_chunk_in_flight(PipelineSchedule::interleaved, interleaved, 0, 1), 2);
  EXPECT_EQ(pipeline_chunk_in_flight(PipelineSchedule::one_f_one_b, {2, 4, 1}, 0, 0), 2);
  // The first stage's chunks: the model's first and third parts of four (balanced by FLOPs).
  const std::vector<ModelPart> first = pipeline_stage_parts(model_shape(two_chunks.model), interleaved, 0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(stage_activation_bytes(two_chunks, m, 1, Recompute::none, 1, interleaved, 0),
            4 * predicted_activation_bytes(two_chunks, m, 1, Recompute::none, 1, first[0]) +
                2 * predicted_activation_bytes(two_chunks, m, 1, Recompute::none, 1, first[1]));
  EXPECT_GT(b.activation_bytes, a.activation_bytes);
}

// A GPU rank's prediction counts its kernels' scratch (exec/kernel_scratch.hpp) in the
// workspace, on top of the strategy's pools: GPT-2 XL in bf16 at 1 sequence of 1024 holds
// cuBLAS's and cuBLASLt's workspaces, the LM head's weight in bf16 (50304 x 1600) and a piece of
// its dlogits in bf16 (all 1024 rows of them). A CPU rank's kernels hold none.
TEST(Planner, AGpuRanksWorkspaceCountsItsKernelsScratch) {
  const Machine gpus = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80);
  const Config bf16 = parse_deck(kXl, "xl.toml", {"parallel.precision=\"bf16\"", "parallel.classifier=\"unfused\"",
                                                         "parallel.strategy=\"zero1\""});
  const StrategyPrediction p = predict_strategy(bf16, gpus, StrategyKind::zero1, 0);
  const std::uint64_t V = 50304, C = 1600, N = 1024;
  const std::uint64_t at_least = 2 * (std::uint64_t{32} << 20) + V * C * 2 + N * V * 2;
  EXPECT_GE(p.kernel_scratch_bytes, at_least);
  EXPECT_LT(p.kernel_scratch_bytes, at_least + (std::uint64_t{64} << 20)) << "the rest is smaller pieces";
  const ParallelPlan plan = deck_plan(bf16, make_layout(model_shape(bf16.model), TensorSplit{1, 0}), gpus.world(),
                                      gpus.ranks_per_node, 64 / gpus.world(), 1);  // 8 micro-batches of 1 a rank
  EXPECT_EQ(p.workspace_bytes, workspace_estimate(plan) + p.kernel_scratch_bytes);
  Machine cpus = gpus;
  cpus.gpu = false;
  const StrategyPrediction host = predict_strategy(bf16, cpus, StrategyKind::zero1, 0);
  EXPECT_EQ(host.kernel_scratch_bytes, 0u);
  EXPECT_EQ(host.workspace_bytes, workspace_estimate(plan));
  // With bf16 activations a CPU rank's kernels are the host's reference, which widens operands
  // into four fp32 slots: a layer's widest activation rows (the MLP's 4 C, 1024 rows) in three,
  // the LM head's weight (the deck's padded vocabulary x C) in one of them, and a block's widest
  // weight (4 C x C) in two.
  const Config bf16_activations =
      parse_deck(kXl, "xl.toml", {"parallel.precision=\"bf16\"", "parallel.activations=\"bf16\"",
                                  "parallel.strategy=\"zero1\""});
  const StrategyPrediction reference = predict_strategy(bf16_activations, cpus, StrategyKind::zero1, 0);
  const std::uint64_t rows = N * 4 * C, weight = 4 * C * C;
  const std::uint64_t head = static_cast<std::uint64_t>(model_shape(bf16_activations.model).padded_vocab) * C;
  EXPECT_EQ(reference.kernel_scratch_bytes, 4 * (rows + std::max(rows, head) + std::max(rows, weight) + weight));
  // On a GPU rank bf16 activations are the CUDA kernels with bf16 storage, which multiply the
  // operands as stored: no weight or dlogits in bf16 scratch; cuBLAS's and cuBLASLt's workspaces
  // (GPT-2's biases ride the epilogue) and the small pieces (chunk sums, the token sort, the rows'
  // losses) remain.
  const StrategyPrediction device_bf16 = predict_strategy(bf16_activations, gpus, StrategyKind::zero1, 0);
  EXPECT_GE(device_bf16.kernel_scratch_bytes, 2 * (std::uint64_t{32} << 20));
  EXPECT_LT(device_bf16.kernel_scratch_bytes, 2 * (std::uint64_t{32} << 20) + (std::uint64_t{4} << 20));
}

// GPT-2 124M in bf16 on one GPU at 16 sequences of 1024: with bf16 activations (2 bytes a value,
// flash attention's log-sum-exps, bf16 logits) the plan holds at most 8 GiB of activations; with
// fp32 activations (and the same flash attention and bf16 logits) more than 11 GiB.
TEST(Planner, Gpt2SmallWithBf16ActivationsOnAGpuPlansAtMost8GiBOfActivations) {
  const char* gpt2_small = R"(
[run]
steps = 10
[model]
n_layer = 12
d_model = 768
n_head = 12
seq_len = 1024
vocab_size = 50257
vocab_pad_to = 128
[data]
path = "unused.txt"
global_batch = 16
[parallel]
precision = "bf16"
)";
  const Machine gpu = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80);
  const Config fp32 = parse_deck(gpt2_small, "gpt2.toml", {});
  const Config bf16 = parse_deck(gpt2_small, "gpt2.toml", {"parallel.activations=\"bf16\""});
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double with_bf16 = static_cast<double>(predicted_activation_bytes(bf16, gpu, 16, Recompute::none, 1)) / gib;
  const double with_fp32 = static_cast<double>(predicted_activation_bytes(fp32, gpu, 16, Recompute::none, 1)) / gib;
  EXPECT_LE(with_bf16, 8.0);
  EXPECT_GT(with_fp32, 11.0);
  EXPECT_LT(with_bf16, 0.6 * with_fp32) << "values take 2 bytes, statistics keep 4";
}

// Where a pipeline cut by FLOPs overfills a stage (the first keeps the most micro-batches in
// flight), the planner cuts by memory: each stage at most the blocks its ranks hold, the FLOPs as
// even as that allows. GPT-2 XL over 4 stages of H100s with 16 GiB: ddp cut by FLOPs needs
// more than 16 GiB on its fullest stage; cut by memory it fits, for a slower busiest stage. The
// cut is what a deck giving it predicts; `check` of the deck cut by FLOPs names it; auto writes it.
TEST(PlannerPipeline, WhereTheFlopsCutOverfillsAStageThePlannerCutsByMemory) {
  const Machine m = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 16, 4, 12.5);
  const Config staged = parse_deck(kXl, "xl.toml", {"parallel.pipeline=4"});
  const StrategyPrediction by_flops = predict_strategy(staged, m, StrategyKind::ddp, 0);
  EXPECT_FALSE(by_flops.fits);
  EXPECT_TRUE(by_flops.stage_blocks.empty());
  const StrategyPrediction by_memory =
      predict_strategy(staged, m, StrategyKind::ddp, 0, std::nullopt, 1, PipelineCut::memory_where_needed);
  ASSERT_TRUE(by_memory.fits);
  ASSERT_EQ(by_memory.stage_blocks.size(), 4u);
  EXPECT_EQ(std::accumulate(by_memory.stage_blocks.begin(), by_memory.stage_blocks.end(), std::int64_t{0}), 48);
  const ModelShape shape = model_shape(staged.model);
  EXPECT_LT(by_memory.stage_blocks.front(), pipeline_parts(shape, 4).front().blocks(shape))
      << "the first stage gives blocks away";
  EXPECT_LE(static_cast<double>(by_memory.total_bytes()), m.memory_per_rank);
  EXPECT_GT(by_memory.step_s, by_flops.step_s) << "a busier stage paces the pipeline";
  // The deck with that cut predicts the same (what the run would hold).
  Config given = staged;
  given.parallel.stage_blocks = by_memory.stage_blocks;
  const StrategyPrediction same = predict_strategy(given, m, StrategyKind::ddp, 0);
  EXPECT_EQ(same.total_bytes(), by_memory.total_bytes());
  EXPECT_DOUBLE_EQ(same.step_s, by_memory.step_s);
  EXPECT_TRUE(same.stage_blocks.empty()) << "the deck's own cut";
  // Cut by memory with a block more on any stage and one fewer on another, some stage overfills
  // or the busiest stage is no lighter.
  for (std::size_t to = 0; to < 4; ++to)
    for (std::size_t from = 0; from < 4; ++from) {
      if (to == from || by_memory.stage_blocks[from] == 1) continue;
      Config moved = given;
      ++moved.parallel.stage_blocks[to];
      --moved.parallel.stage_blocks[from];
      const StrategyPrediction q = predict_strategy(moved, m, StrategyKind::ddp, 0);
      EXPECT_TRUE(!q.fits || q.step_s >= by_memory.step_s * (1 - 1e-12)) << "a block from stage " << from << " to " << to;
    }

  // The deck cut by FLOPs: check refuses it and names the cut that fits.
  Config deck = staged;
  deck.parallel.strategy = StrategyKind::ddp;
  std::string blocks;
  for (const std::int64_t b : by_memory.stage_blocks) blocks += (blocks.empty() ? "" : ", ") + std::to_string(b);
  try {
    check_memory_fits(deck, m);
    ADD_FAILURE() << "the FLOPs cut fits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Cut by memory it fits: parallel.stage_blocks = [" + blocks + "]"),
              std::string::npos)
        << e.what();
  }
  deck.parallel.stage_blocks = by_memory.stage_blocks;
  EXPECT_NO_THROW(check_memory_fits(deck, m));

  // The planner's rows cut by memory where they must; its table marks them.
  const PlanResult r = plan_strategies(staged, m);
  const StrategyPrediction& c = chosen(r);
  ASSERT_EQ(c.pipeline, 4) << r.reason;
  ASSERT_FALSE(c.stage_blocks.empty()) << r.reason;
  EXPECT_NE(r.reason.find("cut by memory"), std::string::npos) << r.reason;
  EXPECT_NE(format_plan(r, m).find(" 4m "), std::string::npos) << format_plan(r, m);

  // auto (on CPU ranks, where pipelines are taken) writes the planner's cut into the deck.
  Machine cpus = m;
  cpus.gpu = false;
  Config automatic = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto"});
  const PlanResult on_cpus = plan_strategies(automatic, cpus);
  const StrategyPrediction& cpu_choice = chosen(on_cpus);
  resolve_auto_strategy(automatic, cpus);
  EXPECT_EQ(automatic.parallel.pipeline, cpu_choice.pipeline) << on_cpus.reason;
  ASSERT_FALSE(cpu_choice.stage_blocks.empty()) << on_cpus.reason;
  EXPECT_EQ(automatic.parallel.stage_blocks, cpu_choice.stage_blocks) << on_cpus.reason;
  EXPECT_NE(automatic.origin["parallel.stage_blocks"].find("cut by memory"), std::string::npos);
  EXPECT_NO_THROW(check_memory_fits(automatic, cpus));
}

// The planner's own pipelines try Megatron's interleaved schedule too (two chunks a stage): half
// the bubble for twice the messages and more micro-batches in flight. GPT-2 XL on 4 nodes at
// 12.5 GB/s: with 80 GiB GPUs it takes 4 stages of 2 chunks, faster than 1f1b over the same
// stages. With 20 GiB the interleaved activations do not fit cut by FLOPs; cut by memory (each
// stage's total capped, its two chunks sharing it) they do, and that is still faster than 1f1b.
// With 16 GiB, where the cut by memory leaves the busiest stage heavier still, 1f1b is faster.
// auto writes the schedule into the deck, which the run accepts.
TEST(PlannerPipeline, ThePlannerInterleavesWhereTheMemoryAllows) {
  const Machine roomy = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 80, 4, 12.5);
  const PlanResult r = plan_strategies(kConfig, roomy);
  const StrategyPrediction& c = chosen(r);
  ASSERT_EQ(c.pipeline, 4) << r.reason;
  EXPECT_EQ(c.virtual_stages, 2) << r.reason;
  const Config one_chunk = parse_deck(kXl, "xl.toml", {"parallel.pipeline=4"});
  const Config two_chunks = parse_deck(
      kXl, "xl.toml", {"parallel.pipeline=4", "parallel.pipeline_schedule=\"interleaved\"", "parallel.virtual_stages=2"});
  const StrategyPrediction flat_chunks = predict_strategy(one_chunk, roomy, c.strategy, 0, c.recompute, c.tensor);
  const StrategyPrediction same = predict_strategy(two_chunks, roomy, c.strategy, 0, c.recompute, c.tensor);
  EXPECT_DOUBLE_EQ(same.step_s, c.step_s);
  EXPECT_LT(c.step_s, flat_chunks.step_s) << "interleaving is chosen for being faster";
  EXPECT_NE(r.reason.find("(P - 1) / (m V) = "), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("Set parallel.pipeline = 4, parallel.pipeline_schedule = \"interleaved\", "
                          "parallel.virtual_stages = 2 in the deck"),
            std::string::npos)
      << r.reason;
  EXPECT_NE(format_plan(r, roomy).find(" 4x2 "), std::string::npos);

  const Machine middling = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 12.5);
  const PlanResult i = plan_strategies(kConfig, middling);
  ASSERT_EQ(chosen(i).pipeline, 4) << i.reason;
  EXPECT_EQ(chosen(i).virtual_stages, 2) << i.reason;
  const std::vector<std::int64_t>& cut = chosen(i).stage_blocks;
  ASSERT_EQ(cut.size(), 8u) << i.reason;
  for (int s = 0; s < 4; ++s)  // a stage's two chunks share its blocks evenly
    EXPECT_LE(std::abs(cut[static_cast<std::size_t>(s)] - cut[static_cast<std::size_t>(4 + s)]), 1) << i.reason;
  EXPECT_FALSE(predict_strategy(two_chunks, middling, chosen(i).strategy, 0, chosen(i).recompute, chosen(i).tensor).fits)
      << "cut by FLOPs";
  Config given = two_chunks;
  given.parallel.stage_blocks = cut;
  EXPECT_TRUE(predict_strategy(given, middling, chosen(i).strategy, 0, chosen(i).recompute, chosen(i).tensor).fits)
      << "the deck with the cut";
  EXPECT_NE(format_plan(i, middling).find(" 4x2m "), std::string::npos);

  const Machine tight = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 16, 4, 12.5);
  const PlanResult t = plan_strategies(kConfig, tight);
  ASSERT_GT(chosen(t).pipeline, 1) << t.reason;
  EXPECT_EQ(chosen(t).virtual_stages, 1) << t.reason;
  EXPECT_FALSE(predict_strategy(two_chunks, tight, chosen(t).strategy, 0, chosen(t).recompute, chosen(t).tensor).fits);

  // auto (on CPU ranks, where pipelines are taken) writes the schedule and its chunks.
  Machine cpus = roomy;
  cpus.gpu = false;
  Config deck = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto"});
  resolve_auto_strategy(deck, cpus);
  EXPECT_EQ(deck.parallel.pipeline, 4);
  EXPECT_EQ(deck.parallel.virtual_stages, 2);
  EXPECT_EQ(deck.parallel.pipeline_schedule, PipelineSchedule::interleaved);
  EXPECT_NE(deck.origin["parallel.pipeline_schedule"].find("auto"), std::string::npos);
  const BatchPlan batches = plan_batches(deck.data, deck.model.seq_len, cpus.world() / 4, deck.deck_path);
  EXPECT_EQ(pipeline_schedule_problem(deck.parallel.pipeline_schedule, deck_pipeline_shape(deck, batches.accum_steps)),
            "");

  // A deck with chunks but no pipeline keeps them (the run refuses it, naming the key): auto
  // does not quietly mend it.
  Config chunks_alone = parse_deck(kXl, "xl.toml", {"parallel.strategy=auto", "parallel.virtual_stages=2"});
  resolve_auto_strategy(chunks_alone, tight);
  EXPECT_EQ(chunks_alone.parallel.pipeline, 1);
  EXPECT_EQ(chunks_alone.parallel.virtual_stages, 2);
}

// Whole layers that fit under one of the two schedules: no tensor split is planned for either
// (interleaving's activations, which may not fit whole, do not pull tensor parallelism into the
// pipelines). A 2.7B-shaped GPT (32 blocks of 2560) on 4 nodes of 20 GiB GPUs.
TEST(PlannerPipeline, TensorSplitsArePlannedForBothSchedulesOrNeither) {
  const Config config = parse_deck(kXl, "xl.toml", {"model.n_layer=32", "model.d_model=2560", "model.n_head=32"});
  const Machine m = machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 12.5);
  const PlanResult r = plan_strategies(config, m);
  bool pipelined_whole_fits = false;
  for (const StrategyPrediction& row : r.rows)
    pipelined_whole_fits = pipelined_whole_fits || (row.pipeline > 1 && row.tensor == 1 && row.fits);
  ASSERT_TRUE(pipelined_whole_fits) << format_plan(r, m);
  for (const StrategyPrediction& row : r.rows)
    if (row.pipeline > 1) {
      EXPECT_EQ(row.tensor, 1) << format_plan(r, m);
    }
}

// A pipeline stage's tensor group exchanges its own blocks' activations, the embedding's where it
// embeds, the head's where it heads: the stages' exchanges add up to the whole model's.
TEST(PlannerPipeline, StagesTensorTrafficAddsUpToTheWholeModels) {
  const ModelShape shape = model_shape(llama_405b().model);  // 126 blocks
  const ActivationTraffic whole_traffic{8192, 16384, 126, false, true};
  const auto traffic = [&](const ParallelPlan& plan) {
    return plan.tensor_bytes_of(Collective::reduce_scatter) + plan.tensor_bytes_of(Collective::all_gather);
  };
  const ParallelPlan whole(make_layout(shape, TensorSplit{8, 0}), StrategyKind::ddp, Precision::fp32, Mesh{1, 1, 8}, 4,
                           0, whole_traffic);
  for (const int stages : {2, 3, 8}) {
    std::uint64_t sum = 0;
    for (const ModelPart& part : pipeline_parts(shape, stages)) {
      const ActivationTraffic stage{8192, 16384, part.blocks(shape), false, true, part.embeds(), part.heads(shape)};
      sum += traffic(ParallelPlan(make_layout(shape, TensorSplit{8, 0}, part), StrategyKind::ddp, Precision::fp32,
                                  Mesh{1, 1, 8}, 4, 0, stage));
    }
    EXPECT_EQ(sum, traffic(whole)) << stages << " stages";
  }
}

}  // namespace
}  // namespace st
