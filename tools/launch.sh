#!/usr/bin/env bash
# Starts shardtrain on N ranks: srun inside a Slurm allocation, mpirun elsewhere.
#   tools/launch.sh [-n RANKS] run|check DECK [--set section.key=value ...]
# Ctrl-C (SIGINT) or SIGTERM stops a run the documented way: every rank finishes its step,
# writes a checkpoint, and this script exits with code 4 (a second one aborts: code 5).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ranks=2
if [[ ${1:-} == -n ]]; then ranks=$2; shift 2; fi
exe=${SHARDTRAIN:-$here/build/shardtrain}
if [[ -n ${SLURM_JOB_ID:-} ]] && command -v srun >/dev/null; then
  launcher=(srun --mpi=pmix -n "$ranks")
else
  launcher=(mpirun)
  # Open MPI refuses root unless told; more ranks than cores needs --oversubscribe.
  [[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
  (( ranks > $(nproc) )) && launcher+=(--oversubscribe)
  launcher+=(-n "$ranks")
fi

# Neither launcher passes SIGINT or SIGTERM on to the ranks as they are. Open MPI's mpirun
# (4.1) ends the job: it sends the ranks SIGCONT, SIGTERM a second later and SIGKILL a second
# after that, and exits 1 whatever the ranks did, so the checkpoint is cut short and exit code 4
# is lost. srun (22.05) kills the step on SIGTERM (exit 137), and on SIGINT prints the tasks'
# state and goes on ("one more within 1 sec to abort"). Both forward SIGUSR1
# to every rank and then return the ranks' exit code. So the launcher runs in a process group
# of its own (job control, set -m: a Ctrl-C in the terminal reaches this script, not the
# launcher), this script passes SIGINT and SIGTERM on to it as SIGUSR1, and exits with its code.
set -m
# Which signal this script received, for the ranks to name in their log (they get SIGUSR1).
stop_note=$(mktemp "${TMPDIR:-/tmp}/shardtrain-stop.XXXXXX")
export SHARDTRAIN_STOP_NOTE=$stop_note
[[ ${launcher[0]} == mpirun ]] && launcher+=(-x SHARDTRAIN_STOP_NOTE)

# shardtrain says what went wrong in one line; Open MPI then adds a banner of ten (MPI_ABORT was
# invoked..., a process returned a non-zero exit code...) that says nothing more. Its stderr goes
# through this filter, which drops those banners and passes everything else on as it comes.
filter_banners() {
  awk '
    function flush_block(   keep) {
      keep = block !~ /MPI_ABORT was invoked|Primary job +terminated normally|mpirun detected that one or more processes exited|mpirun has exited due to process rank/
      if (keep) printf "%s", block
      block = ""; in_block = 0; fflush()
    }
    /^--------------------+$/ { if (in_block) { block = block $0 "\n"; flush_block() } else { in_block = 1; block = $0 "\n" } next }
    in_block { block = block $0 "\n"; next }
    /has sent help message|orte_base_help_aggregate/ { next }
    { print; fflush() }
    END { if (in_block) printf "%s", block }'
}
stderr_pipe=$(mktemp -u "${TMPDIR:-/tmp}/shardtrain-stderr.XXXXXX")
mkfifo "$stderr_pipe"
filter_banners <"$stderr_pipe" >&2 &
filter_pid=$!
trap 'rm -f "$stop_note" "$stderr_pipe"' EXIT

"${launcher[@]}" "$exe" "$@" </dev/null 2>"$stderr_pipe" &
launcher_pid=$!
# shellcheck disable=SC2317  # called by the traps below
forward() {
  echo "launch.sh: $1: asking the ranks to checkpoint and stop (SIGUSR1; a second one aborts)" >&2
  echo "$1" >"$stop_note"
  kill -USR1 "$launcher_pid" 2>/dev/null || true
}
trap 'forward SIGINT' INT
trap 'forward SIGTERM' TERM
# `wait` returns early when a trapped signal arrives: wait again until the launcher has ended.
status=0
while kill -0 "$launcher_pid" 2>/dev/null; do
  wait "$launcher_pid" && status=0 || status=$?
done
wait "$launcher_pid" && status=0 || status=$?  # its exit code, also when it ended during a trap
wait "$filter_pid" 2>/dev/null || true           # the last of its stderr is out before this script ends
exit "$status"
