#pragma once
// Deterministic random numbers that do not depend on the standard library's implementation,
// so a seed means the same run with any compiler and on any number of ranks.
#include <cmath>
#include <cstdint>
#include <string_view>

namespace st {

// SplitMix64: a counter-based mix; mix(seed, a, b) is a pure function of its inputs.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline std::uint64_t mix(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

// FNV-1a: a stable hash of a name, to give each named thing its own stream.
inline std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// A stream of uniform doubles in [0, 1) and standard normals (Box-Muller).
class NormalStream {
 public:
  NormalStream(std::uint64_t seed, std::uint64_t stream) : state_(mix(seed, stream)) {}
  double uniform() { return static_cast<double>(next_bits() >> 11) * 0x1.0p-53; }
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
  std::uint64_t next_bits() { return splitmix64(state_++); }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace st
