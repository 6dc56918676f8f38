// The NCCL communicator on the GPUs of this host: every operation against a reference computed
// on the host. Skips, saying why, where no CUDA device is usable (login nodes, CI).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/cuda_check.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/two_level.hpp"
#include "comm/shard.hpp"
#include "comm/world.hpp"

namespace st {
namespace {

float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 97)); }

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    int devices = cuda_device_count(why);
    int least = devices;
    MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (least == 0) GTEST_SKIP() << "no usable CUDA device on this machine: " << why;
    world = std::make_unique<World>(MPI_COMM_WORLD);
    comm = std::make_unique<NcclCommunicator>(world->comm(), world->local_rank(), TrafficLevel::intra);
  }
  std::unique_ptr<World> world;
  std::unique_ptr<NcclCommunicator> comm;
};

TEST_F(Nccl, AllReduceReduceScatterAllGatherBroadcast) {
  const int N = comm->size(), rank = comm->rank();
  const std::size_t n = 100003;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = value(rank, i);
  DeviceBuffer<float> buffer(n);
  ST_CHECK_CUDA(cudaMemcpy(buffer.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  comm->all_reduce(buffer.span(), ReduceOp::sum);
  ST_CHECK_CUDA(cudaMemcpy(host.data(), buffer.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) {
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, i);
    ASSERT_EQ(host[i], expected) << i;
  }
  const ShardRange mine = shard_range(n, N, rank);
  std::vector<float> padded(mine.padded, 0.0f);
  for (std::size_t i = 0; i < n; ++i) padded[i] = value(rank, i);
  DeviceBuffer<float> in(mine.padded), out(mine.chunk), gathered(mine.padded);
  ST_CHECK_CUDA(cudaMemcpy(in.data(), padded.data(), padded.size() * sizeof(float), cudaMemcpyHostToDevice));
  comm->reduce_scatter(in.span(), out.span(), ReduceOp::sum);
  comm->all_gather(out.span(), gathered.span());
  ST_CHECK_CUDA(cudaMemcpy(padded.data(), gathered.data(), padded.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(padded[i], host[i]) << i;
  const std::uint64_t bytes = n * sizeof(float);
  EXPECT_EQ(comm->traffic().intra.of(Collective::all_reduce), 2 * (bytes * (N - 1) / N));
}

TEST_F(Nccl, TwoLevelWithNcclInsideAndStagedMpiAcross) {
  // On one GPU host with emulated nodes of one rank each: NCCL on the (1-rank) node, MPI across
  // through pinned host buffers.
  World nodes(MPI_COMM_WORLD, 1);
  NcclCommunicator intra(nodes.node_comm(), nodes.local_rank(), TrafficLevel::intra);
  MpiCommunicator across(nodes.cross_comm(), TrafficLevel::inter);
  HostStagedCommunicator staged(across);
  TwoLevelCommunicator two(intra, staged);
  const int N = two.size();
  const std::size_t n = 4099;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = value(two.rank(), i);
  DeviceBuffer<float> buffer(n);
  ST_CHECK_CUDA(cudaMemcpy(buffer.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  two.all_reduce(buffer.span(), ReduceOp::sum);
  ST_CHECK_CUDA(cudaMemcpy(host.data(), buffer.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) {
    float expected = 0;
    for (int r = 0; r < N; ++r) expected += value(r, i);
    ASSERT_EQ(host[i], expected) << i;
  }
}

}  // namespace
}  // namespace st
