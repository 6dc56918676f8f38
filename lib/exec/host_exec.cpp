#include "exec/host_exec.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "exec/adamw_element.hpp"
#include "exec/ordered_sum.hpp"

namespace st {

namespace {
inline double as_double(float x) { return x; }
inline double as_double(double x) { return x; }
inline double as_double(Bf16 x) { return to_float(x); }
}  // namespace

std::string HostExec::description() const {
  return "cpu: " + std::to_string(omp_get_max_threads()) + " OpenMP thread(s) per rank";
}

void HostExec::zero(void* data, std::size_t bytes) {
  if (bytes) std::memset(data, 0, bytes);
}

void HostExec::copy(void* to, const void* from, std::size_t bytes) {
  if (bytes && to != from) std::memmove(to, from, bytes);
}

void HostExec::convert(Buffer to, Buffer from) {
  ST_REQUIRE(to.count == from.count, "convert: buffers differ in length");
  if (to.type == from.type) return copy(to.data, from.data, to.bytes());
  ST_REQUIRE(to.type != DataType::f64 && from.type != DataType::f64, "convert: f32 and bf16 only");
  const std::size_t n = to.count;
  if (to.type == DataType::bf16) {
    Bf16* out = static_cast<Bf16*>(to.data);
    const float* in = static_cast<const float*>(from.data);
    for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
  } else {
    float* out = static_cast<float*>(to.data);
    const Bf16* in = static_cast<const Bf16*>(from.data);
    for (std::size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
  }
}

void HostExec::accumulate(Buffer into, const float* from) {
  const std::size_t n = into.count;
  if (into.type == DataType::bf16) {
    Bf16* out = static_cast<Bf16*>(into.data);
    for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(to_float(out[i]) + from[i]);
  } else {
    ST_REQUIRE(into.type == DataType::f32, "accumulate: f32 or bf16 only");
    float* out = static_cast<float*>(into.data);
    for (std::size_t i = 0; i < n; ++i) out[i] += from[i];
  }
}

double HostExec::sum_squares(Buffer values) {
  // One loop per element type, so the type is not decided per element.
  auto sum_of = [n = values.count](const auto* x) {
    // Blocks of 4096 squares: a block's sum is cheap to keep and long enough to be worth a thread.
    return ordered_parallel_sum(n, 4096, [x](std::size_t i) {
      const double v = as_double(x[i]);
      return v * v;
    });
  };
  switch (values.type) {
    case DataType::f32: return sum_of(static_cast<const float*>(values.data));
    case DataType::bf16: return sum_of(static_cast<const Bf16*>(values.data));
    case DataType::f64: return sum_of(static_cast<const double*>(values.data));
  }
  return 0;
}

void HostExec::adamw(const AdamWConstants& c, float* params, const float* grads, float* m, float* v, std::size_t n) {
  const std::ptrdiff_t count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < count; ++i)
    adamw_element(params[i], grads[i], m[i], v[i], c.beta1, c.beta2, c.grad_scale, c.decay_factor, c.step_size,
                  c.inv_correction2, c.eps);
}

Exec& host_exec() {
  static HostExec exec;
  return exec;
}

}  // namespace st
