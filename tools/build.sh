#!/usr/bin/env bash
# Configures and builds shardtrain into build/ (or $1) with Ninja. Extra arguments go to CMake,
# e.g. tools/build.sh build-cuda -DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" --parallel "$(nproc)"
