#include "comm/two_level.hpp"

#include <algorithm>
#include <cstring>

#include "comm/shard.hpp"
#include "core/error.hpp"

namespace st {

TwoLevelCommunicator::TwoLevelCommunicator(Communicator& intra, Communicator& inter) : intra_(intra), inter_(inter) {}

void TwoLevelCommunicator::run_all_reduce(Buffer buffer, ReduceOp op) {
  // Reduce-scatter inside the node, all-reduce each node's slice across nodes, all-gather back.
  const std::size_t e = size_of(buffer.type);
  const ShardRange mine = shard_range(buffer.count, intra_.size(), intra_.rank());
  if (slice_.bytes() < mine.chunk * e) slice_ = intra_.allocate(mine.chunk * e);
  const Buffer chunk{slice_.as<std::byte>().data(), mine.chunk, buffer.type};
  // The strategies' buffers are padded already: then the node-level steps work on the buffer
  // itself, in place where it came from allocate(). Others go through a padded copy.
  const bool needs_padding = mine.padded != buffer.count;
  Buffer work = buffer;
  if (needs_padding) {
    padded_.assign(mine.padded * e, std::byte{0});
    std::memcpy(padded_.data(), buffer.data, buffer.bytes());
    work = Buffer{padded_.data(), mine.padded, buffer.type};
  }
  intra_.reduce_scatter(work, chunk, ReduceOp::sum);
  inter_.all_reduce(chunk, ReduceOp::sum);
  intra_.all_gather(chunk, work);
  if (needs_padding) std::memcpy(buffer.data, padded_.data(), buffer.bytes());
  if (op == ReduceOp::average) scale_buffer(buffer, 1.0 / size());
}

void TwoLevelCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  require_reduce_scatter_shapes(input, output, size());
  const std::size_t L = static_cast<std::size_t>(intra_.size()), M = static_cast<std::size_t>(inter_.size());
  const std::size_t e = size_of(input.type), c = output.count * e;  // chunk bytes
  // World rank n L + l owns chunk n L + l. Put the chunks of local rank l next to each other
  // (order l M + n) so the node-level reduce-scatter hands local rank l exactly its M chunks.
  permuted_.resize(input.bytes());
  const auto* in = static_cast<const std::byte*>(input.data);
  for (std::size_t n = 0; n < M; ++n)
    for (std::size_t l = 0; l < L; ++l) std::memcpy(permuted_.data() + (l * M + n) * c, in + (n * L + l) * c, c);
  chunk_.resize(c * M);
  intra_.reduce_scatter(Buffer{permuted_.data(), input.count, input.type},
                        Buffer{chunk_.data(), output.count * M, input.type}, ReduceOp::sum);
  inter_.reduce_scatter(Buffer{chunk_.data(), output.count * M, input.type}, output, ReduceOp::sum);
  if (op == ReduceOp::average) scale_buffer(output, 1.0 / size());
}

void TwoLevelCommunicator::run_all_gather(Buffer input, Buffer output) {
  require_all_gather_shapes(input, output, size());
  const std::size_t L = static_cast<std::size_t>(intra_.size()), M = static_cast<std::size_t>(inter_.size());
  const std::size_t c = input.bytes();
  chunk_.resize(c * M);
  const Buffer across{chunk_.data(), input.count * M, input.type};
  inter_.all_gather(input, across);  // chunk n: from rank (n, l)
  permuted_.resize(output.bytes());
  intra_.all_gather(across, Buffer{permuted_.data(), output.count, output.type});  // block l' M + n: rank (n, l')
  auto* out = static_cast<std::byte*>(output.data);
  for (std::size_t n = 0; n < M; ++n)
    for (std::size_t l = 0; l < L; ++l) std::memcpy(out + (n * L + l) * c, permuted_.data() + (l * M + n) * c, c);
}

void TwoLevelCommunicator::run_broadcast(Buffer buffer, int root) {
  const int L = intra_.size();
  const int root_node = root / L, root_local = root % L;
  // Across nodes among the ranks that share the root's local rank, then inside every node.
  if (intra_.rank() == root_local) inter_.broadcast(buffer, root_node);
  intra_.broadcast(buffer, root_local);
}

void TwoLevelCommunicator::run_barrier() {
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
