#pragma once
// The constants of AdamW: computed once per step on the host, then used by every element on the
// host or a device (exec/adamw_element.hpp).
#include <cstdint>

namespace st {

// One contiguous range (the per-range loop of AdamW::update, the reference).
struct AdamWConstants {
  float beta1 = 0, beta2 = 0;
  float grad_scale = 1;       // clipping: every gradient is multiplied by it first
  float decay_factor = 1;     // 1 - lr x weight decay (1 where the range is not decayed)
  float step_size = 0;        // lr / (1 - beta1^t)
  float inv_correction2 = 1;  // 1 / (1 - beta2^t)
  float eps = 0;
};

// The update of everything a rank owns in one launch (Exec::adamw): one set of constants, a table
// of tiles saying where each run of elements lies in the parameter, gradient and Adam buffers and
// whether it decays, and the clipping factor read from the backend's memory (StepScalars), so the
// host need not know the gradient norm before queueing the update.
struct AdamWStepConstants {
  float beta1 = 0, beta2 = 0;
  float step_size = 0, inv_correction2 = 1, eps = 0;
  float decay_factor[2] = {1, 1};  // [tile.decay]: [0] not decayed, [1] 1 - lr x weight decay
};

struct AdamWTile {
  std::uint64_t param = 0, grad = 0, state = 0;  // first element in params, in grads, in m and v
  std::uint32_t count = 0;
  std::uint32_t decay = 0;  // 0 or 1
};

// A tile holds at most this many elements: a device block's work (one block per tile), and a
// host thread's.
inline constexpr std::uint32_t kAdamWTileElements = 1u << 16;

}  // namespace st
