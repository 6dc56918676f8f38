"""A rank that skips a collective must not hang the job: within the timeout the job prints
which ranks wait in which operation, names the missing rank, and exits non-zero. The same for a
checkpoint's collective file I/O, under its own limit and exit code."""
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
# A checkpoint's collective file I/O has a watchdog of its own (checkpoint.timeout_s, exit code 5).
cmd = [args.mpiexec, "-n", "3", "--bind-to", "none", args.probe, "2", "1", "checkpoint"]
start = time.time()
try:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
except subprocess.TimeoutExpired:
    print("FAIL (checkpoint): the job hung for 60 s despite a 2 s checkpoint timeout")
    sys.exit(1)
elapsed = time.time() - start
err = proc.stderr
checks = [
    (proc.returncode == 5, f"exits with code 5 ({proc.returncode})"),
    (elapsed < 30, f"ends within 30 s ({elapsed:.1f} s)"),
    ("shardtrain: checkpoint timeout: rank " in err and "(checkpoint.timeout_s)" in err,
     "reports a checkpoint timeout and its key"),
    ("rank 0: waiting" in err and "in write of step 3 #1 (1.00 MiB, communicator 'checkpoint')" in err,
     "says rank 0 waits in the write of step 3"),
    ("rank 1: not in a checkpoint (0 entered so far)" in err, "says rank 1 never entered it"),
    ("missing from write of step 3 #1: rank 1\n" in err, "names rank 1 as the missing rank"),
    ("aborting the job (exit code 5)" in err, "says the exit code"),
]
for ok, what in checks:
    print(("ok: " if ok else "FAIL: ") + "(checkpoint) " + what)
    if not ok:
        print("--- stderr:\n" + err)
        sys.exit(1)
print("passed")
