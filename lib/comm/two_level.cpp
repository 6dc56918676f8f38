#include "comm/two_level.hpp"

#include <algorithm>
#include <cstring>

#include "comm/shard.hpp"
#include "core/error.hpp"

namespace st {

TwoLevelCommunicator::TwoLevelCommunicator(Communicator& intra, Communicator& inter) : intra_(intra), inter_(inter) {}

std::byte* TwoLevelCommunicator::scratch(Memory& memory, std::size_t bytes) {
  // Host scratch stays private (a shared-memory allocate() is collective and meant for buffers
  // reduced again and again); a device backend's scratch must be its device memory.
  if (memory.bytes() < bytes)
    memory = intra_.memory_space() == MemorySpace::device ? intra_.allocate(bytes) : Memory::private_memory(bytes);
  return memory.as<std::byte>().data();
}

void TwoLevelCommunicator::run_all_reduce(Buffer buffer, ReduceOp op) {
  // Reduce-scatter inside the node, all-reduce each node's slice across nodes, all-gather back.
  const std::size_t e = size_of(buffer.type);
  const ShardRange mine = shard_range(buffer.count, intra_.size(), intra_.rank());
  if (slice_.bytes() < mine.chunk * e) slice_ = intra_.allocate(mine.chunk * e);
  // Every step is ordered after the work that wrote the buffer (its `ready` marker): on a device
  // the later steps then wait for nothing more, the earlier ones having finished.
  const void* ready = buffer.ready;
  const Buffer chunk{slice_.as<std::byte>().data(), mine.chunk, buffer.type, ready};
  // The strategies' buffers are padded already: then the node-level steps work on the buffer
  // itself, in place where it came from allocate(). Others go through a padded copy.
  const bool needs_padding = mine.padded != buffer.count;
  Buffer work = buffer;
  if (needs_padding) {
    std::byte* padded = scratch(padded_, mine.padded * e);
    intra_.copy_bytes(padded, buffer.data, buffer.bytes(), ready);
    intra_.zero_bytes(padded + buffer.bytes(), (mine.padded - buffer.count) * e, ready);
    work = Buffer{padded, mine.padded, buffer.type, ready};
  }
  // Device buffers cannot be scaled here: there each level averages over its own ranks (the
  // product is the world's mean); host buffers are summed, then scaled once.
  const bool on_device = intra_.memory_space() == MemorySpace::device;
  const ReduceOp level_op = on_device ? op : ReduceOp::sum;
  intra_.reduce_scatter(work, chunk, level_op);
  inter_.all_reduce(chunk, level_op);
  intra_.all_gather(chunk, work);
  if (needs_padding) intra_.copy_bytes(buffer.data, work.data, buffer.bytes(), ready);
  if (op == ReduceOp::average && !on_device) scale_buffer(buffer, 1.0 / size());
}

void TwoLevelCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  require_reduce_scatter_shapes(input, output, size());
  const std::size_t L = static_cast<std::size_t>(intra_.size()), M = static_cast<std::size_t>(inter_.size());
  const std::size_t e = size_of(input.type), c = output.count * e;  // chunk bytes
  // World rank n L + l owns chunk n L + l. Put the chunks of local rank l next to each other
  // (order l M + n) so the node-level reduce-scatter hands local rank l exactly its M chunks.
  std::byte* permuted = scratch(permuted_, input.bytes());
  const auto* in = static_cast<const std::byte*>(input.data);
  for (std::size_t n = 0; n < M; ++n)
    for (std::size_t l = 0; l < L; ++l)
      intra_.copy_bytes(permuted + (l * M + n) * c, in + (n * L + l) * c, c, input.ready);
  std::byte* chunk = scratch(chunk_, c * M);
  const bool on_device = intra_.memory_space() == MemorySpace::device;
  const ReduceOp level_op = on_device ? op : ReduceOp::sum;  // as in run_all_reduce
  intra_.reduce_scatter(Buffer{permuted, input.count, input.type, input.ready},
                        Buffer{chunk, output.count * M, input.type, input.ready}, level_op);
  inter_.reduce_scatter(Buffer{chunk, output.count * M, input.type, input.ready}, output, level_op);
  if (op == ReduceOp::average && !on_device) scale_buffer(output, 1.0 / size());
}

void TwoLevelCommunicator::run_all_gather(Buffer input, Buffer output) {
  require_all_gather_shapes(input, output, size());
  const std::size_t L = static_cast<std::size_t>(intra_.size()), M = static_cast<std::size_t>(inter_.size());
  const std::size_t c = input.bytes();
  const Buffer across{scratch(chunk_, c * M), input.count * M, input.type, input.ready};
  inter_.all_gather(input, across);  // chunk n: from rank (n, l)
  std::byte* permuted = scratch(permuted_, output.bytes());
  intra_.all_gather(across, Buffer{permuted, output.count, output.type, input.ready});  // block l' M + n: rank (n, l')
  auto* out = static_cast<std::byte*>(output.data);
  for (std::size_t n = 0; n < M; ++n)
    for (std::size_t l = 0; l < L; ++l)
      intra_.copy_bytes(out + (n * L + l) * c, permuted + (l * M + n) * c, c, input.ready);
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
