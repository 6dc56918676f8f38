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
inline float as_float(float x) { return x; }
inline float as_float(Bf16 x) { return to_float(x); }
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
  if (to.type == DataType::bf16) store_bf16(static_cast<Bf16*>(to.data), static_cast<const float*>(from.data), to.count);
  else widen_bf16(static_cast<float*>(to.data), static_cast<const Bf16*>(from.data), to.count);
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

double HostExec::sum_squares(Buffer values) const {
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

void HostExec::add_sum_squares(double* total, std::span<const Buffer> parts) {
  double sum = 0;
  for (const Buffer& part : parts) sum += sum_squares(part);
  *total += sum;
}

void HostExec::set_clip_factor(StepScalars* scalars, double clip) {
  scalars->grad_scale = clip_factor(scalars->loss, scalars->grad_norm_squared, clip);
}

namespace {
template <class G>
void adamw_tiles(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params,
                 const G* grads, float* m, float* v, float grad_scale) {
  const auto count = static_cast<std::ptrdiff_t>(tile_count);
  // Tiles differ in size (a bias is one short tile), so threads take them as they come; every
  // element's arithmetic is its own, so the result does not depend on which thread takes which.
#pragma omp parallel for schedule(dynamic, 1)
  for (std::ptrdiff_t t = 0; t < count; ++t) {
    const AdamWTile& tile = tiles[t];
    const float decay_factor = c.decay_factor[tile.decay];
    float* p = params + tile.param;
    const G* g = grads + tile.grad;
    float* mt = m + tile.state;
    float* vt = v + tile.state;
    for (std::uint32_t i = 0; i < tile.count; ++i)
      adamw_element(p[i], as_float(g[i]), mt[i], vt[i], c.beta1, c.beta2, grad_scale, decay_factor, c.step_size,
                    c.inv_correction2, c.eps);
  }
}
}  // namespace

void HostExec::adamw(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params,
                     Buffer grads, float* m, float* v, const float* grad_scale) {
  const float scale = *grad_scale;
  if (scale != scale) return;  // NaN: a loss or gradient norm that is not finite
  switch (grads.type) {
    case DataType::f32:
      return adamw_tiles(c, tiles, tile_count, params, static_cast<const float*>(grads.data), m, v, scale);
    case DataType::bf16:
      return adamw_tiles(c, tiles, tile_count, params, static_cast<const Bf16*>(grads.data), m, v, scale);
    case DataType::f64: break;
  }
  throw Error("adamw: gradients are f32 or bf16");
}

Exec& host_exec() {
  static HostExec exec;
  return exec;
}

}  // namespace st
