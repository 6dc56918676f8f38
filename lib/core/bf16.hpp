#pragma once
// bfloat16: the top 16 bits of an IEEE float. Conversion from float rounds to nearest, ties to
// even (NaN stays NaN), as the hardware does.
#include <cstdint>
#include <cstring>

namespace st {

struct Bf16 {
  std::uint16_t bits = 0;
};

inline float to_float(Bf16 x) {
  const std::uint32_t wide = static_cast<std::uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

inline Bf16 to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return {static_cast<std::uint16_t>((u >> 16) | 0x40)};
  u += 0x7FFFu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(u >> 16)};
}

}  // namespace st
