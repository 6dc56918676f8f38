#pragma once
// Watches each step's loss and gradient norm for divergence: a value that is not finite (the
// update must be skipped: one NaN in the gradients makes every weight NaN), and a loss far above
// its recent average (a spike: the run goes on, and the log says so).
#include <cstddef>
#include <deque>
#include <string>

namespace st {

class LossWatch {
 public:
  // A spike: a loss at least kSpikeRatio times the mean of the last kWindow finite losses and at
  // least kSpikeNats above it (so a small loss's noise is not one), once kWindow are known.
  static constexpr std::size_t kWindow = 20;
  static constexpr double kSpikeRatio = 1.5;
  static constexpr double kSpikeNats = 0.5;

  struct Verdict {
    bool finite = true;      // loss and gradient norm are finite numbers
    double spike_ratio = 0;  // > 0: a spike, this many times the recent mean
    double recent_mean = 0;  // of the window before this step (when spike_ratio > 0)
    // "loss 4.2100 is 2.0x the mean of the last 20 steps (2.1000)", or "loss nan, gradient norm
    // nan: not finite" ("" when neither).
    std::string warning;
  };
  // The verdict on one step's values; a finite loss joins the window.
  Verdict observe(double loss, double grad_norm);

 private:
  std::deque<double> recent_;  // the last kWindow finite losses
};

}  // namespace st
