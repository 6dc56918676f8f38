// The NCCL communicator on the GPUs of this host: every operation against the MPI communicator
// on the same inputs (sum, average, padded shapes, in-place all-gather, broadcast from every
// root, bf16). Skips, saying why, where no CUDA device is usable (login nodes, CI) or where
// this host has fewer GPUs than ranks (NCCL refuses two ranks on one device).
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_check.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/shard.hpp"
#include "comm/two_level.hpp"
#include "comm/world.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "runtime/device_choice.hpp"

namespace st {
namespace {

float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 0.37 + static_cast<double>(i % 97) * 0.011); }

// This rank's n values, zero-padded to the padding rule's length.
std::vector<float> padded_values(int rank, std::size_t n, std::size_t padded) {
  std::vector<float> v(padded, 0.0f);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

// The tests' copies, ordered as the trainer's are: an upload is queued on a stream of the test's
// own and not waited for by the host (a copy from pageable memory returns once the runtime has
// staged it, before it reaches the device); a communicator made with order() makes its stream
// wait for every upload queued so far before it enqueues a collective. A plain cudaMemcpy would
// run on the legacy stream, which the communicators' non-blocking streams do not wait for.
class Copies {
 public:
  Copies() { ST_CHECK_CUDA(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming)); }
  ~Copies() { cudaEventDestroy(uploaded_); }
  Copies(const Copies&) = delete;
  Copies& operator=(const Copies&) = delete;

  template <class T>
  void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
    ST_CHECK_CUDA(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream_.get()));
    ST_CHECK_CUDA(cudaEventRecord(uploaded_, stream_.get()));
    ++uploads_;
  }
  // After the collective (whose communicator has waited for its stream): on the test's stream.
  template <class T>
  std::vector<T> download(const DeviceBuffer<T>& d) {
    // The stream-order assertion: every upload so far was ordered before some collective's
    // stream. A communicator made without order() would leave this unset.
    EXPECT_EQ(ordered_.load(), uploads_.load()) << "a collective ran without waiting for the uploads queued before it";
    std::vector<T> h(d.size());
    ST_CHECK_CUDA(cudaMemcpyAsync(h.data(), d.data(), d.size() * sizeof(T), cudaMemcpyDeviceToHost, stream_.get()));
    ST_CHECK_CUDA(cudaStreamSynchronize(stream_.get()));
    return h;
  }
  StreamOrder order() {
    return [this](cudaStream_t stream, const void*) {
      ST_CHECK_CUDA(cudaStreamWaitEvent(stream, uploaded_, 0));
      ordered_ = uploads_.load();
    };
  }

 private:
  CudaStream stream_;
  cudaEvent_t uploaded_ = nullptr;
  std::atomic<long> uploads_{0}, ordered_{0};  // the order may run on a progress thread
};

// Skips unless every rank of the world has a GPU of its own on its host.
std::string usable_devices(int& device) {
  std::string why;
  const int devices = visible_cuda_devices(why);
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  int host_rank = 0, host_size = 1;
  MPI_Comm_rank(host, &host_rank);
  MPI_Comm_size(host, &host_size);
  MPI_Comm_free(&host);
  int ok = devices >= host_size ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  device = host_rank;
  if (ok) return {};
  if (devices == 0) return "no usable CUDA device on this machine: " + why;
  return std::to_string(host_size) + " ranks on this host but " + std::to_string(devices) + " GPU(s)";
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = usable_devices(device);
    if (!why.empty()) GTEST_SKIP() << why;
    world = std::make_unique<World>(MPI_COMM_WORLD);
    copies.emplace();
    nccl = std::make_unique<NcclCommunicator>(world->comm(), device, TrafficLevel::intra, copies->order());
    mpi = std::make_unique<MpiCommunicator>(world->comm(), TrafficLevel::intra);
  }
  int device = 0;
  std::optional<Copies> copies;  // made once a device is known to be usable; before the communicator
  std::unique_ptr<World> world;
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<MpiCommunicator> mpi;
};

TEST_F(Nccl, AllReduceSumAndAverageEqualMpi) {
  const int rank = nccl->rank();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average})
    for (std::size_t n : {std::size_t{1}, std::size_t{4099}, std::size_t{100003}}) {
      std::vector<float> host(n);
      for (std::size_t i = 0; i < n; ++i) host[i] = value(rank, i);
      DeviceBuffer<float> d(n);
      copies->upload(d, host);
      nccl->all_reduce(d.span(), op);
      mpi->all_reduce(host, op);
      const std::vector<float> got = copies->download(d);
      for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], host[i], 1e-6f * (1.0f + std::abs(host[i]))) << i;
    }
  // Counted as a ring moves them: 2 (N-1)/N of each buffer, for both operations.
  std::uint64_t expected = 0;
  for (std::size_t n : {std::size_t{1}, std::size_t{4099}, std::size_t{100003}})
    expected += 2 * 2 * ring_share(n * sizeof(float), nccl->size());
  EXPECT_EQ(nccl->traffic().intra.of(Collective::all_reduce), expected);
}

TEST_F(Nccl, ReduceScatterAndAllGatherEqualMpiIncludingInPlace) {
  const int N = nccl->size(), rank = nccl->rank();
  const std::size_t n = 100003;
  const ShardRange mine = shard_range(n, N, rank);
  const std::vector<float> padded = padded_values(rank, n, mine.padded);
  DeviceBuffer<float> in(mine.padded), out(mine.chunk), gathered(mine.padded);
  copies->upload(in, padded);
  nccl->reduce_scatter(in.span(), out.span(), ReduceOp::sum);
  std::vector<float> expected_chunk(mine.chunk);
  mpi->reduce_scatter(padded, expected_chunk, ReduceOp::sum);
  const std::vector<float> chunk = copies->download(out);
  for (std::size_t i = 0; i < mine.chunk; ++i) ASSERT_NEAR(chunk[i], expected_chunk[i], 1e-5f) << i;

  nccl->all_gather(out.span(), gathered.span());
  std::vector<float> expected_full(mine.padded);
  mpi->all_gather(expected_chunk, expected_full);
  std::vector<float> full = copies->download(gathered);
  for (std::size_t i = 0; i < mine.padded; ++i) ASSERT_NEAR(full[i], expected_full[i], 1e-5f) << i;

  // In place: this rank's chunk already sits in its block of the output.
  DeviceBuffer<float> in_place(mine.padded);
  std::vector<float> start(mine.padded, -1.0f);
  std::copy(expected_chunk.begin(), expected_chunk.end(), start.begin() + static_cast<std::ptrdiff_t>(rank * mine.chunk));
  copies->upload(in_place, start);
  nccl->all_gather(std::span<float>(in_place.data() + rank * mine.chunk, mine.chunk), in_place.span());
  full = copies->download(in_place);
  for (std::size_t i = 0; i < mine.padded; ++i) ASSERT_NEAR(full[i], expected_full[i], 1e-5f) << i;
  EXPECT_EQ(nccl->traffic().intra.of(Collective::reduce_scatter), ring_share(mine.padded * sizeof(float), N));
  EXPECT_EQ(nccl->traffic().intra.of(Collective::all_gather), 2 * ring_share(mine.padded * sizeof(float), N));
}

TEST_F(Nccl, BroadcastFromEveryRoot) {
  const std::size_t n = 777;
  for (int root = 0; root < nccl->size(); ++root) {
    std::vector<float> host(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = value(nccl->rank(), i);
    DeviceBuffer<float> d(n);
    copies->upload(d, host);
    nccl->broadcast(d.span(), root);
    const std::vector<float> got = copies->download(d);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value(root, i)) << "root " << root << " at " << i;
  }
}

TEST_F(Nccl, Bf16AllReduceEqualsMpiWithinRounding) {
  const std::size_t n = 5003;
  std::vector<Bf16> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = to_bf16(value(nccl->rank(), i));
  DeviceBuffer<Bf16> d(n);
  copies->upload(d, host);
  nccl->all_reduce(d.span(), ReduceOp::sum);
  mpi->all_reduce(host, ReduceOp::sum);
  const std::vector<Bf16> got = copies->download(d);
  // NCCL may add in another order: within one bf16 rounding per rank of the sum.
  for (std::size_t i = 0; i < n; ++i) {
    const float a = to_float(got[i]), b = to_float(host[i]);
    ASSERT_NEAR(a, b, std::abs(b) * nccl->size() * 0.0079f + 1e-6f) << i;
  }
}

TEST(NcclTwoLevel, NcclInsideAndStagedMpiAcrossEqualFlatMpi) {
  int device = 0;
  const std::string why = usable_devices(device);
  if (!why.empty()) GTEST_SKIP() << why;
  // Emulated nodes of one rank each: NCCL on the (1-rank) node, MPI across through pinned host
  // buffers, on device memory. The reduce-scatter and all-gather take the permutation copies
  // on the device; a length that does not divide takes the padded path; average is averaged
  // per level.
  World nodes(MPI_COMM_WORLD, 1);
  Copies copies;
  NcclCommunicator intra(nodes.node_comm(), device, TrafficLevel::intra, copies.order());
  MpiCommunicator across(nodes.cross_comm(), TrafficLevel::inter);
  HostStagedCommunicator staged(across, device, copies.order());
  TwoLevelCommunicator two(intra, staged);
  MpiCommunicator flat(nodes.comm(), TrafficLevel::intra);
  const int N = two.size(), rank = two.rank();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average})
    for (std::size_t n : {std::size_t{4099}, std::size_t{4096 * 3 + 1}}) {
      std::vector<float> host(n);
      for (std::size_t i = 0; i < n; ++i) host[i] = value(rank, i);
      DeviceBuffer<float> buffer(n);
      copies.upload(buffer, host);
      two.all_reduce(buffer.span(), op);
      flat.all_reduce(host, op);
      const std::vector<float> got = copies.download(buffer);
      for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], host[i], 1e-5f * (1.0f + std::abs(host[i]))) << i;
    }
  const std::size_t n = 10007;
  const ShardRange mine = shard_range(n, N, rank);
  const std::vector<float> padded = padded_values(rank, n, mine.padded);
  DeviceBuffer<float> in(mine.padded), out(mine.chunk), gathered(mine.padded);
  copies.upload(in, padded);
  two.reduce_scatter(in.span(), out.span(), ReduceOp::sum);
  std::vector<float> expected(mine.chunk), expected_full(mine.padded);
  flat.reduce_scatter(padded, expected, ReduceOp::sum);
  const std::vector<float> chunk = copies.download(out);
  for (std::size_t i = 0; i < mine.chunk; ++i) ASSERT_NEAR(chunk[i], expected[i], 1e-5f * (1.0f + std::abs(expected[i])));
  two.all_gather(out.span(), gathered.span());
  flat.all_gather(expected, expected_full);
  const std::vector<float> full = copies.download(gathered);
  for (std::size_t i = 0; i < mine.padded; ++i)
    ASSERT_NEAR(full[i], expected_full[i], 1e-5f * (1.0f + std::abs(expected_full[i])));
  // Across nodes only where there is more than one (np1 is one node: nothing crosses).
  if (across.size() > 1) EXPECT_GT(two.traffic().inter.total(), 0u);
  else EXPECT_EQ(two.traffic().inter.total(), 0u);
}

// The production ordering: a kernel writes the buffer on the backend's compute stream, the
// collective runs on another thread with the marker of that work, and sees its result.
TEST(NcclOrdering, CollectiveFromAnotherThreadSeesTheComputeItsMarkerNames) {
  int device = 0;
  const std::string why = usable_devices(device);
  if (!why.empty()) GTEST_SKIP() << why;
  CudaExec exec(CudaExecSettings{device, false});
  World world(MPI_COMM_WORLD);
  NcclCommunicator nccl(world.comm(), device, TrafficLevel::intra,
                        [&exec](cudaStream_t stream, const void* ready) { exec.order_after_compute(stream, ready); });
  const std::size_t n = 1 << 22;  // large enough that the conversion is still running when NCCL is called
  Memory source = exec.allocate(n * sizeof(float)), target = exec.allocate(n * sizeof(float));
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = value(world.rank(), i);
  exec.upload(source.data(), host.data(), n * sizeof(float));
  for (int round = 0; round < 3; ++round) {
    exec.convert(Buffer(target.data(), n, DataType::f32), Buffer(source.data(), n, DataType::f32));
    const void* ready = exec.before_communication();
    std::thread other([&] { nccl.all_reduce(Buffer(target.data(), n, DataType::f32, ready), ReduceOp::sum); });
    other.join();
    std::vector<float> got(n);
    exec.download(got.data(), target.data(), n * sizeof(float));
    for (std::size_t i = 0; i < n; i += 4099) {
      float expected = 0;
      for (int r = 0; r < world.size(); ++r) expected += value(r, i);
      ASSERT_NEAR(got[i], expected, 1e-5f * (1.0f + std::abs(expected))) << "round " << round << " at " << i;
    }
  }
}

}  // namespace
}  // namespace st
