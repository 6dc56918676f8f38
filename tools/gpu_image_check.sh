#!/usr/bin/env bash
# Proves tools/gpu_check.sh on a stand-in for the GPU machine's image, here, without a GPU. Run it
# (as root, on Debian 12 with network) before any change to the GPU tooling goes to a GPU.
#
# The stand-in (made once, cached in $ST_GPU_IMAGE_CACHE, default /var/cache/shardtrain-gpu-image):
#   - a debootstrap chroot of Debian 12 minbase with g++ and python3, then cmake and ninja: what
#     the GPU image holds (there cmake and ninja are Python packages, so the dpkg status saved
#     before they were added, image-base.status, is what tools/gpu_stage_deps.sh stages against);
#     no MPI, HDF5, OpenBLAS, toml11, CLI11, nlohmann-json, hwloc, ICU headers or pkg-config;
#   - this machine's /usr/local/cuda bind-mounted (the CUDA toolkit; no driver, so no GPU);
#   - NCCL laid out as the nvidia-nccl-cu13 wheel lays it out (nvidia/nccl/include/nccl.h and
#     nvidia/nccl/lib/libnccl.so.2, no unversioned link) in the chroot python3's site-packages,
#     so `import nvidia.nccl` finds it; made from the toolkit's NCCL files, since the wheel cannot
#     be downloaded here.
# Then it copies exactly what a device call would carry (the files git tracks or does not ignore,
# and .gpudeps from tools/gpu_stage_deps.sh), checks that it is under 64 MiB, and runs
# tools/gpu_check.sh in the chroot without a budget (2 cores here, not 16), with warnings as errors
# as CI builds, and without the benchmark: it must configure,
# build, pass the CPU unit tests and run the GPU tests, which skip with the driver's message.
# The log goes to $ST_GPU_IMAGE_CACHE/last/ (and $OUT where set).
#
#   tools/gpu_image_check.sh [--rebuild-image] [--phases build,unit,gpu] [--keep-build]
# --keep-build: keep the image's build-cuda from the last run (quicker; the proof is a clean build).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache=${ST_GPU_IMAGE_CACHE:-/var/cache/shardtrain-gpu-image}
phases=build,unit,gpu
rebuild=0
keep_build=0
while (($#)); do
  case $1 in
    --rebuild-image) rebuild=1 ;;
    --keep-build) keep_build=1 ;;
    --phases) phases=$2; shift ;;
    *) echo "gpu_image_check: unknown argument $1"; exit 2 ;;
  esac
  shift
done
[[ $(id -u) -eq 0 ]] || { echo "gpu_image_check: needs root (debootstrap, chroot, bind mounts)"; exit 1; }
cuda=/usr/local/cuda
[[ -x $cuda/bin/nvcc && -f $cuda/include/nccl.h && -f $cuda/lib64/libnccl.so.2 ]] ||
  { echo "gpu_image_check: needs the CUDA toolkit with NCCL in $cuda (nvcc, include/nccl.h, lib64/libnccl.so.2)"; exit 1; }
start=$(date +%s)
say() { echo "[gpu_image_check $(( $(date +%s) - start ))s] $*"; }
root=$cache/root
# A mount left under the image by an interrupted run: removing the image would reach through it.
if grep -q " $root/" /proc/mounts; then
  echo "gpu_image_check: mounts are left under $root (an interrupted run?):"
  grep " $root/" /proc/mounts | cut -d' ' -f2
  echo "unmount them first (umount -R -l PATH)"; exit 1
fi

# ---- the image ----
if ((rebuild)) || [[ ! -f $cache/image-base.status || ! -x $root/usr/bin/cmake ]]; then
  command -v debootstrap >/dev/null || { echo "gpu_image_check: apt-get install debootstrap first"; exit 1; }
  mkdir -p "$cache"
  rm -rf "$cache/root.new"
  say "making the image: debootstrap Debian 12 minbase with g++ and python3 (a few minutes)"
  debootstrap --variant=minbase --include=g++,python3 bookworm "$cache/root.new" http://deb.debian.org/debian \
    > "$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log"; exit 1; }
  cp "$cache/root.new/var/lib/dpkg/status" "$cache/image-base.status.new"
  chroot "$cache/root.new" apt-get install -y -qq --no-install-recommends cmake ninja-build >> "$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log"; exit 1; }
  chroot "$cache/root.new" apt-get clean
  # The wheel's layout: nvidia/nccl/{include/nccl.h, lib/libnccl.so.2}, packages with __init__.py.
  site=$(chroot "$cache/root.new" python3 -c "import sysconfig; print(sysconfig.get_path('purelib', 'posix_local'))" \
         2>/dev/null) || site=""
  site=${site:-/usr/local/lib/python3.11/dist-packages}
  mkdir -p "$cache/root.new$site/nvidia/nccl/include" "$cache/root.new$site/nvidia/nccl/lib"
  touch "$cache/root.new$site/nvidia/__init__.py" "$cache/root.new$site/nvidia/nccl/__init__.py"
  cp "$cuda/include/nccl.h" "$cache/root.new$site/nvidia/nccl/include/"
  cp "$cuda/lib64/libnccl.so.2" "$cache/root.new$site/nvidia/nccl/lib/"
  rm -rf "$root"
  mv "$cache/root.new" "$root"
  mv "$cache/image-base.status.new" "$cache/image-base.status"
  say "image ready in $root"
fi
chroot "$root" python3 -c "import nvidia.nccl as m; print('nvidia.nccl in the image:', list(m.__path__)[0])"

# ---- what travels ----
say "staging the libraries (tools/gpu_stage_deps.sh against the image's packages)"
tools/gpu_stage_deps.sh --status "$cache/image-base.status" | tail -1
mounts=()
cleanup() {
  local m
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
work=$root/work/shardtrain
rm -rf "$root/tmp/stdeps" "$root/build-cuda.kept"
((keep_build)) && [[ -d $work/build-cuda ]] && mv "$work/build-cuda" "$root/build-cuda.kept"
rm -rf "$root/work"
mkdir -p "$work"
# The files a device call sends (tracked, and untracked but not ignored), then the carried .gpudeps.
git ls-files -z --cached --others --exclude-standard | tar --null --no-recursion -T - -cf - | tar -C "$work" -xf -
cp -r .gpudeps "$work/.gpudeps"
bytes=$(du -sb "$work" | cut -f1)
tree_bytes=$(du -sb --exclude=.gpudeps "$work" | cut -f1)
say "travelling: $(awk "BEGIN {printf \"%.1f\", $bytes / 1048576}") MiB (working tree" \
    "$(awk "BEGIN {printf \"%.1f\", $tree_bytes / 1048576}") MiB, .gpudeps" \
    "$(awk "BEGIN {printf \"%.1f\", ($bytes - $tree_bytes) / 1048576}") MiB); the limit is 64 MiB"
((bytes < 64 * 1048576)) || { say "FAILED: over the 64 MiB a device call may carry"; exit 1; }
if [[ -d $root/build-cuda.kept ]]; then mv "$root/build-cuda.kept" "$work/build-cuda"; fi

# ---- run gpu_check.sh inside ----
mkdir -p "$root$cuda" "$root/proc" "$root/dev" "$root/sys"
mount --bind "$cuda" "$root$cuda" && mounts+=("$root$cuda")
mount -o remount,bind,ro "$root$cuda" || true
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount --rbind /dev "$root/dev" && mounts+=("$root/dev")  # /dev/shm: Open MPI's shared memory
mount --rbind /sys "$root/sys" && mounts+=("$root/sys")  # hwloc reads the topology there
rm -rf "$cache/last"
mkdir -p "$cache/last"
say "running tools/gpu_check.sh --phases $phases --budget 0 --cmake-arg -DST_WERROR=ON in the image"
rc=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=$cuda/bin:/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 OUT=/work/out \
  bash -c "cd /work/shardtrain && tools/gpu_check.sh --phases $phases --budget 0 --cmake-arg -DST_WERROR=ON" || rc=$?
cp -r "$root/work/out/." "$cache/last/" 2>/dev/null || true
[[ -n ${OUT:-} ]] && cp -r "$root/work/out/." "$OUT/" 2>/dev/null
say "gpu_check.sh exited $rc; its log: $cache/last/gpu_check.log"
exit $rc
