#include "core/buffer.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace st {

Memory Memory::private_memory(std::size_t bytes) {
  // Cache-line aligned and zeroed, like the shared regions.
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* data = std::aligned_alloc(kAlign, rounded);
  if (!data) throw std::bad_alloc();
  std::memset(data, 0, rounded);
  return Memory(std::shared_ptr<void>(data, std::free), data, bytes);
}

}  // namespace st
