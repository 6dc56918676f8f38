#pragma once
// A Llama's rotary frequencies from its shape: theta^(-2i/hs) for i < hs/2, rescaled as the
// shape's rope_scaling says. Hugging Face's "llama3" scaling (Llama 3.1 and 3.2) stretches the
// context a model was trained at (rope_original_positions) by rope_factor: frequencies whose
// wavelength exceeds original / low_freq_factor are divided by the factor, those below
// original / high_freq_factor are kept, and those between blend the two linearly in
// original / wavelength.
#include <vector>

#include "model/layout.hpp"

namespace st {

std::vector<double> rope_inverse_frequencies(const ModelShape& shape);

}  // namespace st
