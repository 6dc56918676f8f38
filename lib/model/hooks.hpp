#pragma once
// Points in a forward/backward pass where a parallel strategy acts on one parameter segment
// (gather before use, release after, reduce gradients once they are final), and where the model
// finds a segment's parameters and gradients. The model calls them; it does not know what they do.
#include <cstddef>
#include <span>

#include "core/bf16.hpp"
#include "model/layout.hpp"

namespace st {

class SegmentHooks {
 public:
  virtual ~SegmentHooks() = default;
  virtual void before_forward(std::size_t /*segment*/) {}
  virtual void after_forward(std::size_t /*segment*/) {}
  virtual void before_backward(std::size_t /*segment*/) {}
  // The segment's gradients for this micro-batch are complete.
  virtual void grad_ready(std::size_t /*segment*/) {}
};

// Where a segment's parameters and gradients are while the model uses them. A sharded strategy
// gathers a segment into a buffer of its own, so the model asks per segment, and only between
// the hooks: params(s) from before_forward(s) to after_forward(s) and from before_backward(s)
// to grad_ready(s); grads(s) from before_backward(s) to grad_ready(s). Both point at the
// segment's first element, laid out as in the flat layout. Parameters are S, the model's storage
// (bf16 for bf16 storage), gradients Real (LayerKernels<Real, S>).
template <class Real, class S = Real>
class SegmentBuffers : public SegmentHooks {
 public:
  virtual const S* params(std::size_t segment) = 0;
  virtual Real* grads(std::size_t segment) = 0;
  // The segment's parameters in bf16, where these buffers keep them so and were asked to lend
  // them (a strategy in mixed precision for a model with bf16 storage, ShardingSettings::
  // bf16_params): the model reads them without an fp32 copy. Null otherwise: params() it is.
  virtual const Bf16* bf16_params(std::size_t /*segment*/) { return nullptr; }
};

// The whole model in two flat buffers (one process, tests, sampling): every segment is always
// there. Hooks, if given, are passed on.
template <class Real, class S = Real>
class FlatBuffers final : public SegmentBuffers<Real, S> {
 public:
  FlatBuffers(const ParamLayout& layout, std::span<const S> params, std::span<Real> grads = {},
              SegmentHooks* hooks = nullptr)
      : layout_(layout), params_(params), grads_(grads), hooks_(hooks) {}
  const S* params(std::size_t s) override { return params_.data() + layout_.segments()[s].offset; }
  Real* grads(std::size_t s) override { return grads_.data() + layout_.segments()[s].offset; }
  void before_forward(std::size_t s) override { if (hooks_) hooks_->before_forward(s); }
  void after_forward(std::size_t s) override { if (hooks_) hooks_->after_forward(s); }
  void before_backward(std::size_t s) override { if (hooks_) hooks_->before_backward(s); }
  void grad_ready(std::size_t s) override { if (hooks_) hooks_->grad_ready(s); }

 private:
  const ParamLayout& layout_;
  std::span<const S> params_;
  std::span<Real> grads_;
  SegmentHooks* hooks_;
};

}  // namespace st
