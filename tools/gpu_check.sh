#!/usr/bin/env bash
# The GPU check for a machine with NVIDIA GPUs: builds the CUDA + NCCL configuration and runs
# the GPU tests (on 1 and 2 ranks), writing the log to ${OUT:-.}/gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-.}
{
  nvidia-smi || true
  nvidia-smi topo -m || true
  tools/build.sh build-cuda -DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DCMAKE_CUDA_ARCHITECTURES=90
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ctest --test-dir build-cuda -L gpu --output-on-failure -V
} 2>&1 | tee "$out/gpu_check.log"
