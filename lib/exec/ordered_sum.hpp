#pragma once
// A parallel sum whose bits depend on neither the thread count nor the order threads finish in,
// so that a run continues bit for bit on a node with other cores, under another launcher or with
// another run.threads (OpenMP's reduction(+) adds per-thread partial sums in arrival order, and
// per-thread partial sums would still depend on how many threads split the terms). The terms are
// cut into fixed blocks of `block` terms; each block is added in order, then the blocks' sums in
// order. With block = 1 the result is the plain sequential sum, bit for bit: the choice for
// costly terms (a row's softmax) where keeping one double per term is cheap.
#include <omp.h>

#include <cstddef>
#include <vector>

namespace st {

template <class Term>
double ordered_parallel_sum(std::size_t n, std::size_t block, Term&& term) {
  const std::size_t blocks = (n + block - 1) / block;
  std::vector<double> partial(blocks, 0.0);
  const auto count = static_cast<std::ptrdiff_t>(blocks);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t b = 0; b < count; ++b) {
    const std::size_t begin = static_cast<std::size_t>(b) * block;
    const std::size_t end = begin + block < n ? begin + block : n;
    double sum = 0;
    for (std::size_t i = begin; i < end; ++i) sum += term(i);
    partial[static_cast<std::size_t>(b)] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace st
