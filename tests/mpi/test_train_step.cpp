// One training step (train/train_step.hpp) on a backend that counts the calls that would make
// the host wait on a device (download, synchronize): every strategy, in fp32 and bf16, with
// gradient accumulation, reducing once or every micro-batch, and under tensor parallelism, runs
// a whole step with one read, at its end. The step's loss is the one forward passes give for the
// same batch, so the count is not bought by losing the loss.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../unit/host_exec_with_kernels.hpp"
#include "comm/world.hpp"
#include "deck/parse.hpp"
#include "train/train_step.hpp"

namespace st {
namespace {

using CountingExec = testing_support::HostExecWithKernels<HostLayerKernels<float>>;

struct StepCase {
  std::string name;
  std::vector<std::string> settings;  // --set overrides of the deck below
};

std::ostream& operator<<(std::ostream& out, const StepCase& c) { return out << c.name; }

constexpr const char* kDeck = R"([run]
steps = 3
[model]
n_layer = 2
d_model = 32
n_head = 4
seq_len = 16
vocab_size = 64
[data]
path = "unused.bin"
global_batch = 8
micro_batch = 2
[optimizer]
lr = 1e-2
grad_clip = 0.5
)";

class TrainStepReads : public ::testing::TestWithParam<StepCase> {};

TEST_P(TrainStepReads, AWholeStepReadsTheBackendOnceAndKeepsTheForwardPassesLoss) {
  const Config config = parse_deck(kDeck, "deck.toml", GetParam().settings);
  World world(MPI_COMM_WORLD);
  auto counting = std::make_unique<CountingExec>("host, counting the host's waits");
  CountingExec& exec = *counting;
  ShardedModel net(config, world, host_execution(std::move(counting)), static_cast<int>(config.data.micro_batch), nullptr);
  net.init_params(7);

  StepSettings settings;
  settings.micro_batch = static_cast<int>(config.data.micro_batch);
  settings.seq_len = static_cast<int>(config.model.seq_len);
  settings.data_ranks = net.data_ranks();
  settings.micro_batches = config.data.global_batch / (config.data.micro_batch * net.data_ranks());
  settings.lr = config.optimizer.lr;
  settings.grad_clip = config.optimizer.grad_clip;
  const std::size_t rows = static_cast<std::size_t>(settings.micro_batch * settings.seq_len);
  std::vector<int> tokens(rows), targets(rows);
  // Every data-parallel rank its own sequences; a tensor group's ranks the same.
  auto fill_for = [&](std::int64_t step) {
    return [&, step](std::int64_t micro) {
      for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t k = i + rows * static_cast<std::size_t>(micro + 8 * net.data_rank() + 100 * step);
        tokens[i] = static_cast<int>((k * 7 + k / 5) % 64);
        targets[i] = static_cast<int>((k * 7 + 3) % 64);
      }
    };
  };

  double previous = 0;
  for (std::int64_t step = 0; step < 3; ++step) {
    // The forward passes' mean loss over the global batch, before the step changes the weights.
    double local = 0;
    for (std::int64_t micro = 0; micro < settings.micro_batches; ++micro) {
      fill_for(step)(micro);
      local += net.model().forward(net.strategy(), tokens.data(), targets.data(), settings.micro_batch,
                                   settings.seq_len);
    }
    const double expected = net.sum_over_ranks(local / static_cast<double>(settings.micro_batches * settings.data_ranks));

    settings.step = step + 1;
    const long waits_before = exec.waits();
    const StepOutcome outcome = train_step(net, settings, fill_for(step), tokens.data(), targets.data(), nullptr);
    EXPECT_EQ(exec.waits() - waits_before, 1) << "step " << step + 1;
    EXPECT_EQ(outcome.loss, expected) << "step " << step + 1;
    EXPECT_TRUE(outcome.finite());
    EXPECT_GT(outcome.grad_norm, 0.0);
    if (step > 0) {
      EXPECT_NE(outcome.loss, previous) << "the update changed nothing";
    }
    previous = outcome.loss;
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryStrategy, TrainStepReads,
    ::testing::Values(StepCase{"ddp", {"parallel.strategy=ddp"}},
                      StepCase{"zero1_bf16", {"parallel.strategy=zero1", "parallel.precision=bf16"}},
                      StepCase{"zero2_once", {"parallel.strategy=zero2", "parallel.grad_reduction=once"}},
                      StepCase{"zero2_every_bf16",
                               {"parallel.strategy=zero2", "parallel.grad_reduction=every_micro_batch",
                                "parallel.precision=bf16"}},
                      StepCase{"zero3_every", {"parallel.strategy=zero3", "parallel.grad_reduction=every_micro_batch"}},
                      StepCase{"hsdp", {"parallel.strategy=hsdp", "parallel.shard_group=1"}},
                      StepCase{"tensor2_zero3", {"parallel.strategy=zero3", "parallel.tensor=2"}}),
    [](const ::testing::TestParamInfo<StepCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace st
