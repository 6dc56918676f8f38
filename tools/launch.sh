#!/usr/bin/env bash
# Starts shardtrain on N ranks: srun inside a Slurm allocation, mpirun elsewhere.
#   tools/launch.sh [-n RANKS] run|check DECK [--set section.key=value ...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ranks=2
if [[ ${1:-} == -n ]]; then ranks=$2; shift 2; fi
exe=${SHARDTRAIN:-$here/build/shardtrain}
if [[ -n ${SLURM_JOB_ID:-} ]] && command -v srun >/dev/null; then
  exec srun --mpi=pmix -n "$ranks" "$exe" "$@"
fi
flags=()
# Open MPI refuses root unless told; more ranks than cores needs --oversubscribe.
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
(( ranks > $(nproc) )) && flags+=(--oversubscribe)
exec mpirun "${flags[@]}" -n "$ranks" "$exe" "$@"
