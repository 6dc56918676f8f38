"""tools/plot_metrics.py answers a path that is not a run in one line on standard error, exit code
1, never a traceback: a missing run directory, a directory without metrics.jsonl, a file that is
not metrics, an output it cannot write. A run directory with metrics gives a PNG, also when its
losses are null (a diverged run's NaN)."""
import json
import os
import subprocess

import harness as h

args = h.parse_args()
PYTHON = "/usr/bin/python3"  # Debian's, which sees python3-matplotlib
if subprocess.run([PYTHON, "-c", "import matplotlib"], capture_output=True).returncode != 0:
    print("SKIP: Debian's python3-matplotlib is not installed (tools/setup.sh installs it)")
    raise SystemExit(h.SKIP)
tool = os.path.join(args.source, "tools", "plot_metrics.py")
work = h.tmpdir()


def plot(*argv):
    return subprocess.run([PYTHON, tool, *argv], capture_output=True, text=True, timeout=120)


run = os.path.join(work, "run")
os.makedirs(run)
with open(os.path.join(run, "metrics.jsonl"), "w") as f:
    for step in range(1, 31):
        f.write(json.dumps({"kind": "train", "step": step, "loss": 5.5 / step ** 0.3, "ms": 10 + step % 3}) + "\n")
    f.write(json.dumps({"kind": "val", "step": 30, "val_loss": 2.9}) + "\n")
not_metrics = h.write_deck(work, "notes.txt", "these are notes\n")
empty_dir = os.path.join(work, "empty_dir")
os.makedirs(empty_dir)
png = os.path.join(work, "loss.png")

cases = [
    ("a missing run directory", [os.path.join(work, "no_such_run"), "-o", png],
     f"plot_metrics.py: {work}/no_such_run: no such run directory or metrics file"),
    ("a directory without metrics.jsonl", [empty_dir, "-o", png], f"plot_metrics.py: {empty_dir}: no metrics.jsonl"),
    ("a file that is not metrics", [not_metrics, "-o", png], f"plot_metrics.py: {not_metrics}:1: not a JSON line"),
    ("an output it cannot write", [run, "-o", os.path.join(work, "no_such_dir", "x.png")],
     f"plot_metrics.py: cannot write {work}/no_such_dir/x.png: No such file or directory"),
]
for name, argv, expected in cases:
    proc = plot(*argv)
    lines = proc.stderr.strip().splitlines()
    h.check(proc.returncode == 1 and len(lines) == 1 and lines[0].startswith(expected) and "Traceback" not in proc.stderr,
            f"{name}: one line, exit code 1 (got {proc.returncode}: {proc.stderr.strip()[-600:]!r})")
h.check(not os.path.exists(png), "no plot is written for a bad run")

proc = plot(run, "-o", png)
h.check(proc.returncode == 0 and proc.stdout.strip() == f"wrote {png}", f"a run's metrics are plotted\n{proc.stderr}")
with open(png, "rb") as f:
    head = f.read(8)
h.check(head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10000, f"into a PNG ({os.path.getsize(png)} bytes)")

# A run that diverged: its losses from step 11 on were NaN, which metrics.jsonl holds as null.
diverged = os.path.join(work, "diverged")
os.makedirs(diverged)
with open(os.path.join(diverged, "metrics.jsonl"), "w") as f:
    for step in range(1, 31):
        loss = 5.5 / step ** 0.3 if step <= 10 else None
        f.write(json.dumps({"kind": "train", "step": step, "loss": loss, "ms": 10 + step % 3}) + "\n")
    f.write(json.dumps({"kind": "val", "step": 30, "val_loss": None}) + "\n")
os.remove(png)
proc = plot(run, diverged, "-o", png)
h.check(proc.returncode == 0 and "Traceback" not in proc.stderr and os.path.getsize(png) > 10000,
        f"a run whose losses are null (NaN) is plotted beside another\n{proc.stderr[-600:]}")
print("passed")
