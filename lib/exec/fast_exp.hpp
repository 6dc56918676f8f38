#pragma once
// A float e^x that vectorises, for the host kernels' element-wise loops (softmax, SiLU): the
// library call does not, and these loops run over every attention score and MLP activation.
#include <bit>
#include <cstdint>

namespace st::kernels {

// e^x for x <= 0 (softmax's shifted scores) as 2^n e^r: n = round(x / ln 2), r = x - n ln 2 in
// [-ln 2 / 2, ln 2 / 2] (ln 2 in two parts, so r is exact), e^r by Cephes' degree-6 expf
// polynomial, 2^n written into the exponent bits. Relative error below 3e-7 (checked in tests).
// Unlike the library call it vectorises: softmax evaluates it on every causal score.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;           // e^-87 = 1.6e-38: the smallest normal floats (NaN stays NaN)
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23: adding and subtracting it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t exponent = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(exponent);
}

}  // namespace st::kernels
