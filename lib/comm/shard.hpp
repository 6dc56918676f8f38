#pragma once
// The one padding rule, shared by the communicators and (later) the sharded strategies and
// checkpoints: a buffer of n elements split over p parts is padded to p x ceil(n / p); part i
// owns elements [i c, (i + 1) c) of the padded buffer, c = ceil(n / p). Only the first n are real.
#include <algorithm>
#include <cstddef>

namespace st {

struct ShardRange {
  std::size_t begin = 0;  // first element part i owns (in the padded buffer)
  std::size_t end = 0;    // one past its last real element (begin <= end <= begin + chunk)
  std::size_t chunk = 0;  // elements per part, padding included
  std::size_t padded = 0; // parts x chunk
  std::size_t real() const { return end - begin; }
};

inline ShardRange shard_range(std::size_t n, int parts, int index) {
  const std::size_t p = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(index);
  const std::size_t chunk = (n + p - 1) / p;
  const std::size_t begin = i * chunk;
  return {begin, std::clamp(n, begin, begin + chunk), chunk, chunk * p};
}

}  // namespace st
