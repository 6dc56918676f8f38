// The planner on real topologies (tests/data/topo): what it recommends, and why, for a model that
// fits, one that fits only sharded, and GPUs joined by slow links.
#include <gtest/gtest.h>

#include <cstdio>

#include "app/planning.hpp"
#include "core/error.hpp"
#include "deck/parse.hpp"
#include "model/gpt2.hpp"
#include "parallel/plan.hpp"
#include "plan/planner.hpp"
#include "train/trainer.hpp"

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

TEST(Planner, NodesOnASlowNetworkShardInsideTheNode) {
  const PlanResult r = plan_strategies(kConfig, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 20, 4, 12.5));
  EXPECT_EQ(chosen(r).strategy, StrategyKind::hsdp);
  EXPECT_EQ(chosen(r).group, 8);
  EXPECT_NE(r.reason.find("across the network"), std::string::npos) << r.reason;
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
      app::resolve_auto_strategy(config, machine_of("06_rtx-a6000-8gpu_nvlink-bridge-pairs-nv4_dual-socket_2nic.txt", 48));
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
    app::resolve_auto_strategy(config, machine_of("12_rtx4090-1gpu_single.txt", 8));
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
    app::resolve_auto_strategy(config, machine_of("01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", gb));
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
  app::resolve_auto_strategy(automatic, nvswitch);
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

}  // namespace
}  // namespace st
