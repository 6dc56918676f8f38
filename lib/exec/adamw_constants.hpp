#pragma once
// The constants of one AdamW update of a contiguous range: computed once per step on the host,
// then used by every element on the host or a device (exec/adamw_element.hpp).
namespace st {

struct AdamWConstants {
  float beta1 = 0, beta2 = 0;
  float grad_scale = 1;       // clipping: every gradient is multiplied by it first
  float decay_factor = 1;     // 1 - lr x weight decay (1 where the range is not decayed)
  float step_size = 0;        // lr / (1 - beta1^t)
  float inv_correction2 = 1;  // 1 / (1 - beta2^t)
  float eps = 0;
};

}  // namespace st
