#!/usr/bin/env bash
# Starts a one-machine Slurm cluster (munge, slurmctld, slurmd on localhost) for the Slurm tests,
# unless one answers already. Needs root and the packages tools/setup.sh installs (slurm-wlm,
# munge). Writes /etc/slurm/slurm.conf only when there is none. Idempotent.
set -euo pipefail

if scontrol ping 2>/dev/null | grep -q "is UP" && sinfo -h -o %T 2>/dev/null | grep -q -E "idle|mixed|alloc"; then
  exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "slurm_local: needs root (starts munged, slurmctld, slurmd)" >&2; exit 1; }

host=$(hostname -s)
cpus=$(nproc)
conf=/etc/slurm/slurm.conf
if [[ ! -f $conf ]]; then
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  cat > "$conf" <<CONF
# One-machine cluster for shardtrain's tests (tools/slurm_local.sh).
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
KillWait=10
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
fi

pgrep -x munged >/dev/null || { mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true; su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force; }
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 1 30); do
  if sinfo -h -o %T 2>/dev/null | grep -q -E "idle|mixed|alloc"; then
    echo "slurm_local: $host up ($cpus CPUs)"
    exit 0
  fi
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "slurm_local: the node did not come up; see /var/log/slurm/" >&2
exit 1
