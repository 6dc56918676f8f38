"""`shardtrain doctor`: one line per check with its verdict, under mpirun -n 2 and (where a
local Slurm cluster runs) under srun; a world size that does not match the launcher's is
reported as such, with the fix, and the exit code says a check failed."""
import os
import subprocess

import harness as h

args = h.parse_args(extra={"--slurm": {"action": "store_true"}})
CHECKS = ["mpi", "world size", "nodes", "transport", "ranks/cores", "threads", "blas", "topology", "memory", "disk", "probe"]


def verify(label, out, ranks):
    lines = out.splitlines()
    for check in CHECKS:
        h.check(any(l.split(None, 1)[0] in ("OK", "WARN", "FAIL") and l[6:].startswith(check) for l in lines),
                f"{label}: a line with a verdict for '{check}'")
    h.check(any(l.startswith("doctor: ") and " checks, " in l for l in lines), f"{label}: a summary line")
    h.check(f"{ranks} rank(s)" in out, f"{label}: reports {ranks} rank(s)")
    h.check("OpenBLAS kernel " in out, f"{label}: names the BLAS kernel in use")


if not args.slurm:
    proc = h.mpirun(args, 2, ["doctor"], timeout=120)
    h.check(proc.returncode == 0, f"mpirun -n 2: doctor exits 0\n{proc.stdout}\n{proc.stderr[-800:]}")
    verify("mpirun -n 2", proc.stdout, 2)
    h.check("FAIL" not in proc.stdout, "mpirun -n 2: no check fails")

    env = dict(os.environ, SLURM_NTASKS="2")
    proc = subprocess.run([args.mpiexec, "-n", "1", args.exe, "doctor"], capture_output=True, text=True, timeout=120,
                          env=env)
    h.check(proc.returncode != 0, f"SLURM_NTASKS=2 with one rank: doctor exits non-zero ({proc.returncode})")
    h.check("FAIL  world size    wrong world size: SLURM_NTASKS = 2 but MPI started 1 rank(s)" in proc.stdout,
            f"SLURM_NTASKS=2 with one rank: the wrong world size is reported\n{proc.stdout}")
    h.check("fix: launch with `srun --mpi=pmix`" in proc.stdout, "... with the fix")
else:
    h.require_slurm("srun")
    proc = subprocess.run(["srun", "--mpi=pmix", "-n", "2", args.exe, "doctor"], capture_output=True, text=True,
                          timeout=300)
    h.check(proc.returncode == 0, f"srun -n 2: doctor exits 0\n{proc.stdout}\n{proc.stderr[-800:]}")
    verify("srun -n 2", proc.stdout, 2)
    h.check("inside Slurm job" in proc.stdout and "SLURM_NTASKS = 2" in proc.stdout, "srun -n 2: sees the Slurm job")
    # An allocation of two tasks in which one rank is started.
    proc = subprocess.run(["salloc", "-n", "2", args.mpiexec, "-n", "1", args.exe, "doctor"], capture_output=True,
                          text=True, timeout=300)
    h.check(proc.returncode != 0 and "wrong world size: SLURM_NTASKS = 2 but MPI started 1 rank(s)" in proc.stdout,
            f"salloc -n 2 with one rank: the wrong world size is reported\n{proc.stdout}\n{proc.stderr[-600:]}")
print("passed")
