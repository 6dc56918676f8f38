#include "model/rope.hpp"

#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "exec/host_llama_kernels.hpp"

namespace st {

std::vector<double> rope_inverse_frequencies(const ModelShape& shape) {
  std::vector<double> frequencies = kernels::rope_frequencies(static_cast<int>(shape.head_dim()), shape.rope_theta);
  if (shape.rope_scaling == RopeScaling::none) return frequencies;

  const double factor = shape.rope_factor, low = shape.rope_low_freq_factor, high = shape.rope_high_freq_factor;
  const auto original = static_cast<double>(shape.rope_original_positions);
  ST_REQUIRE(factor >= 1.0 && low > 0.0 && high > low && original > 0.0, "invalid llama3 rope scaling parameters");
  const double low_freq_wavelength = original / low, high_freq_wavelength = original / high;
  for (double& f : frequencies) {
    const double wavelength = 2.0 * std::numbers::pi / f;
    if (wavelength < high_freq_wavelength) continue;  // high frequencies: kept
    if (wavelength > low_freq_wavelength) {
      f /= factor;  // low frequencies: stretched by the factor
    } else {
      const double smooth = (original / wavelength - low) / (high - low);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
  }
  return frequencies;
}

}  // namespace st
