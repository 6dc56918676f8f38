#pragma once
// A host backend whose layer kernels say that attention is flash attention, as a CUDA device's
// in bf16 do: a model built on it carves its activations as on such a device (a log-sum-exp per
// row kept, no T x T blocks), and its constructor checks the carving against activation_sizes.
// For that check only: the host kernels cannot run a model so carved (they need probabilities).
#include "exec/host_exec.hpp"
#include "exec/layer_kernels.hpp"
#include "host_exec_with_kernels.hpp"

namespace st::testing_support {

class FlashClaimingKernels final : public HostLayerKernels<float> {
 public:
  bool attention_uses_flash(int head_dim) const override { return st::attention_uses_flash(true, head_dim); }
};

class FlashCarvingExec final : public HostExecWithKernels<FlashClaimingKernels> {
 public:
  FlashCarvingExec() : HostExecWithKernels("host memory, flash attention's carving") {}
};

}  // namespace st::testing_support
