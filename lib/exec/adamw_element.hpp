#pragma once
// One element of AdamW, written once for the host loop and the CUDA kernel, so the CPU tests
// cover the arithmetic the device runs.
#include <cmath>

#include "core/host_device.hpp"

namespace st {

ST_HOST_DEVICE inline void adamw_element(float& param, float grad, float& m, float& v, float beta1, float beta2,
                                         float grad_scale, float decay_factor, float step_size, float inv_correction2,
                                         float eps) {
  const float g = grad * grad_scale;
  m = beta1 * m + (1.0f - beta1) * g;
  v = beta2 * v + (1.0f - beta2) * g * g;
  param = param * decay_factor - step_size * m / (sqrtf(v * inv_correction2) + eps);
}

}  // namespace st
