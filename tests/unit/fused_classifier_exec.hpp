#pragma once
// A host backend whose layer kernels fuse the classifier, as a CUDA device's in bf16 do: a model
// built on it stores its logits in bf16 and trains through the fused cross-entropy
// (LayerKernels::classifier_*), computed by the host reference (exec/classifier_reference.hpp).
// Everything else is the host's. So the models' fused path (the carving of bf16 logits, the loss
// and d(loss)/d(logits) in one pass, the scale in the head's backward, the vocabulary-parallel
// slices, decoding and probs() from bf16 logits) runs and is tested on the CPU.
#include "exec/host_exec.hpp"
#include "exec/layer_kernels.hpp"
#include "host_exec_with_kernels.hpp"

namespace st::testing_support {

class FusedClassifierKernels final : public HostLayerKernels<float> {
 public:
  bool fused_classifier() const override { return true; }
};

class FusedClassifierExec final : public HostExecWithKernels<FusedClassifierKernels> {
 public:
  FusedClassifierExec() : HostExecWithKernels("host, the fused classifier's reference") {}
};

}  // namespace st::testing_support
