"""Shared helpers for the end-to-end tests: run the real executable under mpirun on decks."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def parse_args(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--exe", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--ranks", type=int, default=1)
    for name, kw in (extra or {}).items():
        p.add_argument(name, **kw)
    return p.parse_args()


def corpus(args):
    path = os.path.join(args.source, "data", "fortunes.txt")
    if not os.path.exists(path):
        fail(f"{path} is missing: run tools/setup.sh first (it prepares the training text)")
    return path


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print("ok:", message)


def mpirun(args, ranks, argv, timeout=300, cwd=None):
    cmd = [args.mpiexec, "-n", str(ranks)]
    if ranks > (os.cpu_count() or 1):
        cmd += ["--bind-to", "none"]
    cmd += [args.exe] + argv
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        fail(f"timed out after {timeout}s (a hang?): {' '.join(cmd)}")
    return proc


def write_deck(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def metrics(run_dir):
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rows.append(json.loads(line))
    return rows


def tmpdir():
    return tempfile.mkdtemp(prefix="st_e2e_")
