#!/usr/bin/python3
"""Plots the loss curves and step times of one or more runs to a PNG.

    tools/plot_metrics.py runs/default [runs/other ...] -o loss.png

Each argument is a run directory (holding metrics.jsonl) or a metrics.jsonl file. Uses Debian's
python3-matplotlib (run with /usr/bin/python3)."""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def fail(message):
    """One line on standard error and exit code 1: a user's mistake is not a traceback."""
    sys.exit(f"plot_metrics.py: {message}")


def load(path):
    if not os.path.exists(path):
        fail(f"{path}: no such run directory or metrics file")
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "metrics.jsonl")):
            fail(f"{path}: no metrics.jsonl in this directory (a run directory gets one at its first step; "
                 f"the run's run.out_dir names it)")
        path = os.path.join(path, "metrics.jsonl")
    train, val = [], []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    fail(f"{path}:{number}: not a JSON line ({e})")
                if not isinstance(row, dict):
                    fail(f"{path}:{number}: not a metrics row (a JSON object)")
                if row.get("kind") == "train":
                    train.append(row)
                elif row.get("kind") == "val":
                    val.append(row)
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}")
    if not train:
        fail(f"{path}: no training steps recorded")
    return train, val


def numbers(rows, key):
    """The values of `key`; a number the run could not write (a diverged loss is NaN or infinite,
    which JSON holds as null) as NaN, which leaves a gap in the plot."""
    return [math.nan if r[key] is None else r[key] for r in rows]


def smooth(values, window):
    """The mean of the finite values among the last `window` (NaN where there are none)."""
    out = []
    for i in range(len(values)):
        finite = [v for v in values[max(0, i + 1 - window):i + 1] if math.isfinite(v)]
        out.append(sum(finite) / len(finite) if finite else math.nan)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories or metrics.jsonl files")
    p.add_argument("-o", "--output", default="loss.png", help="PNG file to write (default: loss.png)")
    p.add_argument("--smooth", type=int, default=20, help="moving-average window for the training loss")
    args = p.parse_args()

    fig, (ax_loss, ax_time) = plt.subplots(1, 2, figsize=(13, 4.8))
    for run in args.runs:
        train, val = load(run)
        label = os.path.basename(os.path.normpath(run))
        steps = [r["step"] for r in train]
        loss = numbers(train, "loss")
        line, = ax_loss.plot(steps, smooth(loss, args.smooth), label=f"{label} train")
        ax_loss.plot(steps, loss, color=line.get_color(), alpha=0.2, linewidth=0.8)
        if val:
            ax_loss.plot([r["step"] for r in val], numbers(val, "val_loss"), "o--", color=line.get_color(),
                         label=f"{label} validation")
        ax_time.plot(steps, numbers(train, "ms"), color=line.get_color(), label=f"{label} step", linewidth=0.8)
        if all("exposed_comm_ms" in r for r in train):  # the time of the step spent waiting for communication
            ax_time.plot(steps, numbers(train, "exposed_comm_ms"), ":", color=line.get_color(),
                         label=f"{label} exposed communication", linewidth=0.8)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss (nats per token)")
    ax_loss.set_title(f"loss (training: {args.smooth}-step moving average)")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_time.set_xlabel("step")
    ax_time.set_ylabel("ms per step")
    ax_time.set_title("step time and its exposed communication")
    ax_time.grid(alpha=0.3)
    ax_time.legend()
    fig.tight_layout()
    try:
        fig.savefig(args.output, dpi=110)
    except OSError as e:
        fail(f"cannot write {args.output}: {e.strerror or e}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
