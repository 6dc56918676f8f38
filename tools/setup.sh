#!/usr/bin/env bash
# Installs every Debian package that building, running and testing shardtrain need, and prepares
# the default training text. Idempotent: quick when everything is there already.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin                 # MPI
  libhdf5-openmpi-dev hdf5-tools             # parallel HDF5 (checkpoints), h5ls/h5dump
  libopenblas-openmp-dev                     # BLAS (OpenMP flavour)
  libtoml11-dev libcli11-dev libgtest-dev    # deck parser, command line, tests
  nlohmann-json3-dev                         # safetensors headers, Hugging Face config.json
  hwloc libhwloc-dev                         # topology
  fortunes                                   # the default deck's training text
  python3 python3-numpy python3-matplotlib python3-h5py  # plots, checkpoint readers
  python3-torch                              # the PyTorch cross-check and benchmark baseline
  slurm-wlm munge                            # a one-machine Slurm cluster for the Slurm test
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Default training text: the English fortune-cookie collections (about 2.6 MB of quotations,
# literature, science and songs), without the ASCII-art files. Fixed order, so the file is
# the same on every machine with the same package version.
corpus=data/fortunes.txt
if [[ ! -s $corpus ]]; then
  mkdir -p data
  src=/usr/share/games/fortunes
  for f in $(ls "$src" | grep -v -E '\.(dat|u8)$|^(art|ascii-art|translate-me)$' | sort); do
    [[ -f $src/$f ]] && cat "$src/$f"
  done > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
  echo "setup: wrote $corpus ($(stat -c %s "$corpus") bytes)"
fi

# The Slurm test needs a running cluster: as root, start a one-machine one (munge, slurmctld,
# slurmd); elsewhere say how (the test then skips, saying why).
if [[ $(id -u) -eq 0 ]]; then
  tools/slurm_local.sh
else
  echo "setup: not root: no local Slurm cluster started (sudo tools/slurm_local.sh starts one)"
fi
