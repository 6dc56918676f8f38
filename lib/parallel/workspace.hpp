#pragma once
// Buffers a strategy needs for a while: a gathered segment, a segment's gradients before they
// are reduced, a chunk on its way to an all-gather. Blocks are kept and reused (returning them to
// the allocator would page-fault them in again every step), so bytes() is what the pool holds:
// the high-water mark of what was in use at once.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace st {

template <class T>
class WorkspacePool {
 public:
  // A block of at least n elements, not zeroed.
  T* acquire(std::size_t n) {
    Block* best = nullptr;
    for (auto& block : blocks_)
      if (!block->in_use && block->data.size() >= n && (!best || block->data.size() < best->data.size()))
        best = block.get();
    if (!best) {
      blocks_.push_back(std::make_unique<Block>());
      best = blocks_.back().get();
      best->data.resize(n);
    }
    best->in_use = true;
    return best->data.data();
  }
  void release(T* p) {
    for (auto& block : blocks_)
      if (block->data.data() == p) {
        ST_REQUIRE(block->in_use, "workspace block released twice");
        block->in_use = false;
        return;
      }
    ST_REQUIRE(false, "workspace block not from this pool");
  }
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto& block : blocks_) total += block->data.size() * sizeof(T);
    return total;
  }

 private:
  struct Block {
    std::vector<T> data;
    bool in_use = false;
  };
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace st
