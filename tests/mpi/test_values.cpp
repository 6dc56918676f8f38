// The small collectives every folder outside comm/ uses instead of MPI (comm/values.hpp,
// comm/group.hpp) and the one way to agree on an error (comm/agree.hpp), on 1..4 ranks: each
// rank's contribution is a function of its rank, so every result has a closed form.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/peer_link.hpp"
#include "comm/values.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"

namespace st {
namespace {

TEST(Values, MinMaxSumOfScalars) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = group_rank(comm), size = group_size(comm);
  EXPECT_EQ(min_over(rank + 10, comm), 10);
  EXPECT_EQ(max_over(rank + 10, comm), size + 9);
  EXPECT_EQ(sum_over(rank + 1, comm), size * (size + 1) / 2);
  EXPECT_DOUBLE_EQ(max_over(0.5 * rank, comm), 0.5 * (size - 1));
  EXPECT_EQ(sum_over<unsigned long long>(1ull << 40, comm), static_cast<unsigned long long>(size) << 40);
  std::array<double, 2> pair = {static_cast<double>(rank), -static_cast<double>(rank)};
  reduce_each(std::span<double>(pair), Reduction::min, comm);
  EXPECT_EQ(pair[0], 0.0);
  EXPECT_EQ(pair[1], -(size - 1.0));
}

TEST(Values, SumBeforeIsZeroOnTheFirstRank) {
  const int rank = group_rank(MPI_COMM_WORLD);
  EXPECT_EQ(sum_before<unsigned long long>(rank + 1, MPI_COMM_WORLD), static_cast<unsigned long long>(rank * (rank + 1) / 2));
}

TEST(Values, BroadcastsAndGathers) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = group_rank(comm), size = group_size(comm);
  double value = rank == 0 ? 2.5 : -1.0;
  broadcast_value(value, 0, comm);
  EXPECT_EQ(value, 2.5);
  std::string text = rank == 0 ? "from rank 0" : "";
  broadcast(text, 0, comm);
  EXPECT_EQ(text, "from rank 0");

  const std::vector<int> doubled = all_gather_values(2 * rank, comm);
  const std::vector<std::array<double, 3>> triples = gather_values(std::array<double, 3>{1.0 * rank, 0, 0}, 0, comm);
  ASSERT_EQ(doubled.size(), static_cast<std::size_t>(size));
  ASSERT_EQ(triples.size(), rank == 0 ? static_cast<std::size_t>(size) : 0u);
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(doubled[static_cast<std::size_t>(r)], 2 * r);
    if (rank == 0) {
      EXPECT_EQ(triples[static_cast<std::size_t>(r)][0], 1.0 * r);
    }
  }

  // Rank r contributes r elements of value r (rank 0: none): joined in rank order.
  const std::vector<std::uint32_t> mine(static_cast<std::size_t>(rank), static_cast<std::uint32_t>(rank));
  const std::vector<std::uint32_t> joined = all_gather_joined(std::span<const std::uint32_t>(mine), comm);
  std::vector<std::uint32_t> expected;
  for (int r = 0; r < size; ++r) expected.insert(expected.end(), static_cast<std::size_t>(r), static_cast<std::uint32_t>(r));
  EXPECT_EQ(joined, expected);
  const std::vector<std::string> names = all_gather_text(std::string(static_cast<std::size_t>(rank), 'x'), comm);
  ASSERT_EQ(names.size(), static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) EXPECT_EQ(names[static_cast<std::size_t>(r)], std::string(static_cast<std::size_t>(r), 'x'));
}

TEST(Values, SomeHostRepeatsFindsTwoRanksOfOneHostWithTheSameText) {
  // The question a GPU rank asks before it makes an NCCL communicator: does another rank of it,
  // on this host, hold the same device? Texts are compared within each host only (the ranks may
  // be on several hosts: tools/two_hosts.sh).
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = group_rank(comm);
  const OwnedComm host = host_group(comm);
  const int host_rank = group_rank(host.get()), host_size = group_size(host.get());
  const bool some_host_has_two = max_over(host_size, comm) > 1;
  EXPECT_FALSE(some_host_repeats("device-" + std::to_string(rank), comm));  // each its own
  EXPECT_EQ(some_host_repeats("device-0", comm), some_host_has_two);         // one per host
  // Only each host's last two ranks repeat: every rank, not only those, hears so.
  const bool last = host_rank == host_size - 1 && host_size > 1;
  EXPECT_EQ(some_host_repeats("device-" + std::to_string(last ? host_rank - 1 : host_rank), comm), some_host_has_two);
  // A subgroup answers for itself alone: host ranks 2i and 2i + 1 share a text, which repeats
  // over the whole job (where a host has two ranks) but never inside the split by parity.
  const std::string pair = "device-" + std::to_string(host_rank / 2);
  const OwnedComm parity = split_group(comm, host_rank % 2, rank);
  EXPECT_EQ(some_host_repeats(pair, comm), some_host_has_two);
  EXPECT_FALSE(some_host_repeats(pair, parity.get()));
}

TEST(PeerLink, StagedMessagesGoThroughTheCopiesBothWays) {
  // A GPU pipeline's stages: the data are not host memory, so a send reads them through
  // to_host and a receive writes them through from_host. Here the "device" is a vector of its
  // own and the copies count the bytes they carry.
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = group_rank(comm), size = group_size(comm);
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  PeerLink link(comm, 60);
  std::size_t down = 0, up = 0;
  link.stage_through({[&down](void* host, const void* from, std::size_t bytes) {
                        std::memcpy(host, from, bytes);
                        down += bytes;
                      },
                      [&up](void* to, const void* host, std::size_t bytes) {
                        std::memcpy(to, host, bytes);
                        up += bytes;
                      }});
  const int n = 1000;
  if (rank <= 1) {
    const int peer = 1 - rank;
    std::vector<float> mine(n), theirs(n, std::nanf(""));
    for (int i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = static_cast<float>(rank * 10000 + i);
    link.send(peer, 7, Buffer::of(std::span<float>(mine)));
    std::fill(mine.begin(), mine.end(), -1.0f);  // the send took its copy: the buffer is free
    link.receive(peer, 7, Buffer::of(std::span<float>(theirs)));
    // bf16 activations travel as two bytes each.
    std::vector<Bf16> narrow(n), narrow_theirs(n);
    for (int i = 0; i < n; ++i) narrow[static_cast<std::size_t>(i)] = to_bf16(static_cast<float>(rank * 100 + i % 100));
    link.send(peer, 8, Buffer::of(std::span<Bf16>(narrow)));
    link.receive(peer, 8, Buffer::of(std::span<Bf16>(narrow_theirs)));
    link.drain();
    for (int i = 0; i < n; ++i) ASSERT_EQ(theirs[static_cast<std::size_t>(i)], static_cast<float>(peer * 10000 + i)) << i;
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(to_float(narrow_theirs[static_cast<std::size_t>(i)]), static_cast<float>(peer * 100 + i % 100)) << i;
    EXPECT_EQ(down, n * (sizeof(float) + sizeof(Bf16)));
    EXPECT_EQ(up, n * (sizeof(float) + sizeof(Bf16)));
    EXPECT_EQ(link.bytes_sent(), n * (sizeof(float) + sizeof(Bf16)));
  }
  quiet_barrier(comm);
}

TEST(Values, SplitGroupsAndHostGroup) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = group_rank(comm), size = group_size(comm);
  const OwnedComm halves = split_group(comm, rank % 2, rank);
  EXPECT_EQ(group_size(halves.get()), (size - rank % 2 + 1) / 2);
  EXPECT_EQ(group_rank(halves.get()), rank / 2);
  const OwnedComm host = host_group(comm);
  EXPECT_GE(group_size(host.get()), 1);
  quiet_barrier(comm);
}

// Rank 0's failure reaches every rank, unchanged (no "rank 0: " prefix), as an all-ranks error.
TEST(Agree, OnRootFailureReachesEveryRank) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  int ran = 0;
  try {
    agreed_on_root(comm, [&] {
      ++ran;
      throw Error("deck file 'x' is empty");
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "deck file 'x' is empty");
    EXPECT_EQ(e.scope(), ErrorScope::all_ranks);
  }
  EXPECT_EQ(ran, group_rank(comm) == 0 ? 1 : 0);
  EXPECT_NO_THROW(agreed_on_root(comm, [] {}));
}

}  // namespace
}  // namespace st
