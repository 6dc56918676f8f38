#!/usr/bin/env bash
# One command for a GPU machine: builds the CUDA configuration, runs every GPU test, then
# benchmarks GPT-2 124M (12 layers, d_model 768, 12 heads, seq_len 1024, vocab 50304) for about
# 20 steps per setting and prints a table (tokens/s, step ms, MFU against the GEMM rate the run
# measured on the device, peak device memory) for fp32 and bf16 and the strategies one GPU runs.
#
#   tools/gpu_check.sh [--phases build,test,bench] [--steps N] [--batch B] [--all-strategies]
#
# Phases can run in separate calls (a machine with a per-command time limit): each finds the
# build of the one before. Where the Debian libraries are missing (a bare GPU image), it
# unpacks the .deb files that tools/gpu_stage_deps.sh left in .gpudeps/ into a private prefix
# first; a machine reached through a copy of the working tree needs .gpudeps/ and data/ (both
# ignored by git) carried along. The log and the table also go to $OUT when that is set. Exits
# non-zero when the build, a test or a benchmark run fails. Aim: under 8 minutes on one H200.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=20
batch=16
phases=build,test,bench
bench_args=()
while (($#)); do
  case $1 in
    --phases) phases=$2; shift ;;
    --steps) steps=$2; shift ;;
    --batch) batch=$2; shift ;;
    --all-strategies) bench_args+=(--all-strategies) ;;
    *) echo "gpu_check: unknown argument $1"; exit 2 ;;
  esac
  shift
done
out=${OUT:-build-cuda/gpu_check}
mkdir -p "$out"
log=$out/gpu_check.log
exec > >(tee -a "$log") 2>&1
status=0
has_phase() { [[ ",$phases," == *",$1,"* ]]; }
start=$(date +%s)
say() { echo "[gpu_check $(( $(date +%s) - start ))s] $*"; }

say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
nvidia-smi topo -m > "$out/topo.txt" 2>&1 || true

# ---- dependencies ----
prefix=/opt/stdeps
if ! command -v mpicxx >/dev/null && [[ -d .gpudeps ]]; then
  say "unpacking $(ls .gpudeps/*.deb | wc -l) Debian packages into $prefix"
  mkdir -p $prefix
  for f in .gpudeps/*.deb; do dpkg-deb -x "$f" $prefix; done
  # Debian's mpicxx, mpirun, ... are update-alternatives links that no package holds.
  for t in mpicxx mpicc mpirun mpiexec; do
    [[ -e $prefix/usr/bin/$t.openmpi ]] && ln -sf $t.openmpi $prefix/usr/bin/$t
  done
fi
if [[ -d $prefix/usr ]]; then
  arch=x86_64-linux-gnu
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/usr/lib/$arch/openmpi/lib:$prefix/usr/lib/$arch/hdf5/openmpi:$prefix/usr/lib/$arch/openblas-openmp:${LD_LIBRARY_PATH:-}
  # Open MPI was built with prefix /usr: relocated, every path it derives starts here.
  export OPAL_PREFIX=$prefix/usr
  export OMPI_MCA_plm_rsh_agent=false
  cmake_extra=(-DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/$arch/cmake;$prefix/usr/lib/$arch/hdf5/openmpi"
               -DMPI_CXX_COMPILER=$prefix/usr/bin/mpicxx -DMPIEXEC_EXECUTABLE=$prefix/usr/bin/mpirun
               -DHDF5_ROOT=$prefix/usr/lib/$arch/hdf5/openmpi
               -DST_OPENBLAS_INCLUDE_DIR=$prefix/usr/include/$arch/openblas-openmp
               -DST_OPENBLAS_LIBRARY=$prefix/usr/lib/$arch/openblas-openmp/libopenblas.so
               -DGTest_DIR=$prefix/usr/lib/$arch/cmake/GTest)
else
  cmake_extra=()
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- build ----
if has_phase build; then
say "configuring and building build-cuda (CUDA architectures 90)"
if ! cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
     "${cmake_extra[@]}" > "$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"; say "configure FAILED"; exit 1
fi
if ! cmake --build build-cuda --parallel "$(nproc)" > "$out/build.log" 2>&1; then
  grep -m 20 -E "error" "$out/build.log"; say "build FAILED"; exit 1
fi
say "built"
fi

# ---- tests ----
if has_phase test; then
  say "GPU tests"
  ctest --test-dir build-cuda -L gpu --output-on-failure --timeout 600 > "$out/gpu_tests.log" 2>&1 || status=1
  tail -60 "$out/gpu_tests.log"
  say "unit tests of the CUDA build"
  ctest --test-dir build-cuda -L unit > "$out/unit_tests.log" 2>&1 || status=1
  tail -3 "$out/unit_tests.log"
fi

# ---- benchmark ----
if has_phase bench; then
  say "benchmark: GPT-2 124M, $steps steps per setting, batch $batch x 1024"
  python3 tools/gpu_bench.py --exe build-cuda/shardtrain --steps "$steps" --batch "$batch" --out "$out" \
    --mpiexec "$(command -v mpirun || echo mpirun)" "${bench_args[@]}" || status=1
fi
say "done (exit $status)"
exit $status
