#pragma once
// The whole model's gradient against central finite differences, parameter by parameter, in
// double precision: shared by the GPT-2 and Llama tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace st {

// Runs forward and backward on (tokens, targets) over B x T, then compares every gradient with
// (loss(p + h) - loss(p - h)) / 2h. Central differences with h = 1e-6 leave a truncation error
// near 1e-7 of the largest gradient of a tensor; a wrong gradient is off by far more. Each
// tensor must receive some gradient. Returns the analytic gradients.
inline std::vector<double> expect_gradients_match_finite_differences(Model<double>& model, std::vector<double>& params,
                                                                     const std::vector<int>& tokens,
                                                                     const std::vector<int>& targets, int B, int T,
                                                                     const std::string& label) {
  std::vector<double> grads(params.size(), 0.0);
  model.forward(params, tokens.data(), targets.data(), B, T);
  model.backward(params, grads, 1.0);
  const double h = 1e-6;
  for (const TensorSlot* t : model.layout().all_tensors()) {
    double worst = 0, norm = 0;
    for (std::size_t i = t->offset; i < t->offset + t->size; ++i) {
      const double keep = params[i];
      params[i] = keep + h;
      const double up = model.forward(params, tokens.data(), targets.data(), B, T);
      params[i] = keep - h;
      const double down = model.forward(params, tokens.data(), targets.data(), B, T);
      params[i] = keep;
      const double numeric = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(numeric - grads[i]));
      norm = std::max(norm, std::abs(numeric));
    }
    EXPECT_LT(worst, 1e-6 * std::max(1.0, norm)) << t->name << " (" << label << ")";
    EXPECT_GT(norm, 0.0) << t->name << " (" << label << "): no gradient reaches it";
  }
  return grads;
}

}  // namespace st
