#pragma once
// n values drawn from the standard normal distribution, the same for the same seed.
#include <cstddef>
#include <random>
#include <vector>

namespace st::testing_support {

template <class R>
std::vector<R> random_values(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<R> v(n);
  for (auto& x : v) x = static_cast<R>(normal(rng));
  return v;
}

}  // namespace st::testing_support
