// sum_buffers (comm/communicator.hpp): the reduction every host collective runs. Its result must
// be, bit for bit, a copy of the first term followed by accumulate_buffer of each later term in
// order, whatever the number of terms (it adds several at once) and wherever a block ends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"

namespace st {
namespace {

// Values of mixed magnitudes and signs, so that adding in another order changes the bits.
template <class T>
std::vector<std::vector<T>> random_terms(std::size_t terms, std::size_t count, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<std::vector<T>> out(terms, std::vector<T>(count));
  for (auto& term : out)
    for (auto& x : term) {
      const double v = std::ldexp(mantissa(engine), exponent(engine));
      if constexpr (std::is_same_v<T, Bf16>) x = to_bf16(static_cast<float>(v));
      else x = static_cast<T>(v);
    }
  return out;
}

template <class T>
void expect_sum_in_order(DataType type) {
  for (std::size_t terms : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{2047}, std::size_t{2048}, std::size_t{5001}}) {
      const auto values = random_terms<T>(terms, count, static_cast<unsigned>(terms * 10007 + count));
      std::vector<T> expected = values[0];
      for (std::size_t t = 1; t < terms; ++t) accumulate_buffer(Buffer{expected.data(), count, type}, values[t].data(), count);

      std::vector<const void*> pointers;
      for (const auto& term : values) pointers.push_back(term.data());
      std::vector<T> apart(count);
      sum_buffers(Buffer{apart.data(), count, type}, pointers, count);
      EXPECT_EQ(std::memcmp(apart.data(), expected.data(), count * sizeof(T)), 0)
          << terms << " terms of " << count << " elements, into a buffer of its own";

      std::vector<T> first = values[0];  // into is the first term, as in the in-place all-reduce
      pointers[0] = first.data();
      sum_buffers(Buffer{first.data(), count, type}, pointers, count);
      EXPECT_EQ(std::memcmp(first.data(), expected.data(), count * sizeof(T)), 0)
          << terms << " terms of " << count << " elements, into the first term";
    }
  }
}

TEST(SumBuffers, EqualsAddingEachTermInOrderF32) { expect_sum_in_order<float>(DataType::f32); }
TEST(SumBuffers, EqualsAddingEachTermInOrderF64) { expect_sum_in_order<double>(DataType::f64); }
TEST(SumBuffers, EqualsAddingEachTermInOrderBf16) { expect_sum_in_order<Bf16>(DataType::bf16); }

}  // namespace
}  // namespace st
