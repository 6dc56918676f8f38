#!/usr/bin/python3
"""Tensor parallelism against its prediction: step time and memory per rank for (tensor,
data-parallel) = (1, 4), (2, 2) and (4, 1) on 4 ranks (and (1, 2), (2, 1) on 2) at d_model 768,
each next to the planner's prediction for it, the settings interleaved round by round.

    /usr/bin/python3 tools/bench_tensor.py [--ranks 4] [--rounds 2] [--steps 6]

For each setting `shardtrain plan` runs first under the same mpirun (its ranks probe the sgemm
and memory copy rates together, as in training) with the deck's parallel.tensor, then the run
trains; measured step = median after the first two steps; measured memory = rank 0's growth over
what it held before the run's buffers, at the end, both as its peak resident set (which counts the
pages of other ranks' shared-memory windows it reads) and as its proportional set (those pages
split between the ranks); predicted memory = the plan's total per rank (model state +
activations + workspace). This machine's
speed swings within minutes (docs/benchmarks.md): every sample is printed, with the load average.
Prints Markdown tables for docs/benchmarks.md."""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from validate_planner import mpirun, plan_rows  # noqa: E402  (mpirun as root, failing loudly; the plan's rows)
DECK = """[run]
steps = {steps}
log_every = 1
eval_every = 0
sample_tokens = 0
[model]
n_layer = 2
d_model = 768
n_head = 12
seq_len = 256
vocab_size = 256
[data]
path = "{data}"
global_batch = 8
micro_batch = 2
[parallel]
strategy = "{strategy}"
tensor = {tensor}
"""


def predict(exe, deck, ranks, tensor, strategy):
    out = mpirun(ranks, [exe, "plan", deck])
    for r in plan_rows(out):
        if r["strategy"] == strategy and r["tensor"] == tensor and r["pipeline"] == 1:
            return {"step": r["step"], "exposed": r["exposed"], "memory": r["total"]}
    sys.exit(f"no row for tensor {tensor} x {strategy} in the planner's output:\n{out}")


def measure(exe, deck, ranks, out_dir):
    mpirun(ranks, [exe, "run", deck, "--set", f"run.out_dir={out_dir}"])
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    train = [r for r in rows if r["kind"] == "train"][2:]
    memory = [r for r in rows if r["kind"] == "memory"][-1]
    resident = memory["resident_peak"] - memory["resident_before"]
    proportional = memory["proportional_now"] - memory["proportional_before"]
    return (statistics.median(r["ms"] for r in train), statistics.median(r["exposed_comm_ms"] for r in train),
            resident, proportional)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.txt"))
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--strategy", default="zero1")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="st_bench_tensor_")
    degrees = [t for t in (1, 2, 4) if a.ranks % t == 0]
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| round | tensor x data | strategy | predicted step ms | measured step ms | predicted / measured | "
          "predicted memory MiB | measured: proportional MiB | predicted / measured | peak resident MiB | "
          "exposed comm ms (predicted / measured, both with the tensor group's collectives) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for r in range(1, a.rounds + 1):
        for tensor in degrees:
            deck = os.path.join(work, f"t{tensor}.toml")
            with open(deck, "w") as f:
                f.write(DECK.format(steps=a.steps, data=a.data, strategy=a.strategy, tensor=tensor))
            pred = predict(a.exe, deck, a.ranks, tensor, a.strategy)
            ms, exposed, resident, grown = measure(a.exe, deck, a.ranks, os.path.join(work, f"r{r}_t{tensor}"))
            step_ratio, mem_ratio = pred["step"] / ms, pred["memory"] / grown
            results.append((tensor, step_ratio, mem_ratio))
            mark = lambda x: "" if abs(x - 1) <= 0.25 else " (miss)"
            print(f"| {r} | {tensor} x {a.ranks // tensor} | {a.strategy} | {pred['step']:.1f} | {ms:.1f} | "
                  f"{step_ratio:.2f}{mark(step_ratio)} | {pred['memory'] / 2**20:.1f} | {grown / 2**20:.1f} | "
                  f"{mem_ratio:.2f}{mark(mem_ratio)} | {resident / 2**20:.1f} | "
                  f"{pred['exposed']:.1f} / {exposed:.1f} |", flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    steps_within = sum(abs(s - 1) <= 0.25 for _, s, _ in results)
    mem_within = sum(abs(m - 1) <= 0.25 for _, _, m in results)
    print(f"\n{steps_within} of {len(results)} step-time predictions and {mem_within} of {len(results)} memory "
          "predictions within 25% of the measurement.")


if __name__ == "__main__":
    main()
