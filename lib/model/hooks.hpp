#pragma once
// Points in a forward/backward pass where a parallel strategy acts on one parameter segment
// (gather before use, release after, reduce gradients once they are final). The model calls
// them; it does not know what they do.
#include <cstddef>

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

}  // namespace st
