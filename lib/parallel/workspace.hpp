#pragma once
// Buffers a strategy needs for a while: a gathered segment, a segment's gradients before they
// are reduced, a chunk on its way to an all-gather. Blocks come from the execution backend (host
// or device memory) and are kept and reused (returning them would page-fault them in again
// every step on the host, and call cudaMalloc inside the step on a device), so bytes() is what
// the pool holds: the high-water mark of what was in use at once.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "exec/exec.hpp"

namespace st {

template <class T>
class WorkspacePool {
 public:
  explicit WorkspacePool(Exec& exec) : exec_(exec) {}
  // A block of at least n elements, not zeroed.
  T* acquire(std::size_t n) {
    Block* best = nullptr;
    for (auto& block : blocks_)
      if (!block->in_use && block->size >= n && (!best || block->size < best->size)) best = block.get();
    if (!best) {
      blocks_.push_back(std::make_unique<Block>());
      best = blocks_.back().get();
      best->memory = exec_.allocate(n * sizeof(T));
      best->size = n;
    }
    best->in_use = true;
    return best->data();
  }
  void release(T* p) {
    for (auto& block : blocks_)
      if (block->data() == p) {
        ST_REQUIRE(block->in_use, "workspace block released twice");
        block->in_use = false;
        return;
      }
    ST_REQUIRE(false, "workspace block not from this pool");
  }
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto& block : blocks_) total += block->size * sizeof(T);
    return total;
  }

 private:
  struct Block {
    Memory memory;
    std::size_t size = 0;
    bool in_use = false;
    T* data() const { return memory.template as<T>().data(); }
  };
  Exec& exec_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace st
