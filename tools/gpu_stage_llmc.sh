#!/usr/bin/env bash
# Run here before tools/gpu_check.sh --phases ...,llmc goes to a GPU machine (which has no network):
# copies llm.c's sources (github.com/karpathy/llm.c) from a local snapshot into .gpudeps/llm.c/,
# which git ignores and the device call carries with the rest of .gpudeps. llm.c's code is never
# committed here: the phase builds its train_gpt2cu from this copy on the GPU machine.
#
#   tools/gpu_stage_llmc.sh [--from SNAPSHOT] [--rev REV]
# --from: a git directory (bare or a checkout's .git) or a checkout of llm.c; default $LLMC_SNAPSHOT,
#   else /work/.mirror/karpathy+llm.c/repo. A git directory is read at --rev (default HEAD) with
#   git archive; a plain directory is copied as it is.
# Writes .gpudeps/llm.c/ (about 1.2 MiB: the sources, llm.c's Makefile, no build outputs) and
# .gpudeps/llm.c/SNAPSHOT (where from, and the commit). With the device tool: carry [".gpudeps"].
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
from=${LLMC_SNAPSHOT:-/work/.mirror/karpathy+llm.c/repo}
rev=HEAD
while (($#)); do
  case $1 in
    --from) from=$2; shift ;;
    --rev) rev=$2; shift ;;
    *) echo "gpu_stage_llmc: unknown argument $1"; exit 2 ;;
  esac
  shift
done
dest=.gpudeps/llm.c
mkdir -p .gpudeps
tmp=$(mktemp -d .gpudeps/llm.c.new.XXXXXX)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
if git --git-dir="$from" rev-parse --verify --quiet "$rev^{commit}" >/dev/null 2>&1; then
  commit=$(git --git-dir="$from" rev-parse "$rev^{commit}")
  git --git-dir="$from" archive "$commit" | tar -x -C "$tmp"
  where="$from at $commit ($(git --git-dir="$from" log -1 --format='%cs %s' "$commit"))"
elif [[ -d $from/.git ]] && git -C "$from" rev-parse --verify --quiet "$rev^{commit}" >/dev/null 2>&1; then
  commit=$(git -C "$from" rev-parse "$rev^{commit}")
  git -C "$from" archive "$commit" | tar -x -C "$tmp"
  where="$from at $commit ($(git -C "$from" log -1 --format='%cs %s' "$commit"))"
elif [[ -d $from ]]; then
  cp -a "$from"/. "$tmp"/
  rm -rf "$tmp/.git" "$tmp/build" "$tmp"/train_gpt2cu
  where="$from (a plain copy; no commit)"
else
  echo "gpu_stage_llmc: $from is neither a git directory nor a directory (give --from)"; exit 1
fi
for f in Makefile train_gpt2.cu llmc/dataloader.h llmc/mfu.h; do
  [[ -f $tmp/$f ]] || { echo "gpu_stage_llmc: $from has no $f: not llm.c?"; exit 1; }
done
echo "$where" > "$tmp/SNAPSHOT"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "gpu_stage_llmc: $dest from $where; $(du -sh --apparent-size "$dest" | cut -f1) in all"
