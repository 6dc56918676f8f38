// Collectives on 1..4 ranks and on emulated nodes: results against references computed
// locally, uneven sizes through the padding rule, and bytes against what each algorithm moves.
// ST_TEST_RANKS_PER_NODE (environment) sets the emulated node size (0: real nodes).
// ST_TEST_HOSTS = H says the job runs on H real hosts (tools/two_hosts.sh): then the nodes must
// be those hosts, and the world-wide shared-memory tests skip (no memory spans the hosts).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/async.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/shard.hpp"
#include "comm/shm_communicator.hpp"
#include "comm/two_level.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"

namespace st {
namespace {

int emulated_ranks_per_node() {
  const char* v = std::getenv("ST_TEST_RANKS_PER_NODE");
  return v ? std::atoi(v) : 0;
}

int expected_hosts() {
  const char* v = std::getenv("ST_TEST_HOSTS");
  return v ? std::atoi(v) : 0;
}

// Rank r's value at element i: distinct per rank and element, exact in float sums.
float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)); }

struct Fixture : ::testing::Test {
  Fixture() : world(MPI_COMM_WORLD, emulated_ranks_per_node()) {
    flat = std::make_unique<MpiCommunicator>(world.comm(), world.node_count() > 1 ? TrafficLevel::inter
                                                                                  : TrafficLevel::intra);
    intra = std::make_unique<MpiCommunicator>(world.node_comm(), TrafficLevel::intra);
    inter = std::make_unique<MpiCommunicator>(world.cross_comm(), TrafficLevel::inter);
    two_level = std::make_unique<TwoLevelCommunicator>(*intra, *inter);
    // The waiting mode the trainer's progress threads use: non-blocking collectives, polled.
    polled = std::make_unique<MpiCommunicator>(world.comm(), TrafficLevel::intra, MpiWait::polling);
    // Shared memory over the world only where every rank shares one host; over a node always.
    // A small slot (64 KiB) makes the larger buffers go through in several pieces.
    if (world.host_ranks() == world.size())
      shm_world = std::make_unique<ShmCommunicator>(world.comm(), TrafficLevel::intra, 65536);
    shm_node = std::make_unique<ShmCommunicator>(world.node_comm(), TrafficLevel::intra, 65536);
    shm_two_level = std::make_unique<TwoLevelCommunicator>(*shm_node, *inter);
  }
  std::vector<Communicator*> both() {
    std::vector<Communicator*> all{flat.get(), two_level.get(), shm_two_level.get(), polled.get()};
    if (shm_world) all.push_back(shm_world.get());
    return all;
  }
  World world;
  std::unique_ptr<MpiCommunicator> flat, intra, inter, polled;
  std::unique_ptr<TwoLevelCommunicator> two_level, shm_two_level;
  std::unique_ptr<ShmCommunicator> shm_world, shm_node;
};

TEST(ShardRange, PaddingRule) {
  const ShardRange a = shard_range(10, 4, 3);  // chunks of 3: [9, 10) real, 2 padding
  EXPECT_EQ(a.chunk, 3u);
  EXPECT_EQ(a.padded, 12u);
  EXPECT_EQ(a.begin, 9u);
  EXPECT_EQ(a.real(), 1u);
  const ShardRange empty = shard_range(2, 4, 3);  // a part that is all padding
  EXPECT_EQ(empty.begin, 3u);
  EXPECT_EQ(empty.real(), 0u);
  std::size_t covered = 0;
  for (int i = 0; i < 7; ++i) covered += shard_range(1001, 7, i).real();
  EXPECT_EQ(covered, 1001u);
}

TEST_F(Fixture, HierarchyIsConsistent) {
  EXPECT_EQ(world.local_size() * world.node_count(), world.size());
  EXPECT_TRUE(world.uniform());
  EXPECT_EQ(world.rank(), world.node() * world.local_size() + world.local_rank());
  EXPECT_EQ(two_level->rank(), world.rank());
  EXPECT_EQ(two_level->size(), world.size());
  if (emulated_ranks_per_node() > 0) {
    EXPECT_EQ(world.local_size(), emulated_ranks_per_node());
  }
}

// Without emulation a node is a host: the ranks of a node share a hostname, different nodes
// have different ones, and ST_TEST_HOSTS (when set) is the number of nodes found.
TEST_F(Fixture, NodesAreHosts) {
  if (emulated_ranks_per_node() > 0) GTEST_SKIP() << "emulated nodes share one host";
  constexpr int kName = 256;
  std::vector<char> names(static_cast<std::size_t>(world.size()) * kName, '\0');
  std::vector<char> mine(kName, '\0');
  world.host().copy(mine.data(), kName - 1);
  ASSERT_EQ(MPI_Allgather(mine.data(), kName, MPI_CHAR, names.data(), kName, MPI_CHAR, world.comm()), MPI_SUCCESS);
  std::vector<int> nodes(static_cast<std::size_t>(world.size()));
  const int node = world.node();
  ASSERT_EQ(MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, world.comm()), MPI_SUCCESS);
  auto name = [&](int r) { return std::string(names.data() + static_cast<std::size_t>(r) * kName); };
  for (int a = 0; a < world.size(); ++a)
    for (int b = 0; b < world.size(); ++b)
      EXPECT_EQ(nodes[a] == nodes[b], name(a) == name(b)) << "ranks " << a << " (" << name(a) << ", node " << nodes[a]
                                                           << ") and " << b << " (" << name(b) << ", node " << nodes[b]
                                                           << ")";
  if (expected_hosts() > 0) {
    EXPECT_EQ(world.node_count(), expected_hosts());
    EXPECT_EQ(world.host_ranks(), world.local_size());  // the host's ranks are the node
  }
}

// Every collective of the two-level communicator books the bytes its cross-node step moves:
// all-reduce 2 (B/L)(M-1)/M, reduce-scatter and all-gather (B/N)(M-1) per rank, broadcast
// B (M-1)/M on the root's local rank in every node; non-zero on every level once M > 1.
TEST_F(Fixture, InterNodeBytesOfEveryCollective) {
  const std::uint64_t N = static_cast<std::uint64_t>(world.size());
  const std::uint64_t L = static_cast<std::uint64_t>(world.local_size());
  const std::uint64_t M = static_cast<std::uint64_t>(world.node_count());
  const std::size_t n = 3 * 4 * 5 * 1024;
  const std::uint64_t B = n * sizeof(float);
  std::vector<float> buffer(n, 1.0f), chunk(n / N), gathered(n);
  auto inter_bytes = [&] { return two_level->traffic().inter.total(); };
  std::uint64_t t = inter_bytes();
  two_level->all_reduce(std::span<float>(buffer), ReduceOp::sum);
  EXPECT_EQ(inter_bytes() - t, 2 * (B / L) * (M - 1) / M) << "all_reduce";
  t = inter_bytes();
  two_level->reduce_scatter(std::span<const float>(buffer), std::span<float>(chunk), ReduceOp::sum);
  EXPECT_EQ(inter_bytes() - t, B / N * (M - 1)) << "reduce_scatter";
  t = inter_bytes();
  two_level->all_gather(std::span<const float>(chunk), std::span<float>(gathered));
  EXPECT_EQ(inter_bytes() - t, B / N * (M - 1)) << "all_gather";
  const int root = static_cast<int>(N) - 1;
  t = inter_bytes();
  two_level->broadcast(std::span<float>(buffer), root);
  const std::uint64_t broadcast = inter_bytes() - t;
  EXPECT_EQ(broadcast, world.local_rank() == root % static_cast<int>(L) ? B * (M - 1) / M : 0) << "broadcast";
  if (M > 1) {
    std::uint64_t everywhere = broadcast;
    ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_UINT64_T, MPI_SUM, world.comm()), MPI_SUCCESS);
    EXPECT_GT(everywhere, 0u);
    EXPECT_GT(2 * (B / L) * (M - 1) / M, 0u);
    EXPECT_GT(B / N * (M - 1), 0u);
  }
}

TEST_F(Fixture, AllReduceSumAndAverageOnUnevenSizes) {
  const int N = world.size();
  for (Communicator* comm : both())
    for (std::size_t n : {1ul, 7ul, 1000ul, 1001ul, 65537ul}) {
      std::vector<float> buffer(n);
      for (std::size_t i = 0; i < n; ++i) buffer[i] = value(world.rank(), i);
      std::vector<float> averaged = buffer;
      comm->all_reduce(std::span<float>(buffer), ReduceOp::sum);
      comm->all_reduce(std::span<float>(averaged), ReduceOp::average);
      for (std::size_t i = 0; i < n; ++i) {
        float expected = 0;
        for (int r = 0; r < N; ++r) expected += value(r, i);
        ASSERT_EQ(buffer[i], expected) << "n=" << n << " i=" << i;
        ASSERT_NEAR(averaged[i], expected / N, 1e-3) << "n=" << n << " i=" << i;
      }
    }
}

TEST_F(Fixture, ReduceScatterAndAllGather) {
  const int N = world.size();
  for (Communicator* comm : both()) {
    const ShardRange mine = shard_range(1003, N, world.rank());
    std::vector<float> input(mine.padded, 0.0f), output(mine.chunk);
    for (std::size_t i = 0; i < 1003; ++i) input[i] = value(world.rank(), i);
    comm->reduce_scatter(input, output, ReduceOp::sum);
    for (std::size_t k = 0; k < mine.chunk; ++k) {
      const std::size_t i = mine.begin + k;
      float expected = 0;
      if (i < 1003)
        for (int r = 0; r < N; ++r) expected += value(r, i);
      ASSERT_EQ(output[k], expected) << "element " << i;
    }
    // All-gather puts every rank's chunk back in rank order.
    std::vector<float> gathered(mine.padded);
    comm->all_gather(output, gathered);
    for (std::size_t i = 0; i < 1003; ++i) {
      float expected = 0;
      for (int r = 0; r < N; ++r) expected += value(r, i);
      ASSERT_EQ(gathered[i], expected) << "element " << i;
    }
  }
}

// In-place all-gather: each rank's input is its own chunk of the output, on every backend, and
// on shared memory from allocate() (the in-place path).
TEST_F(Fixture, AllGatherWithTheInputInsideTheOutput) {
  if (!shm_world) GTEST_SKIP() << "the ranks are on several hosts: no shared memory spans the world";
  const int N = world.size(), me = world.rank();
  const std::size_t c = 70001;  // several shared-memory pieces
  Memory memory = shm_world->allocate(c * static_cast<std::size_t>(N) * sizeof(float));
  std::vector<float> plain(c * static_cast<std::size_t>(N));
  for (Communicator* comm : both()) {
    for (const std::span<float> out : {std::span<float>(plain), memory.as<float>()}) {
      std::fill(out.begin(), out.end(), -1.0f);
      const std::span<float> mine = out.subspan(static_cast<std::size_t>(me) * c, c);
      for (std::size_t i = 0; i < c; ++i) mine[i] = value(me, i);
      comm->all_gather(std::span<const float>(mine), out);
      for (int r = 0; r < N; ++r)
        for (std::size_t i = 0; i < c; ++i)
          ASSERT_EQ(out[static_cast<std::size_t>(r) * c + i], value(r, i)) << "chunk " << r << " element " << i;
    }
  }
  const std::uint64_t before = shm_world->in_place_collectives();
  const std::span<float> out = memory.as<float>();
  shm_world->all_gather(std::span<const float>(out.subspan(static_cast<std::size_t>(me) * c, c)), out);
  EXPECT_EQ(shm_world->in_place_collectives(), before + 1);
}

// One piece, and (40001 floats through 64 KiB slots) three, the last one short: the slot path
// stages alternate pieces in alternate halves of the root's slot.
TEST_F(Fixture, BroadcastFromEveryRoot) {
  for (Communicator* comm : both())
    for (const std::size_t n : {std::size_t{513}, std::size_t{40001}})
      for (int root = 0; root < world.size(); ++root) {
        std::vector<float> buffer(n);
        for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = value(world.rank(), i);
        comm->broadcast(buffer, root);
        for (std::size_t i = 0; i < buffer.size(); ++i)
          ASSERT_EQ(buffer[i], value(root, i)) << "root " << root << ", " << n << " elements, element " << i;
      }
}

// Buffers from ShmCommunicator::allocate are reduced and gathered in place (no staging slots):
// the same results, bit for bit, as the slot path on ordinary memory, on sizes that span several
// pieces and do not divide by the group; and a collective where only some ranks pass shared
// memory falls back to the slots on every rank.
TEST_F(Fixture, SharedMemoryBuffersAreReducedInPlace) {
  if (!shm_world) GTEST_SKIP() << "the ranks are on several hosts: no shared memory spans the world";
  const int N = world.size(), me = world.rank();
  ShmCommunicator& shm = *shm_world;
  for (std::size_t n : {1ul, 7ul, 1001ul, 65537ul}) {
    Memory memory = shm.allocate(n * sizeof(float));
    ASSERT_EQ(memory.bytes(), n * sizeof(float));
    const std::span<float> shared = memory.as<float>();
    for (float x : shared) ASSERT_EQ(x, 0.0f);  // zeroed
    std::vector<float> plain(n);
    for (std::size_t i = 0; i < n; ++i) shared[i] = plain[i] = value(me, i) / 7.0f;  // rounding: order matters
    const std::uint64_t in_place_before = shm.in_place_collectives();
    shm.all_reduce(shared, ReduceOp::sum);
    EXPECT_EQ(shm.in_place_collectives(), in_place_before + 1);
    shm.all_reduce(std::span<float>(plain), ReduceOp::sum);
    EXPECT_EQ(shm.in_place_collectives(), in_place_before + 1);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(shared[i], plain[i]) << "n=" << n << " i=" << i;
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, n - 1) / 7.0f;
    ASSERT_NEAR(shared[n - 1], expected, 1e-2);

    // Average, and a part of the region rather than all of it.
    for (std::size_t i = 0; i < n; ++i) shared[i] = value(me, i);
    shm.all_reduce(shared.subspan(n / 2), ReduceOp::average);
    for (std::size_t i = n / 2; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < N; ++r) sum += value(r, i);
      ASSERT_NEAR(shared[i], sum / N, 1e-3) << "i=" << i;
    }
    for (std::size_t i = 0; i < n / 2; ++i) ASSERT_EQ(shared[i], value(me, i)) << "outside the span";
  }

  // Reduce-scatter from shared input, all-gather from shared input, broadcast from every root.
  const std::size_t total = 40001;
  const ShardRange mine = shard_range(total, N, me);
  Memory input_memory = shm.allocate(mine.padded * sizeof(float));
  Memory chunk_memory = shm.allocate(mine.chunk * sizeof(float));
  const std::span<float> input = input_memory.as<float>(), chunk = chunk_memory.as<float>();
  for (std::size_t i = 0; i < total; ++i) input[i] = value(me, i);
  const std::uint64_t before = shm.in_place_collectives();
  shm.reduce_scatter(std::span<const float>(input), chunk, ReduceOp::sum);
  for (std::size_t k = 0; k < mine.real(); ++k) {
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, mine.begin + k);
    ASSERT_EQ(chunk[k], expected) << "element " << mine.begin + k;
  }
  std::vector<float> gathered(mine.padded);
  shm.all_gather(std::span<const float>(chunk), std::span<float>(gathered));
  for (std::size_t i = 0; i < total; ++i) {
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, i);
    ASSERT_EQ(gathered[i], expected) << "element " << i;
  }
  for (int root = 0; root < N; ++root) {
    for (std::size_t i = 0; i < total; ++i) input[i] = value(me, i);
    shm.broadcast(input.first(total), root);
    for (std::size_t i = 0; i < total; ++i) ASSERT_EQ(input[i], value(root, i)) << "root " << root;
  }
  EXPECT_EQ(shm.in_place_collectives(), before + 2 + static_cast<std::uint64_t>(N));

  // Mixed: rank 0 passes ordinary memory, the others shared memory.
  std::vector<float> own(total);
  const std::span<float> buffer = me == 0 ? std::span<float>(own) : input.first(total);
  for (std::size_t i = 0; i < total; ++i) buffer[i] = value(me, i);
  const std::uint64_t mixed_before = shm.in_place_collectives();
  shm.all_reduce(buffer, ReduceOp::sum);
  EXPECT_EQ(shm.in_place_collectives(), mixed_before);  // every rank took the slots
  for (std::size_t i = 0; i < total; ++i) {
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, i);
    ASSERT_EQ(buffer[i], expected) << "mixed, element " << i;
  }
}

// A buffer that does not fit in shared memory (here: over the limit per rank) stays in process
// memory on every rank; its collectives take the slot path and still come out right.
TEST_F(Fixture, BufferOverTheSharedLimitStaysPrivate) {
  if (!shm_world) GTEST_SKIP() << "the ranks are on several hosts: no shared memory spans the world";
  const int N = world.size();
  ShmCommunicator shm(world.comm(), TrafficLevel::intra, 65536);
  shm.limit_shared_bytes(16384);
  Memory small = shm.allocate(1000 * sizeof(float)), large = shm.allocate(100000 * sizeof(float));
  for (Memory* memory : {&small, &large}) {
    const std::span<float> buffer = memory->as<float>();
    for (float x : buffer) ASSERT_EQ(x, 0.0f);
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = value(world.rank(), i);
    shm.all_reduce(buffer, ReduceOp::sum);
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      float expected = 0;
      for (int r = 0; r < N; ++r) expected += value(r, i);
      ASSERT_EQ(buffer[i], expected) << "i=" << i;
    }
  }
  EXPECT_EQ(shm.collectives(), 2u);
  EXPECT_EQ(shm.in_place_collectives(), 1u);  // the small one only
}

// Two-level all-reduce on a buffer from its allocate() (the node's shared memory): both node-level
// steps run in place, and the result is bit for bit the one on ordinary memory.
TEST_F(Fixture, TwoLevelAllReduceRunsTheNodeStepsInPlace) {
  const int N = world.size(), me = world.rank();
  for (std::size_t n : {12u * 1001u, 12u * 1001u + 1u}) {  // divisible by every node size used here, and not
    Memory memory = shm_two_level->allocate(n * sizeof(float));
    const std::span<float> shared = memory.as<float>();
    std::vector<float> plain(n);
    for (std::size_t i = 0; i < n; ++i) shared[i] = plain[i] = value(me, i) / 7.0f;
    const std::uint64_t before = shm_node->in_place_collectives();
    shm_two_level->all_reduce(shared, ReduceOp::sum);
    const std::uint64_t in_place = shm_node->in_place_collectives() - before;
    shm_two_level->all_reduce(std::span<float>(plain), ReduceOp::sum);
    const bool divides = n % static_cast<std::size_t>(world.local_size()) == 0;
    // The slice is always shared: the all-gather runs in place; the reduce-scatter too when the
    // buffer needs no padding.
    EXPECT_EQ(in_place, divides ? 2u : 1u) << "n=" << n;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(shared[i], plain[i]) << "n=" << n << " i=" << i;
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, 5) / 7.0f;
    ASSERT_NEAR(shared[5], expected, 1e-2);
  }
}

// bf16 in place.
TEST_F(Fixture, SharedMemoryBf16AllReduce) {
  if (!shm_world) GTEST_SKIP() << "the ranks are on several hosts: no shared memory spans the world";
  const int N = world.size();
  const std::size_t n = 70001;
  Memory memory = shm_world->allocate(n * sizeof(Bf16));
  const std::span<Bf16> shared = memory.as<Bf16>();
  for (std::size_t i = 0; i < n; ++i) shared[i] = to_bf16(static_cast<float>((world.rank() + static_cast<int>(i)) % 16));
  shm_world->all_reduce(shared, ReduceOp::sum);
  for (std::size_t i = 0; i < n; ++i) {
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += static_cast<float>((r + static_cast<int>(i)) % 16);
    ASSERT_EQ(to_float(shared[i]), expected) << "i=" << i;
  }
}

TEST_F(Fixture, BytesMovedMatchTheAlgorithms) {
  const std::uint64_t N = static_cast<std::uint64_t>(world.size());
  const std::uint64_t L = static_cast<std::uint64_t>(world.local_size());
  const std::uint64_t M = static_cast<std::uint64_t>(world.node_count());
  const std::size_t n = 3 * 4 * 5 * 1024;  // divisible by every group size used here (1-6)
  std::vector<float> buffer(n, 1.0f);
  const std::uint64_t bytes = n * sizeof(float);

  const LevelTraffic flat_before = flat->traffic();
  flat->all_reduce(std::span<float>(buffer), ReduceOp::sum);
  const std::uint64_t flat_moved = flat->traffic().total() - flat_before.total();
  EXPECT_EQ(flat_moved, 2 * bytes * (N - 1) / N);

  const LevelTraffic before = two_level->traffic();
  two_level->all_reduce(std::span<float>(buffer), ReduceOp::sum);
  const LevelTraffic after = two_level->traffic();
  const std::uint64_t intra_moved = after.intra.total() - before.intra.total();
  const std::uint64_t inter_moved = after.inter.total() - before.inter.total();
  // Reduce-scatter and all-gather inside the node, all-reduce of one L-th across nodes.
  EXPECT_EQ(intra_moved, 2 * bytes * (L - 1) / L);
  EXPECT_EQ(inter_moved, 2 * (bytes / L) * (M - 1) / M);
  const LevelTraffic shm_before = shm_two_level->traffic();
  shm_two_level->all_reduce(std::span<float>(buffer), ReduceOp::sum);
  EXPECT_EQ(shm_two_level->traffic().intra.total() - shm_before.intra.total(), intra_moved);
  EXPECT_EQ(shm_two_level->traffic().inter.total() - shm_before.inter.total(), inter_moved);
  if (M > 1 && L > 1) {
    // The point of two levels: 1/L of the flat algorithm's bytes cross between nodes.
    EXPECT_EQ(inter_moved * L * (N - 1) / N, flat_moved * (M - 1) / M);
  }
}

TEST_F(Fixture, NonBlockingOperationsOverlapWorkAndCompleteInOrder) {
  const int N = world.size();
  for (Communicator* base : both()) {
    AsyncCommunicator async(*base);
    int threaded = async.overlaps() ? 1 : 0;
    EXPECT_EQ(threaded, 1) << "MPI_THREAD_MULTIPLE is available here, so collectives should overlap";
    const std::size_t n = 200003;
    std::vector<float> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = value(world.rank(), i);
      b[i] = 2 * value(world.rank(), i);
    }
    const ShardRange mine = shard_range(n, N, world.rank());
    std::vector<float> padded(mine.padded, 0.0f), chunk(mine.chunk), gathered(mine.padded);
    for (std::size_t i = 0; i < n; ++i) padded[i] = value(world.rank(), i);
    // Three operations in flight at once, and work on other data meanwhile.
    Request ra = async.start_all_reduce(std::span<float>(a), ReduceOp::sum);
    Request rb = async.start_all_reduce(std::span<float>(b), ReduceOp::average);
    Request rs = async.start_reduce_scatter(padded, chunk, ReduceOp::sum);
    double work = 0;
    for (int i = 1; i < 2000000; ++i) work += 1.0 / i;
    EXPECT_GT(work, 14.0);
    rs.wait();
    Request rg = async.start_all_gather(chunk, gathered);
    ra.wait();
    rb.wait();
    rg.wait();
    rg.wait();  // waiting twice is harmless
    for (std::size_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int r = 0; r < N; ++r) expected += value(r, i);
      ASSERT_EQ(a[i], expected) << i;
      ASSERT_NEAR(b[i], 2 * expected / N, 1e-3) << i;
      ASSERT_EQ(gathered[i], expected) << i;
    }
  }
}

TEST_F(Fixture, Bf16OperationsMoveHalfTheBytes) {
  const int N = world.size();
  // Small integers are exact in bf16 (8 significant bits), so sums up to 256 compare exactly.
  auto small = [](int rank, std::size_t i) { return static_cast<float>((rank + 1) + static_cast<int>(i % 5)); };
  for (Communicator* comm : both()) {
    const std::size_t n = 3001;
    std::vector<Bf16> buffer(n);
    for (std::size_t i = 0; i < n; ++i) buffer[i] = to_bf16(small(world.rank(), i));
    comm->all_reduce(buffer, ReduceOp::sum);
    for (std::size_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int r = 0; r < N; ++r) expected += small(r, i);
      ASSERT_EQ(to_float(buffer[i]), expected) << i;
    }
    const ShardRange mine = shard_range(n, N, world.rank());
    std::vector<Bf16> padded(mine.padded, Bf16{}), chunk(mine.chunk), gathered(mine.padded);
    for (std::size_t i = 0; i < n; ++i) padded[i] = to_bf16(small(world.rank(), i));
    comm->reduce_scatter(padded, chunk, ReduceOp::sum);
    comm->all_gather(chunk, gathered);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(to_float(gathered[i]), to_float(buffer[i])) << i;
    std::vector<Bf16> cast(7, to_bf16(static_cast<float>(world.rank())));
    comm->broadcast(cast, N - 1);
    for (const Bf16 x : cast) ASSERT_EQ(to_float(x), static_cast<float>(N - 1));

    // The same number of elements in bf16 moves exactly half the bytes of fp32, on every level.
    const std::size_t even = 3 * 4 * 5 * 1024;
    std::vector<float> wide(even, 1.0f);
    std::vector<Bf16> narrow(even, to_bf16(1.0f));
    const LevelTraffic t0 = comm->traffic();
    comm->all_reduce(wide, ReduceOp::sum);
    const LevelTraffic t1 = comm->traffic();
    comm->all_reduce(narrow, ReduceOp::sum);
    const LevelTraffic t2 = comm->traffic();
    EXPECT_EQ(t2.intra.total() - t1.intra.total(), (t1.intra.total() - t0.intra.total()) / 2);
    EXPECT_EQ(t2.inter.total() - t1.inter.total(), (t1.inter.total() - t0.inter.total()) / 2);
    if (N > 1) {
      EXPECT_GT(t1.total() - t0.total(), 0u);
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(to_float(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(to_float(to_bf16(1.00390625f)), 1.0f);       // halfway between 1 and 1+2^-7: to even
  EXPECT_EQ(to_float(to_bf16(1.01171875f)), 1.015625f);  // halfway, rounds up to even
  EXPECT_EQ(to_float(to_bf16(3.14159265f)), 3.140625f);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::nanf("")))));
}

TEST_F(Fixture, NonBlockingErrorsReachTheWaiter) {
  AsyncCommunicator async(*flat);
  std::vector<float> wrong(3), out(5);
  Request r = async.start_reduce_scatter(wrong, out, ReduceOp::sum);  // sizes do not fit
  EXPECT_THROW(r.wait(), Error);
}

}  // namespace
}  // namespace st
