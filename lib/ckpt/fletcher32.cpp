#include "ckpt/fletcher32.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace st::fletcher32 {
namespace {

constexpr std::uint64_t kModulus = 65535;
// Sums are taken over blocks of 128 words: within a block the weighted sum fits 32 bits even
// for the biased signed words the vector kernel multiplies.
constexpr std::size_t kBlockWords = 128;
// Block results are added in 64 bits and reduced this often (each block adds < 2^40).
constexpr std::size_t kReduceEvery = 4096;

struct Accumulator {
  std::uint64_t sum1 = 0, sum2 = 0;
  std::uint32_t any = 0;
  void reduce() {
    sum1 %= kModulus;
    sum2 %= kModulus;
  }
  // A block with word sum `a` and weighted sum `b` (weights 128 .. 1), followed by `following` words.
  void add_block(std::uint64_t a, std::uint64_t b, std::uint64_t following) {
    sum1 += a;
    sum2 += b + (following % kModulus) * a;
  }
};

inline std::uint32_t word_at(const unsigned char* p, std::size_t j) {
  return (static_cast<std::uint32_t>(p[2 * j]) << 8) | p[2 * j + 1];
}

// Words [0, count) at p as one run followed by `following` words (any count, scalar).
void add_words(const unsigned char* p, std::size_t count, std::uint64_t following, Accumulator& acc) {
  for (std::size_t j = 0; j < count; ++j) {
    const std::uint32_t w = word_at(p, j);
    acc.any |= w;
    acc.sum1 += w;
    acc.sum2 += ((count - j + following) % kModulus) * w;
    if ((j + 1) % (kReduceEvery * kBlockWords) == 0) acc.reduce();
  }
}

void add_blocks_scalar(const unsigned char* p, std::size_t blocks, std::uint64_t following, Accumulator& acc) {
  add_words(p, blocks * kBlockWords, following, acc);
}

#if defined(__x86_64__)
// AVX2: 16 words per load, byte-swapped to host order, biased to signed (w - 32768) so that
// vpmaddwd can multiply them by the weights; the bias is added back per block.
__attribute__((target("avx2"))) std::int64_t horizontal_sum(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  const __m128i u = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  return _mm_cvtsi128_si32(u);
}

__attribute__((target("avx2"))) void add_blocks_avx2(const unsigned char* p, std::size_t blocks,
                                                     std::uint64_t following, Accumulator& acc) {
  const __m256i swap = _mm256_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14,  //
                                        1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  const __m256i bias = _mm256_set1_epi16(static_cast<short>(0x8000));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i weights[kBlockWords / 16];
  for (int k = 0; k < static_cast<int>(kBlockWords / 16); ++k) {
    alignas(32) short w[16];
    for (int i = 0; i < 16; ++i) w[i] = static_cast<short>(kBlockWords - 16 * k - i);
    weights[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
  }
  // The bias's share of a block's sums: 128 words of 32768, and 32768 times the weights' sum.
  constexpr std::int64_t kBiasSum = 32768LL * kBlockWords;
  constexpr std::int64_t kBiasWeighted = 32768LL * (kBlockWords * (kBlockWords + 1) / 2);
  __m256i any = _mm256_setzero_si256();
  for (std::size_t t = 0; t < blocks; ++t) {
    const unsigned char* block = p + t * kBlockWords * 2;
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (int k = 0; k < static_cast<int>(kBlockWords / 16); ++k) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32 * k));
      any = _mm256_or_si256(any, raw);
      const __m256i biased = _mm256_xor_si256(_mm256_shuffle_epi8(raw, swap), bias);
      a = _mm256_add_epi32(a, _mm256_madd_epi16(biased, ones));
      b = _mm256_add_epi32(b, _mm256_madd_epi16(biased, weights[k]));
    }
    const auto block_sum = static_cast<std::uint64_t>(horizontal_sum(a) + kBiasSum);
    const auto block_weighted = static_cast<std::uint64_t>(horizontal_sum(b) + kBiasWeighted);
    acc.add_block(block_sum, block_weighted, following + (blocks - 1 - t) * kBlockWords);
    if ((t + 1) % kReduceEvery == 0) acc.reduce();
  }
  if (!_mm256_testz_si256(any, any)) acc.any |= 1;
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

}  // namespace

Part part(const void* data, std::size_t bytes, std::size_t bytes_after) {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t words = bytes / 2, blocks = words / kBlockWords, tail = words - blocks * kBlockWords;
  const std::uint64_t following = bytes_after / 2;
  Accumulator acc;
#if defined(__x86_64__)
  if (has_avx2()) add_blocks_avx2(p, blocks, following + tail, acc);
  else add_blocks_scalar(p, blocks, following + tail, acc);
#else
  add_blocks_scalar(p, blocks, following + tail, acc);
#endif
  acc.reduce();
  add_words(p + blocks * kBlockWords * 2, tail, following, acc);
  acc.reduce();
  return {acc.sum1, acc.sum2, acc.any != 0 ? 1u : 0u};
}

void add(Part& into, const Part& other) {
  into.sum1 = (into.sum1 + other.sum1) % kModulus;
  into.sum2 = (into.sum2 + other.sum2) % kModulus;
  into.nonzero += other.nonzero;
}

std::uint32_t value(const Part& whole) {
  if (whole.nonzero == 0) return 0;  // all words zero: HDF5's sums never left 0
  const auto folded = [](std::uint64_t s) { return static_cast<std::uint32_t>(s % kModulus == 0 ? kModulus : s % kModulus); };
  return (folded(whole.sum2) << 16) | folded(whole.sum1);
}

std::uint32_t of(const void* data, std::size_t bytes) { return value(part(data, bytes, 0)); }

}  // namespace st::fletcher32
