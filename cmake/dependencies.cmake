find_package(MPI REQUIRED COMPONENTS CXX)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(toml11 3.7 REQUIRED CONFIG)
find_package(CLI11 2.1 REQUIRED CONFIG)
# JSON headers of safetensors files, Hugging Face config.json, tokenizer vocabularies, and every
# JSON the program writes (metrics, timelines; Debian: nlohmann-json3-dev); Unicode character
# classes for GPT-2's pre-tokenizer, the regex engine and NFC of tokenizer.json files (ICU,
# libicu-dev: uc, and i18n for RegexMatcher).
find_package(nlohmann_json 3.10 REQUIRED CONFIG)
find_package(ICU REQUIRED COMPONENTS uc i18n)

# Parallel HDF5 (MPI-IO driver) for checkpoints.
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "HDF5 was found (${HDF5_VERSION}) but it is not the parallel (MPI) build. "
                      "On Debian install libhdf5-openmpi-dev (tools/setup.sh does).")
endif()

# OpenBLAS, OpenMP flavour: BLAS calls made from inside an OpenMP region then run on one
# thread instead of oversubscribing the cores with a second thread pool.
find_path(ST_OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
find_library(ST_OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT ST_OPENBLAS_INCLUDE_DIR OR NOT ST_OPENBLAS_LIBRARY)
  find_path(ST_OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
  find_library(ST_OPENBLAS_LIBRARY openblas)
endif()
if(NOT ST_OPENBLAS_INCLUDE_DIR OR NOT ST_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (cblas.h and libopenblas) not found. On Debian install "
                      "libopenblas-openmp-dev (tools/setup.sh does), or set ST_OPENBLAS_INCLUDE_DIR "
                      "and ST_OPENBLAS_LIBRARY.")
endif()
add_library(st_blas INTERFACE)
target_include_directories(st_blas SYSTEM INTERFACE ${ST_OPENBLAS_INCLUDE_DIR})
target_link_libraries(st_blas INTERFACE ${ST_OPENBLAS_LIBRARY})
message(STATUS "shardtrain: BLAS ${ST_OPENBLAS_LIBRARY}")

if(ST_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "ST_ENABLE_CUDA=ON but no CUDA compiler was found. Put nvcc on PATH "
                        "(e.g. /usr/local/cuda/bin) or set CMAKE_CUDA_COMPILER.")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # C++20 in .cu files (the headers use std::span; CUDA_STANDARD follows CXX_STANDARD), here and
  # in the tests' kernels. CMake 3.25 does not know nvcc's flag for it, so it is named here.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  find_package(CUDAToolkit REQUIRED)
endif()
if(ST_ENABLE_KOKKOS)
  message(FATAL_ERROR "ST_ENABLE_KOKKOS was removed: no Kokkos release builds against the CUDA 13 toolkit, so the "
                      "GPU path is CUDA, cuBLAS and NCCL (-DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON).")
endif()
if(ST_ENABLE_NCCL)
  find_path(ST_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(ST_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(NOT ST_NCCL_INCLUDE_DIR OR NOT ST_NCCL_LIBRARY)
    message(FATAL_ERROR "ST_ENABLE_NCCL=ON but nccl.h / libnccl were not found; set "
                        "ST_NCCL_INCLUDE_DIR and ST_NCCL_LIBRARY.")
  endif()
endif()
