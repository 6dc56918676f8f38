#include "train/loss_watch.hpp"

#include <cmath>
#include <cstdio>

#include "core/text.hpp"

namespace st {

LossWatch::Verdict LossWatch::observe(double loss, double grad_norm) {
  Verdict v;
  char text[200];
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    v.finite = false;
    v.warning = "loss " + format_fixed(loss, 4) + ", gradient norm " + format_fixed(grad_norm, 4) + ": not finite";
    return v;
  }
  if (recent_.size() == kWindow) {
    double sum = 0;
    for (double x : recent_) sum += x;
    const double mean = sum / static_cast<double>(kWindow);
    if (mean > 0 && loss >= kSpikeRatio * mean && loss - mean >= kSpikeNats) {
      v.spike_ratio = loss / mean;
      v.recent_mean = mean;
      std::snprintf(text, sizeof text, "loss %.4f is %.1fx the mean of the last %zu steps (%.4f)", loss, v.spike_ratio,
                    kWindow, mean);
      v.warning = text;
    }
    recent_.pop_front();
  }
  recent_.push_back(loss);
  return v;
}

}  // namespace st
