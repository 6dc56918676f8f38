"""`shardtrain doctor`: one line per check with its verdict, under mpirun -n 2 and (where a
local Slurm cluster runs) under srun; a world size that does not match the launcher's is
reported as such, with the fix, and the exit code says a check failed. Ranks whose threads share
a CPU while another CPU of the host runs none of them are named (OpenMP's binding or the
launcher's), and so is a rank whose sgemm rate with every rank busy is far below one rank's
alone. The CPU sets are read, not timed: those checks are exact; the rate is tested only where
four ranks share one CPU (about a quarter of the lone rate, far below the 0.6 flagged)."""
import os
import re
import subprocess

import harness as h

args = h.parse_args(extra={"--slurm": {"action": "store_true"}})
CHECKS = ["mpi", "world size", "nodes", "transport", "ranks/cores", "threads", "cpu sets", "blas", "topology", "memory",
          "disk", "probe"]
OMP_BIND = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}


def line_of(out, check):
    """The verdict line of a check ("WARN  cpu sets    ...")."""
    return next((l for l in out.splitlines() if l[6:].startswith(check)), "")


def said(condition, message, text):
    """h.check with the text it read, shown when the check fails."""
    h.check(condition, message + ("" if condition else "\n" + text))


def doctor(launcher, env=None):
    proc = subprocess.run(launcher + [args.exe, "doctor"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))
    said(proc.returncode == 0, f"{' '.join(launcher)} doctor exits 0", proc.stdout + proc.stderr[-800:])
    return proc.stdout


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

    # Where each rank's threads run. Needs two CPUs this test may use: one for the ranks, one idle.
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print(f"note: one CPU to use ({cpus}): the CPU-set checks need two, not run")
    else:
        out = doctor([args.mpiexec, "-n", "2"])
        sets = line_of(out, "cpu sets")
        said(sets.startswith("OK"), "mpirun -n 2: no overlap reported", sets)
        # OpenMP told to bind where the launcher does not: every rank's thread goes to the first CPU.
        out = doctor([args.mpiexec, "-n", "2", "--bind-to", "none", "-x", "OMP_PROC_BIND", "-x", "OMP_PLACES"], OMP_BIND)
        sets = line_of(out, "cpu sets")
        said(sets.startswith("WARN") and f"ranks 0,1 run their threads on the same CPU(s) {cpus[0]}," in sets
             and "fix: unset OMP_PROC_BIND and OMP_PLACES" in sets,
             "OMP_PROC_BIND=close with unbound ranks: the shared CPU is named, with the fix", sets)
        said(re.search(r"while no rank's threads may run on CPU\(s\) \S*" + str(cpus[1]), sets) is not None,
             "... and the idle CPU", sets)
        # The run's thread count is what the launcher gave, not the one place OpenMP pinned the
        # first thread to: one rank alone, unbound, uses every CPU.
        out = doctor([args.mpiexec, "-n", "1", "--bind-to", "none", "-x", "OMP_PROC_BIND", "-x", "OMP_PLACES"], OMP_BIND)
        said(f"the run uses {len(cpus)} thread(s) per rank" in line_of(out, "threads"),
             f"OMP_PROC_BIND=close, one rank: {len(cpus)} threads, not 1", line_of(out, "threads"))
        # The launcher binding four ranks to one CPU: the overlap, and each rank's sgemm rate far
        # below one rank's alone.
        out = doctor([args.mpiexec, "-n", "4", "--oversubscribe", "--cpu-set", str(cpus[0]), "--bind-to",
                      "core:overload-allowed"])
        sets = line_of(out, "cpu sets")
        said(sets.startswith("WARN") and f"ranks 0,1,2,3 run their threads on the same CPU(s) {cpus[0]}," in sets
             and "fix: bind each rank to cores of its own" in sets,
             f"four ranks bound to CPU {cpus[0]}: the overlap is named, with the launcher's fix", sets)
        probe = line_of(out, "probe")
        ratios = re.search(r"\(([\d.]+)(?:-([\d.]+))? of alone\)", probe)
        said(ratios is not None and probe.startswith("WARN") and "rank(s) 0,1,2,3 at " in probe
             and "fix: give each rank cores of its own" in probe,
             "four ranks on one CPU: each rank's sgemm rate is flagged against one rank's alone", probe)
        print(f"note: four ranks on one CPU computed at {ratios.group(1)}-{ratios.group(2) or ratios.group(1)} "
              f"of one rank's rate alone")
    # Ranks whose OpenBLAS picked other kernels (nodes of other CPUs; here OPENBLAS_CORETYPE
    # told apart per rank): named, with the fix, since the bits then depend on where a rank runs.
    proc = subprocess.run([args.mpiexec, "-n", "1", "-x", "OPENBLAS_CORETYPE=Haswell", args.exe, "doctor", ":",
                           "-n", "1", "-x", "OPENBLAS_CORETYPE=Sandybridge", args.exe, "doctor"],
                          capture_output=True, text=True, timeout=300)
    blas = line_of(proc.stdout, "blas")
    said(blas.startswith("WARN") and "Haswell on rank 0, Sandybridge on rank 1" in blas and
         "OPENBLAS_CORETYPE" in blas, "ranks with other BLAS kernels are named", blas or proc.stderr[-600:])
    blas = line_of(doctor([args.mpiexec, "-n", "2"]), "blas")
    said(blas.startswith("OK"), "one kernel on every rank: blas OK", blas)
else:
    h.require_slurm("srun")
    proc = subprocess.run(["srun", "--mpi=pmix", "-n", "2", args.exe, "doctor"], capture_output=True, text=True,
                          timeout=300)
    h.check(proc.returncode == 0, f"srun -n 2: doctor exits 0\n{proc.stdout}\n{proc.stderr[-800:]}")
    verify("srun -n 2", proc.stdout, 2)
    h.check("inside Slurm job" in proc.stdout and "SLURM_NTASKS = 2" in proc.stdout, "srun -n 2: sees the Slurm job")
    said(line_of(proc.stdout, "cpu sets").startswith("OK"), "srun -n 2: no overlap reported",
         line_of(proc.stdout, "cpu sets"))
    # Where Slurm does not bind tasks (task/none), OpenMP's binding puts both ranks' threads on one CPU.
    masks = subprocess.run(["srun", "-n", "2", "grep", "Cpus_allowed_list", "/proc/self/status"], capture_output=True,
                           text=True, timeout=120).stdout.split()
    unbound = len(set(m for m in masks if m[0].isdigit())) == 1 and len(os.sched_getaffinity(0)) > 1
    if not unbound:
        print(f"note: this Slurm binds its tasks ({masks}): the unbound case is not run")
    else:
        out = doctor(["srun", "--mpi=pmix", "-n", "2"], OMP_BIND)
        sets = line_of(out, "cpu sets")
        said(sets.startswith("WARN") and "ranks 0,1 run their threads on the same CPU(s)" in sets
             and "(OMP_PROC_BIND=close, OMP_PLACES=cores" in sets,
             "srun -n 2 with OMP_PROC_BIND=close on unbound tasks: the overlap is named", sets)
    # An allocation of two tasks in which one rank is started.
    proc = subprocess.run(["salloc", "-n", "2", args.mpiexec, "-n", "1", args.exe, "doctor"], capture_output=True,
                          text=True, timeout=300)
    h.check(proc.returncode != 0 and "wrong world size: SLURM_NTASKS = 2 but MPI started 1 rank(s)" in proc.stdout,
            f"salloc -n 2 with one rank: the wrong world size is reported\n{proc.stdout}\n{proc.stderr[-600:]}")
print("passed")
