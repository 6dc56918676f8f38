#include "comm/communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.hpp"

namespace st {

Memory Memory::private_memory(std::size_t bytes) {
  // Cache-line aligned and zeroed, like the shared regions.
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* data = std::aligned_alloc(kAlign, rounded);
  if (!data) throw std::bad_alloc();
  std::memset(data, 0, rounded);
  return Memory(std::shared_ptr<void>(data, std::free), data, bytes);
}

void require_reduce_scatter_shapes(const Buffer& input, const Buffer& output, int size) {
  ST_REQUIRE(input.type == output.type, "reduce_scatter: input and output element types differ");
  ST_REQUIRE(input.count == output.count * static_cast<std::size_t>(size),
             "reduce_scatter: input must hold size() x output elements (pad with shard_range)");
}

void require_all_gather_shapes(const Buffer& input, const Buffer& output, int size) {
  ST_REQUIRE(input.type == output.type, "all_gather: input and output element types differ");
  ST_REQUIRE(output.count == input.count * static_cast<std::size_t>(size),
             "all_gather: output must hold size() x input elements");
}

void scale_buffer(Buffer b, double factor) {
  switch (b.type) {
    case DataType::f32: {
      auto* x = static_cast<float*>(b.data);
      const float f = static_cast<float>(factor);
#pragma omp parallel for simd schedule(static)
      for (std::size_t i = 0; i < b.count; ++i) x[i] *= f;
      break;
    }
    case DataType::f64: {
      auto* x = static_cast<double*>(b.data);
      for (std::size_t i = 0; i < b.count; ++i) x[i] *= factor;
      break;
    }
    case DataType::bf16: {
      auto* x = static_cast<Bf16*>(b.data);
      const float f = static_cast<float>(factor);
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < b.count; ++i) x[i] = to_bf16(to_float(x[i]) * f);
      break;
    }
  }
}

void accumulate_buffer(Buffer into, const void* from, std::size_t count) {
  switch (into.type) {
    case DataType::f32: {
      auto* x = static_cast<float*>(into.data);
      const auto* y = static_cast<const float*>(from);
#pragma omp parallel for simd schedule(static)
      for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
      break;
    }
    case DataType::f64: {
      auto* x = static_cast<double*>(into.data);
      const auto* y = static_cast<const double*>(from);
      for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
      break;
    }
    case DataType::bf16: {
      auto* x = static_cast<Bf16*>(into.data);
      const auto* y = static_cast<const Bf16*>(from);
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < count; ++i) x[i] = to_bf16(to_float(x[i]) + to_float(y[i]));
      break;
    }
  }
}

void Communicator::copy_bytes(void* to, const void* from, std::size_t bytes, const void* /*ready*/) {
  if (bytes && to != from) std::memmove(to, from, bytes);
}

void Communicator::zero_bytes(void* data, std::size_t bytes, const void* /*ready*/) {
  if (bytes) std::memset(data, 0, bytes);
}

}  // namespace st
