#pragma once
// Model FLOPs utilisation: the model's FLOPs per second over a yardstick, this job's measured
// matmul rate. The yardstick is measured once, before the run's buffers, on every rank at once
// (as they will compute in training), and the slowest rank's rate is the job's.
#include <mpi.h>

#include <string>

#include "data/batches.hpp"
#include "deck/config.hpp"
#include "exec/make_exec.hpp"

namespace st {

class MfuYardstick {
 public:
  // rate: FLOP/s of one rank; gpu: the device's GEMM (bf16: with bf16 inputs), else host sgemm.
  MfuYardstick(double rate, bool gpu, bool bf16) : rate_(rate), gpu_(gpu), bf16_(bf16) {}

  // The rate on the model's widest matmul (micro-batch x seq_len rows, d_model -> 4 d_model):
  // the device's GEMM at the run's precision, or sgemm on the host with the run's threads.
  // Collective over comm (raw MPI: it runs before the run's communicators exist).
  static MfuYardstick measure(const Execution& execution, const BatchPlan& plan, const ModelConfig& model, bool bf16,
                              MPI_Comm comm);

  double rate() const { return rate_; }
  double mfu(double flops_per_second) const { return flops_per_second / rate_; }
  // "123.4 GFLOP/s per rank (GPU GEMM, bf16 inputs)", for the settings table.
  std::string description() const;
  // The first time MFU exceeds 100%: the note that says why (the yardstick was measured while
  // something else ran) and which figure to trust; "" otherwise and every time after.
  std::string note_for(double mfu);

 private:
  double rate_;
  bool gpu_, bf16_;
  bool noted_ = false;
};

}  // namespace st
