#pragma once
// Model FLOPs utilisation: the model's FLOPs per second over a yardstick. On GPUs the yardstick is
// the device's datasheet dense peak at the run's precision (train/peak_flops.hpp), as other
// trainers print it, with the GEMM rate measured in the run beside it; on CPUs (and GPUs the
// table does not know) it is this job's measured matmul rate. The rate is measured once, before
// the run's buffers, on every rank at once (as they will compute in training), and the slowest
// rank's rate is the job's.
#include <mpi.h>

#include <optional>
#include <string>

#include "data/batches.hpp"
#include "deck/config.hpp"
#include "runtime/make_exec.hpp"
#include "train/peak_flops.hpp"

namespace st {

class MfuYardstick {
 public:
  // rate: measured FLOP/s of one rank; gpu: the device's GEMM (bf16: with bf16 inputs), else host
  // sgemm. peak: the GPU's datasheet peak, which MFU is then against (none: against `rate`).
  MfuYardstick(double rate, bool gpu, bool bf16, std::optional<PeakFlops> peak = std::nullopt)
      : rate_(rate), gpu_(gpu), bf16_(bf16), peak_(std::move(peak)) {}

  // The rate on the model's widest matmul (micro-batch x seq_len rows, d_model -> 4 d_model):
  // the device's GEMM at the run's precision, or sgemm on the host with the run's threads.
  // Collective over comm (raw MPI: it runs before the run's communicators exist).
  static MfuYardstick measure(const Execution& execution, const BatchPlan& batch_plan, const ModelConfig& model, bool bf16,
                              MPI_Comm comm);

  double rate() const { return rate_; }
  const std::optional<PeakFlops>& peak() const { return peak_; }
  double mfu(double flops_per_second) const { return flops_per_second / (peak_ ? peak_->flops : rate_); }
  // Where MFU is against a datasheet peak: the model's rate over the measured GEMM rate, printed
  // beside it; 0 where MFU is against the measured rate already.
  double of_measured(double flops_per_second) const { return peak_ ? flops_per_second / rate_ : 0.0; }
  // "123.4 GFLOP/s per rank (GPU GEMM, bf16 inputs)", for the settings table.
  std::string description() const;
  // What MFU is against, for the settings table: "989.0 TFLOP/s per GPU, the datasheet peak
  // (H200 SXM, bf16 dense)", or the measured rate.
  std::string yardstick_description() const;
  // The first time MFU exceeds 100%: the note that says why (the yardstick was measured while
  // something else ran) and which figure to trust; "" otherwise and every time after.
  std::string note_for(double mfu);

 private:
  double rate_;
  bool gpu_, bf16_;
  std::optional<PeakFlops> peak_;
  bool noted_ = false;
};

}  // namespace st
