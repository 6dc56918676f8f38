#!/usr/bin/python3
"""Plots the loss curves and step times of one or more runs to a PNG.

    tools/plot_metrics.py runs/default [runs/other ...] -o loss.png

Each argument is a run directory (holding metrics.jsonl) or a metrics.jsonl file. Uses Debian's
python3-matplotlib (run with /usr/bin/python3)."""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    train, val = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line ({e})")
            if row.get("kind") == "train":
                train.append(row)
            elif row.get("kind") == "val":
                val.append(row)
    if not train:
        sys.exit(f"{path}: no training steps recorded")
    return train, val


def smooth(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
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
        line, = ax_loss.plot(steps, smooth([r["loss"] for r in train], args.smooth), label=f"{label} train")
        ax_loss.plot(steps, [r["loss"] for r in train], color=line.get_color(), alpha=0.2, linewidth=0.8)
        if val:
            ax_loss.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o--", color=line.get_color(),
                         label=f"{label} validation")
        ax_time.plot(steps, [r["ms"] for r in train], color=line.get_color(), label=f"{label} step", linewidth=0.8)
        if all("exposed_comm_ms" in r for r in train):  # the time of the step spent waiting for communication
            ax_time.plot(steps, [r["exposed_comm_ms"] for r in train], ":", color=line.get_color(),
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
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
