#include "comm/two_level.hpp"

#include <algorithm>
#include <cstring>

#include "comm/shard.hpp"
#include "core/error.hpp"

namespace st {

TwoLevelCommunicator::TwoLevelCommunicator(Communicator& intra, Communicator& inter) : intra_(intra), inter_(inter) {}

void TwoLevelCommunicator::all_reduce(std::span<float> buffer, ReduceOp op) {
  // Reduce-scatter inside the node, all-reduce each node's slice across nodes, all-gather back.
  const ShardRange mine = shard_range(buffer.size(), intra_.size(), intra_.rank());
  padded_.assign(mine.padded, 0.0f);
  std::copy(buffer.begin(), buffer.end(), padded_.begin());
  chunk_.resize(mine.chunk);
  intra_.reduce_scatter(padded_, chunk_, ReduceOp::sum);
  inter_.all_reduce(std::span<float>(chunk_), ReduceOp::sum);
  intra_.all_gather(chunk_, padded_);
  std::copy(padded_.begin(), padded_.begin() + static_cast<std::ptrdiff_t>(buffer.size()), buffer.begin());
  if (op == ReduceOp::average) {
    const float factor = 1.0f / static_cast<float>(size());
    for (auto& x : buffer) x *= factor;
  }
}

void TwoLevelCommunicator::all_reduce(std::span<double> buffer, ReduceOp op) {
  // Used for a handful of scalars (losses, norms): two plain all-reduces are enough.
  intra_.all_reduce(buffer, ReduceOp::sum);
  inter_.all_reduce(buffer, ReduceOp::sum);
  if (op == ReduceOp::average)
    for (auto& x : buffer) x /= static_cast<double>(size());
}

void TwoLevelCommunicator::reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op) {
  const std::size_t L = static_cast<std::size_t>(intra_.size()), M = static_cast<std::size_t>(inter_.size());
  const std::size_t c = output.size();
  ST_REQUIRE(input.size() == c * L * M, "reduce_scatter: input must hold size() x output elements");
  // World rank n L + l owns chunk n L + l. Put the chunks of local rank l next to each other
  // (order l M + n) so the node-level reduce-scatter hands local rank l exactly its M chunks.
  permuted_.resize(input.size());
  for (std::size_t n = 0; n < M; ++n)
    for (std::size_t l = 0; l < L; ++l)
      std::memcpy(permuted_.data() + (l * M + n) * c, input.data() + (n * L + l) * c, c * sizeof(float));
  chunk_.resize(c * M);
  intra_.reduce_scatter(permuted_, chunk_, ReduceOp::sum);
  inter_.reduce_scatter(chunk_, output, ReduceOp::sum);
  if (op == ReduceOp::average) {
    const float factor = 1.0f / static_cast<float>(size());
    for (auto& x : output) x *= factor;
  }
}

void TwoLevelCommunicator::all_gather(std::span<const float> input, std::span<float> output) {
  const std::size_t L = static_cast<std::size_t>(intra_.size()), M = static_cast<std::size_t>(inter_.size());
  const std::size_t c = input.size();
  ST_REQUIRE(output.size() == c * L * M, "all_gather: output must hold size() x input elements");
  chunk_.resize(c * M);
  inter_.all_gather(input, chunk_);  // chunk n: from rank (n, l)
  permuted_.resize(output.size());
  intra_.all_gather(chunk_, permuted_);  // block l' M + n: from rank (n, l')
  for (std::size_t n = 0; n < M; ++n)
    for (std::size_t l = 0; l < L; ++l)
      std::memcpy(output.data() + (n * L + l) * c, permuted_.data() + (l * M + n) * c, c * sizeof(float));
}

void TwoLevelCommunicator::broadcast(std::span<float> buffer, int root) {
  const int L = intra_.size();
  const int root_node = root / L, root_local = root % L;
  // Across nodes among the ranks that share the root's local rank, then inside every node.
  if (intra_.rank() == root_local) inter_.broadcast(buffer, root_node);
  intra_.broadcast(buffer, root_local);
}

void TwoLevelCommunicator::barrier() {
  intra_.barrier();
  inter_.barrier();
  intra_.barrier();
}

LevelTraffic TwoLevelCommunicator::traffic() const {
  LevelTraffic t = intra_.traffic();
  const LevelTraffic across = inter_.traffic();
  t.intra += across.intra;
  t.inter += across.inter;
  return t;
}

}  // namespace st
