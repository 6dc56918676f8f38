#pragma once
// The training driver: one loop over steps with named phases (micro-batches, gradient
// reduction, clipping, update), and "once in a while" blocks for logging, validation and samples.
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/stack.hpp"
#include "comm/world.hpp"
#include "data/batches.hpp"
#include "data/dataset.hpp"
#include "deck/config.hpp"
#include "model/model.hpp"
#include "parallel/strategy.hpp"
#include "runtime/make_exec.hpp"
#include "train/checkpointer.hpp"
#include "train/loss_watch.hpp"
#include "train/memory_meter.hpp"
#include "train/mfu.hpp"
#include "train/run_data.hpp"
#include "train/run_dir.hpp"
#include "train/sharded_model.hpp"
#include "train/stop_signals.hpp"

namespace st {

struct TrainSummary {
  double first_loss = 0, last_loss = 0, last_val_loss = 0;
  double val_unigram_entropy = 0;  // nats: the loss of a context-free model on the validation part
  std::int64_t steps = 0;
  int stop_signal = 0;  // nonzero: stopped by this signal after writing a checkpoint
  bool diverged = false;  // stopped at a loss or gradient norm that is not finite, after a checkpoint of the step before
};

class Trainer {
 public:
  // `device`: where this rank computes (choose_device, collective), decided once by the caller,
  // which also plans with it.
  Trainer(const Config& config, World& world, const DeviceChoice& device);
  ~Trainer();
  TrainSummary run();
  // The full fp32 parameters (master copy in mixed precision) as raw little-endian float32 in
  // flat-layout order, written by rank 0. Collective.
  void save_params(const std::string& path);

  // The derived settings (world, batches, parameters, threads) for the settings table.
  std::vector<std::pair<std::string, std::string>> derived_settings() const;

 private:
  void say(const std::string& line);  // rank 0: stdout and train.log
  double train_step(std::int64_t step);
  double validation_loss();
  void print_sample(std::int64_t step);
  std::string memory_line(const std::string& when);  // collective
  // This rank's measured peak: the process's resident set (CPU), the device memory in use (GPU).
  std::uint64_t measured_peak() const;
  void save_checkpoint(std::int64_t steps_done);
  void export_model();  // run.export_at_end; collective
  void report_checkpoint(const Checkpointer::Done& done);
  void write_traces();

  const Config& config_;
  World& world_;
  int threads_ = 1;
  RunData data_;
  BatchPlan batch_plan_;
  ModelShape shape_;
  Timeline timeline_;  // before net_: its communicators and strategy trace into it
  std::unique_ptr<ShardedModel> net_;  // the model, its strategy, where it computes
  std::unique_ptr<RunDirectory> run_dir_;  // created once the deck, data and batches check out
  std::unique_ptr<BatchLoader> train_loader_, val_loader_;
  std::vector<int> tokens_, targets_;
  std::optional<MfuYardstick> yardstick_;  // measured first thing, before the run's buffers
  bool finished_ = false;  // resumed from a checkpoint at or past run.steps: nothing to do
  std::optional<MemoryMeter> memory_;  // made before the run's buffers, which it does not count
  double last_grad_norm_ = 0, last_lr_ = 0;
  LossWatch loss_watch_;
  std::int64_t start_step_ = 0;
  std::int64_t tokens_seen_ = 0;  // training tokens read since step 0, over every resume (checkpoints keep it)
  std::string checkpoint_dir_;
  std::string run_id_;  // kept by every checkpoint this run writes (retention deletes only this run's)
  std::set<std::string> left_alone_said_;  // another run's checkpoints the log has named
  std::vector<std::string> resume_notes_;  // said once the run directory is open
  std::string blas_mismatch_;              // ranks whose BLAS picked other kernels: a warning, or ""
  std::unique_ptr<StopSignals> signals_;
  std::unique_ptr<Checkpointer> checkpointer_;
};

}  // namespace st
