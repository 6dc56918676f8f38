#pragma once
// A test on the first CUDA device, skipped with the driver's reason where none is usable, with
// the copies its cases make: bf16 compute with flash attention (CudaExecSettings{0, true, true}).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "exec/cuda/cuda_exec.hpp"

namespace st::testing_support {

// The loss a kernel adds to a LossSum (exec/layer_kernels.hpp), read back: `call` gets a LossSum
// on a device double holding 0, with divisor 1 (the rows' sum itself).
template <class Call>
double device_loss_sum(Exec& exec, Call&& call) {
  Memory total = exec.allocate(sizeof(double));
  call(LossSum{static_cast<double*>(total.data()), 1.0});
  double sum = 0;
  exec.download(&sum, total.data(), sizeof sum);
  return sum;
}

class DeviceTest : public ::testing::Test {
 public:  // the cases' helpers use its device and copies
  void SetUp() override {
    int devices = 0;
    const cudaError_t code = cudaGetDeviceCount(&devices);
    if (code != cudaSuccess) GTEST_SKIP() << "no usable CUDA device: " << cudaGetErrorString(code);
    if (devices == 0) GTEST_SKIP() << "no usable CUDA device: none visible";
    exec = std::make_unique<CudaExec>(CudaExecSettings{0, true, true});
  }

  template <class T>
  Memory upload(const std::vector<T>& host) {
    Memory m = exec->allocate(std::max<std::size_t>(host.size(), 1) * sizeof(T));
    exec->upload(m.data(), host.data(), host.size() * sizeof(T));
    return m;
  }
  template <class T>
  std::vector<T> download(const Memory& m, std::size_t n) {
    std::vector<T> host(n);
    exec->download(host.data(), m.data(), n * sizeof(T));
    return host;
  }

  std::unique_ptr<CudaExec> exec;
};

}  // namespace st::testing_support
