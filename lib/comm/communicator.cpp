#include "comm/communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.hpp"

namespace st {

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

namespace {
// out[i] = ((out[i] + t0[i]) + t1[i]) + ... over K terms (kStart: t0[i] + t1[i] + ..., out not
// read), for the n elements from lo: the K input streams are read side by side, so that the
// memory system keeps all of them in flight.
template <class T, std::size_t K, bool kStart>
void add_terms(T* out, const void* const* terms, std::size_t lo, std::size_t n) {
  const T* term[K];
  for (std::size_t k = 0; k < K; ++k) term[k] = static_cast<const T*>(terms[k]) + lo;
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    T sum = kStart ? term[0][i] : out[i] + term[0][i];
    for (std::size_t k = 1; k < K; ++k) sum += term[k][i];
    out[i] = sum;
  }
}

// Up to kMaxStreams terms at once (with the output, at most five streams read).
constexpr std::size_t kMaxStreams = 4;

template <class T, bool kStart>
void add_group(T* out, const void* const* terms, std::size_t k, std::size_t lo, std::size_t n) {
  switch (k) {
    case 1: add_terms<T, 1, kStart>(out, terms, lo, n); break;
    case 2: add_terms<T, 2, kStart>(out, terms, lo, n); break;
    case 3: add_terms<T, 3, kStart>(out, terms, lo, n); break;
    default: add_terms<T, kMaxStreams, kStart>(out, terms, lo, n); break;
  }
}

// The sum of one element's terms in order, as sum_buffers describes.
template <class T>
void sum_terms(T* into, std::span<const void* const> terms, std::size_t count) {
  const T* first = static_cast<const T*>(terms[0]);
  if (terms.size() == 1) {
    if (into != first) std::memmove(into, first, count * sizeof(T));
    return;
  }
  // Block by block, so that a block of the output stays in the closest cache while every term is
  // added: one read of each input and one write of the output from memory (a memcpy and then an
  // accumulate per term would read and write the output again for each). Within a block, up to
  // four terms are added in one pass: adding one term at a time reads one stream at a time, and
  // a core then keeps fewer reads in flight than memory can serve (docs/benchmarks.md,
  // "Reduce-scatter: several terms in one pass").
  constexpr std::size_t kBlock = 2048;
  const std::size_t blocks = (count + kBlock - 1) / kBlock, terms_count = terms.size();
#pragma omp parallel for schedule(static)
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t lo = b * kBlock, n = std::min(kBlock, count - lo);
    std::size_t done = std::min(kMaxStreams, terms_count);
    add_group<T, true>(into + lo, terms.data(), done, lo, n);
    for (; done < terms_count; done += kMaxStreams)
      add_group<T, false>(into + lo, terms.data() + done, std::min(kMaxStreams, terms_count - done), lo, n);
  }
}
}  // namespace

void sum_buffers(Buffer into, std::span<const void* const> terms, std::size_t count) {
  ST_REQUIRE(!terms.empty(), "sum_buffers needs a term");
  switch (into.type) {
    case DataType::f32: sum_terms(static_cast<float*>(into.data), terms, count); break;
    case DataType::f64: sum_terms(static_cast<double*>(into.data), terms, count); break;
    case DataType::bf16: {
      // Each addition rounded to bf16, as accumulate_buffer does term by term.
      if (into.data != terms[0]) std::memmove(into.data, terms[0], count * sizeof(Bf16));
      for (std::size_t t = 1; t < terms.size(); ++t) accumulate_buffer(into, terms[t], count);
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
