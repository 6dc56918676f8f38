"""A rank that skips a collective must not hang the job: within the timeout the job prints
which ranks wait in which operation, names the missing rank, and exits non-zero."""
import argparse
import os
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--probe", required=True)
p.add_argument("--mpiexec", required=True)
args = p.parse_args()

for intra in ("mpi", "shm"):
    cmd = [args.mpiexec, "-n", "3", "--bind-to", "none", args.probe, "2", "1", intra]
    start = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print(f"FAIL ({intra}): the job hung for 60 s despite a 2 s collective timeout")
        sys.exit(1)
    elapsed = time.time() - start
    err = proc.stderr
    checks = [
        (proc.returncode != 0, f"exits non-zero ({proc.returncode})"),
        (elapsed < 30, f"ends within 30 s ({elapsed:.1f} s)"),
        ("collective timeout" in err, "reports a collective timeout"),
        ("rank 0: waiting" in err and "in all_reduce #5" in err, "says rank 0 waits in all_reduce #5"),
        ("rank 1: waiting" in err and "in barrier #5" in err, "says rank 1 waits elsewhere (barrier #5)"),
        ("missing from all_reduce #5: rank 1\n" in err, "names rank 1 as the missing rank"),
        ("did not hang" not in proc.stdout, "no rank pretends to have finished"),
    ]
    for ok, what in checks:
        print(("ok: " if ok else "FAIL: ") + f"({intra}) " + what)
        if not ok:
            print("--- stderr:\n" + err)
            sys.exit(1)
print("passed")
