#pragma once
// What rank 0 prints: the settings table before step 0 and the per-step line (and its metrics).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "deck/config.hpp"

namespace st {

// Every deck key with its value and where it came from, then derived facts (name, value).
std::string settings_table(const Config& config, const std::vector<std::pair<std::string, std::string>>& derived);

struct StepRecord {
  std::int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0, tokens_per_second = 0, mfu = 0;
  double exposed_comm_seconds = 0;  // of `seconds`, spent waiting for communication
  std::uint64_t memory_bytes = 0;   // model state + workspace + activations of this rank
  std::uint64_t comm_intra_bytes = 0, comm_inter_bytes = 0;  // sent by this rank in the step
  std::uint64_t comm_tensor_bytes = 0;  // of comm_intra_bytes, sent within the tensor group
  std::uint64_t comm_pipeline_bytes = 0;  // sent to the neighbouring pipeline stages (point to point)
  double elapsed_seconds = 0;  // since this run's first step began (evaluations, samples, checkpoints included)
  double eta_seconds = 0;      // the steps left at the pace so far
  // Where MFU is against a GPU's datasheet peak: the model's rate over the GEMM rate measured in
  // the run, printed beside MFU; 0: not printed (MFU is against the measured rate itself).
  double mfu_of_measured_gemm = 0;
  std::int64_t tokens_seen = 0;  // training tokens read since step 0, this step's included
  // Measured, not planned: this rank's peak (the process's resident set on CPUs, the device
  // memory in use on GPUs), for metrics.jsonl; and for the step line the largest rank's peak and
  // its share of what a rank has (the GPU's memory, or the node's divided by its ranks; 0: not known).
  std::uint64_t peak_bytes = 0;
  std::uint64_t largest_peak_bytes = 0;
  double peak_share = 0;
};
// "step 50/900 | loss 2.3456 | lr 2.0e-03 | norm 0.412 | 151.2 ms | 13544 tok/s | MFU 41.2% |
// mem 152 MiB 2% | comm 7.07 MiB, 1.2 ms exposed | ETA 2m 15s": under 160 characters in the
// usual case (no tensor group or second node), so it does not wrap.
std::string step_line(const StepRecord& r);
// The step's metrics.jsonl line ("kind": "train"); a number that is not finite (a diverged loss) is null.
nlohmann::ordered_json step_metrics(const StepRecord& r);


}  // namespace st
