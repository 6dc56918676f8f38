#pragma once
// The scalars of one training step, kept in the backend's memory so that a device sums, reduces
// and applies them without the host waiting: kernels add each micro-batch's mean loss and each
// segment's squared gradient norm into them, collectives sum them over the ranks in place, the
// clipping factor is derived from them where AdamW reads it, and the host reads the block once,
// for the step's log line.
#include <cmath>

#include "core/host_device.hpp"

namespace st {

struct StepScalars {
  double loss = 0;               // the sum of micro-batch mean losses; then the step's loss
  double grad_norm_squared = 0;  // of the whole reduced gradient
  float grad_scale = 1;          // clipping's factor for AdamW; NaN: leave every weight as it is
};

// Finite: neither infinite nor NaN (x - x is NaN for both). Written out because host and device
// share it and <cmath>'s std::isfinite is not device code.
ST_HOST_DEVICE inline bool is_finite_value(double x) { return x - x == 0.0; }

// Clipping's factor: clip / (norm + 1e-6) where the norm exceeds clip > 0, else 1. NaN where the
// loss or the norm is not finite: the update is skipped (the same on every rank: both are sums
// over the ranks) and the run stops after the step.
ST_HOST_DEVICE inline float clip_factor(double loss, double grad_norm_squared, double clip) {
  const double norm = sqrt(grad_norm_squared);
  if (!is_finite_value(loss) || !is_finite_value(norm)) return NAN;
  return static_cast<float>(clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1.0);
}

}  // namespace st
