#pragma once
// A parallel sum whose result does not depend on the order threads finish in. OpenMP's
// reduction(+) combines the threads' partial sums in arrival order, so with more than two threads
// the same loss or gradient norm can differ in its last bits from run to run (seen on 16 cores);
// here each thread's partial sum is kept and they are added in thread order.
#include <omp.h>

#include <cstddef>
#include <vector>

namespace st {

template <class Term>
double ordered_parallel_sum(std::size_t n, Term&& term) {
  const int teams = omp_get_max_threads();
  std::vector<double> partial(static_cast<std::size_t>(teams), 0.0);
#pragma omp parallel num_threads(teams)
  {
    double sum = 0;
#pragma omp for schedule(static)
    for (std::size_t i = 0; i < n; ++i) sum += term(i);
    partial[static_cast<std::size_t>(omp_get_thread_num())] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace st
