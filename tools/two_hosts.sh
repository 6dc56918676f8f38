#!/usr/bin/env bash
# Two real hosts on one machine, for running shardtrain across nodes the way a cluster runs it.
#
# Each host is a set of Linux namespaces held open by a `sleep infinity`: its own network stack
# (net), its own hostname (uts) and its own mounts (mount: a fresh /dev/shm tmpfs and an
# /etc/hosts naming both hosts). The hosts are joined by a veth pair whose addresses
# (10.250.0.1 and 10.250.0.2) exist only inside these namespaces, with no route out. The files
# are those of the machine, so the same build runs on both.
#
# Open MPI launches onto the hosts as onto ssh-reachable nodes: `run` starts mpirun inside host
# A with a hostfile of both hosts and an rsh agent that enters host B's namespaces instead of
# logging in. It allows only TCP between hosts (btl tcp,self,vader: vader moves bytes only
# between ranks of one host, whose /dev/shm they share) on the veth's addresses.
#
#   tools/two_hosts.sh up                  make the hosts (prints where its files are)
#   tools/two_hosts.sh run MPIRUN-ARGS...  mpirun on both hosts, e.g. run -n 4 build/shardtrain doctor
#   tools/two_hosts.sh exec a|b CMD...     a command inside one host
#   tools/two_hosts.sh kill a|b            kill -9 every process of that host (a host failure)
#   tools/two_hosts.sh down                end every process in the hosts and remove what up made
#   tools/two_hosts.sh slurm up            a Slurm cluster of the two hosts: slurmctld and a slurmd on
#                                          host-a, a slurmd on host-b (its own config, ports and state)
#   tools/two_hosts.sh slurm CMD...        a Slurm command inside host-a against that cluster, e.g.
#                                          slurm sbatch -N 2 -n 4 jobscripts/train.sbatch
#
# TWO_HOSTS_DIR (default /tmp/shardtrain-two-hosts) holds the state, so several pairs can exist
# at once (each test makes its own). TWO_HOSTS_SLOTS (default 2) is the slots per host.
# TWO_HOSTS_LIFETIME (seconds, default: until `down`) ends the hosts' namespaces by themselves
# once that time has passed and their last process has ended (tests set it, so a killed test
# leaves nothing behind for long).
# Needs root and a kernel that permits these namespaces; where it does not, `up` prints why and
# exits 77 (the tests then skip, saying so).
set -euo pipefail

dir=${TWO_HOSTS_DIR:-/tmp/shardtrain-two-hosts}
slots=${TWO_HOSTS_SLOTS:-2}
lifetime=${TWO_HOSTS_LIFETIME:-infinity}
hosts=(a b)
declare -A addr=([a]=10.250.0.1 [b]=10.250.0.2)
subnet=10.250.0.0/24
refused=77

die() { echo "two_hosts: $*" >&2; exit 1; }
hostname_of() { echo "host-$1"; }
holder() { cat "$dir/$1.pid" 2>/dev/null || true; }
alive() { local p; p=$(holder "$1"); [[ -n $p && -e /proc/$p/ns/net ]]; }

# The reason this machine cannot make the hosts, or nothing.
why_not() {
  if [[ $(id -u) -ne 0 ]]; then echo "needs root (network namespaces and veth pairs)"; return; fi
  for tool in unshare nsenter ip mpirun; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed"; return; }
  done
  local err
  if ! err=$(unshare --net --uts --mount true 2>&1); then
    echo "this machine does not permit network/UTS/mount namespaces: ${err:-unshare failed}"; return
  fi
}

# Every process inside host $1's network namespace (its holder included).
members() {
  local p ns pid
  p=$(holder "$1")
  [[ -n $p ]] || return 0
  ns=$(readlink "/proc/$p/ns/net" 2>/dev/null) || return 0
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$ns" ]] && echo "$pid"
  done
  return 0
}

in_host() {  # in_host a|b CMD...: CMD inside that host's namespaces, in the current directory
  local h=$1; shift
  alive "$h" || die "host $h is not up (tools/two_hosts.sh up)"
  exec nsenter -t "$(holder "$h")" --net --uts --mount --wd="$PWD" -- "$@"
}

up() {
  local reason
  reason=$(why_not)
  if [[ -n $reason ]]; then echo "two_hosts: refused: $reason" >&2; exit $refused; fi
  if alive a && alive b; then echo "two_hosts: already up in $dir"; return; fi
  mkdir -p "$dir"
  local h p
  for h in "${hosts[@]}"; do
    # The holder keeps the namespaces alive; setsid detaches it from this shell and its signals.
    setsid unshare --net --uts --mount --propagation private sleep "$lifetime" </dev/null >/dev/null 2>&1 &
    echo $! > "$dir/$h.pid"
    disown
  done
  for h in "${hosts[@]}"; do  # unshare execs sleep once the namespaces exist
    for _ in $(seq 50); do
      p=$(holder "$h")
      [[ $(readlink "/proc/$p/ns/net" 2>/dev/null) != "$(readlink /proc/self/ns/net)" &&
         $(readlink "/proc/$p/exe" 2>/dev/null) == */sleep ]] && break
      sleep 0.05
    done
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == */sleep ]] || { down; die "host $h's namespaces did not come up"; }
  done
  {
    echo "127.0.0.1 localhost"
    for h in "${hosts[@]}"; do echo "${addr[$h]} $(hostname_of "$h")"; done
  } > "$dir/hosts"
  # The veth's ends are made directly in the two namespaces: no name or address ever exists
  # outside them, so pairs made for parallel tests cannot collide.
  ip link add name veth-st netns "$(holder a)" type veth peer name veth-st netns "$(holder b)" ||
    { down; die "cannot make a veth pair between the hosts"; }
  for h in "${hosts[@]}"; do
    p=$(holder "$h")
    nsenter -t "$p" --uts hostname "$(hostname_of "$h")"
    nsenter -t "$p" --mount mount -t tmpfs -o mode=1777 tmpfs /dev/shm
    nsenter -t "$p" --mount mount --bind "$dir/hosts" /etc/hosts
    nsenter -t "$p" --net ip link set lo up
    nsenter -t "$p" --net ip addr add "${addr[$h]}/24" dev veth-st
    nsenter -t "$p" --net ip link set veth-st up
  done
  for h in "${hosts[@]}"; do echo "$(hostname_of "$h") slots=$slots"; done > "$dir/hostfile"
  # Open MPI calls the agent as it calls ssh: [options] HOST COMMAND-STRING. The command runs
  # inside HOST's namespaces with the small environment an ssh login would give.
  cat > "$dir/rsh_agent" <<AGENT
#!/usr/bin/env bash
# rsh agent for mpirun --mca plm_rsh_agent (made by tools/two_hosts.sh up): enters a host's
# namespaces instead of logging in over ssh.
set -euo pipefail
while [[ \$# -gt 0 && \$1 == -* ]]; do shift; done
case \${1:-} in
  $(hostname_of a)|${addr[a]}) pid=\$(cat "$dir/a.pid") ;;
  $(hostname_of b)|${addr[b]}) pid=\$(cat "$dir/b.pid") ;;
  *) echo "rsh_agent: unknown host '\${1:-}' (this pair has $(hostname_of a) and $(hostname_of b))" >&2; exit 255 ;;
esac
shift
exec nsenter -t "\$pid" --net --uts --mount -- env -i PATH="\$PATH" HOME="\${HOME:-/root}" \\
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 /bin/sh -c "\$*"
AGENT
  chmod +x "$dir/rsh_agent"
  # Reachability without ping: a TCP connection to a closed port is refused only if it arrives.
  local probe
  probe=$(nsenter -t "$(holder a)" --net timeout 3 bash -c "echo > /dev/tcp/${addr[b]}/9" 2>&1 || true)
  [[ $probe == *"Connection refused"* ]] || { down; die "host a cannot reach host b over the veth pair: $probe"; }
  echo "two_hosts: up in $dir: $(hostname_of a) ${addr[a]} (holder $(holder a)), $(hostname_of b) ${addr[b]} (holder $(holder b)), $slots slot(s) each"
}

down() {
  local h pids
  for h in "${hosts[@]}"; do
    pids=$(members "$h")
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
  done
  for h in "${hosts[@]}"; do
    local p; p=$(holder "$h")
    if [[ -n $p ]]; then
      for _ in $(seq 50); do [[ -e /proc/$p ]] || break; sleep 0.05; done
    fi
    rm -f "$dir/$h.pid"
  done
  rm -f "$dir/hosts" "$dir/hostfile" "$dir/rsh_agent"
  rm -rf "$dir/slurm"  # only what `slurm up` made; its daemons and mounts ended with the hosts
  rmdir "$dir" 2>/dev/null || true
}

run() {
  { alive a && alive b; } || die "the hosts are not up (tools/two_hosts.sh up)"
  # The hosts need root to exist, so mpirun runs as root too, which Open MPI refuses unless told.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # plm_rsh_no_tree_spawn: mpirun starts every daemon itself through the agent. The other host's
  # ranks get mpirun's environment only as -x names it: OPENBLAS_CORETYPE, where this machine
  # sets it, so that both hosts run the BLAS kernels srun's tasks (which get the whole
  # environment) run; without it host-b's OpenBLAS picked its own and the bits differed.
  local forward=()
  [[ -n ${OPENBLAS_CORETYPE:-} ]] && forward=(-x OPENBLAS_CORETYPE)
  in_host a mpirun --hostfile "$dir/hostfile" "${forward[@]}" \
    --mca plm_rsh_agent "$dir/rsh_agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self,vader \
    --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" "$@"
}

# Slurm on the two hosts: a cluster of its own (config, ports, state, logs under $dir/slurm), so
# the machine's own Slurm is left alone. Its daemons live in the hosts' namespaces and end with
# them (`down`). Each host gets a private Slurm TmpFS: the PMIx plugin makes per-job directories
# there whose names would collide in the /tmp the hosts share.
slurm_conf() { echo "$dir/slurm/slurm.conf"; }

slurm_up() {
  { alive a && alive b; } || die "the hosts are not up (tools/two_hosts.sh up)"
  local d="$dir/slurm" h p
  mkdir -p "$d/state" "$d/tmp" "$d/spool-$(hostname_of a)" "$d/spool-$(hostname_of b)"
  cat > "$d/slurm.conf" <<CONF
# Two-host cluster of tools/two_hosts.sh (not the machine's own Slurm).
ClusterName=twohosts
SlurmctldHost=$(hostname_of a)(${addr[a]})
SlurmctldPort=6917
SlurmdPort=6918
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
TmpFS=$d/tmp
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
KillWait=10
NodeName=$(hostname_of a) NodeAddr=${addr[a]} CPUs=$slots State=UNKNOWN
NodeName=$(hostname_of b) NodeAddr=${addr[b]} CPUs=$slots State=UNKNOWN
PartitionName=two Nodes=$(hostname_of a),$(hostname_of b) Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  pgrep -x munged >/dev/null || die "munged is not running (tools/slurm_local.sh starts it)"
  for h in "${hosts[@]}"; do
    nsenter -t "$(holder "$h")" --mount mount -t tmpfs -o mode=1777 tmpfs "$d/tmp"
  done
  nsenter -t "$(holder a)" --net --uts --mount -- slurmctld -f "$d/slurm.conf"
  for h in "${hosts[@]}"; do
    nsenter -t "$(holder "$h")" --net --uts --mount -- slurmd -f "$d/slurm.conf" -N "$(hostname_of "$h")"
  done
  for _ in $(seq 60); do
    if [[ $(nsenter -t "$(holder a)" --net --uts --mount -- env SLURM_CONF="$d/slurm.conf" sinfo -h -o %T 2>/dev/null |
            grep -c -E "idle|mixed|alloc") -ge 1 ]] &&
       nsenter -t "$(holder a)" --net --uts --mount -- env SLURM_CONF="$d/slurm.conf" sinfo -h -N -o "%N %T" 2>/dev/null |
         awk '$2 ~ /idle|mixed|alloc/ {n++} END {exit n == 2 ? 0 : 1}'; then
      echo "two_hosts: Slurm cluster 'twohosts' up: $(hostname_of a) (slurmctld, slurmd), $(hostname_of b) (slurmd); config $d/slurm.conf"
      return
    fi
    sleep 0.5
  done
  die "the Slurm nodes did not come up; see $d/*.log"
}

slurm_command() {
  [[ -f $(slurm_conf) ]] || die "no Slurm cluster on the hosts (tools/two_hosts.sh slurm up)"
  # What `run` gives mpirun, through the environment srun passes to the tasks.
  export SLURM_CONF
  SLURM_CONF=$(slurm_conf)
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=$subnet \
    OMPI_MCA_oob_tcp_if_include=$subnet OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  in_host a "$@"
}

kill_host() {
  local pids
  alive "$1" || die "host $1 is not up"
  pids=$(members "$1" | grep -v -x "$(holder "$1")" || true)
  # shellcheck disable=SC2086
  [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
  echo "two_hosts: killed $(echo "$pids" | wc -w) process(es) on $(hostname_of "$1")"
}

host_arg() { [[ ${1:-} == a || ${1:-} == b ]] || die "name a host: a or b"; }

case ${1:-} in
  up) up ;;
  down) down ;;
  run) shift; run "$@" ;;
  exec) shift; host_arg "${1:-}"; in_host "$@" ;;
  kill) host_arg "${2:-}"; kill_host "$2" ;;
  slurm) shift; if [[ ${1:-} == up ]]; then slurm_up; else slurm_command "$@"; fi ;;
  check) reason=$(why_not); [[ -z $reason ]] || { echo "two_hosts: refused: $reason" >&2; exit $refused; } ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
