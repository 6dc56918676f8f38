#!/usr/bin/env bash
# Run here, before tools/gpu_check.sh goes to a GPU machine that has the CUDA toolkit, CMake and
# ninja but none of the Debian libraries shardtrain builds against (MPI, parallel HDF5, OpenBLAS,
# toml11, CLI11, GoogleTest): downloads their .deb files, with the libraries they need, into
# .gpudeps/ (ignored by git) for gpu_check.sh to unpack into a private prefix there. Also writes
# the default training text (data/, ignored) if it is missing. Both folders must travel with the
# working tree (with the device tool: carry [".gpudeps", "data"]).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >/dev/null
packages=(libopenmpi-dev openmpi-bin openmpi-common libopenmpi3 libhdf5-openmpi-dev libhdf5-openmpi-103-1
          libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libtoml11-dev libcli11-dev libgtest-dev
          libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1
          librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libgfortran5 libsz2 libaec0
          libcurl4 libcurl3-gnutls libssh2-1 librtmp1 libpsl5 libldap-2.5-0 libnghttp2-14 libbrotli1 libsasl2-2
          libmunge2 libxnvctrl0 libnuma1 libefa1 libcaf-openmpi-3 zlib1g)
mkdir -p .gpudeps
grep -qx '/.gpudeps/' .git/info/exclude 2>/dev/null || echo '/.gpudeps/' >> .git/info/exclude
cd .gpudeps
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download "$p" >/dev/null 2>&1 || echo "gpu_stage_deps: no package $p (skipped)"
done
echo "gpu_stage_deps: $(ls *.deb | wc -l) packages, $(du -sh . | cut -f1) in .gpudeps/"
