#!/usr/bin/python3
"""Gradient all-reduce inside a training step: shared memory (in place) against the MPI library.

    /usr/bin/python3 tools/bench_intra_node.py [--rounds 3] [--steps 6] [--ranks 2] [--strategy ddp]

Trains the same model (8 layers, d_model 768: 57.0M parameters, 217 MiB of fp32 gradients) on
one host with parallel.intra_node = "shm" and = "mpi", alternating, `--rounds` times each, with
parallel.overlap = false so every step waits for its whole gradient reduction: the exposed
communication time per step is then the collectives' time. Reports medians over steps 2..N of
all rounds and prints a Markdown table for docs/benchmarks.md."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(build, intra, args, out_dir):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    sets = {
        "run.steps": args.steps, "run.out_dir": f'"{out_dir}"', "run.eval_every": 0, "checkpoint.every": 0,
        "model.n_layer": 8, "model.d_model": 768, "model.n_head": 12, "model.seq_len": 64,
        "data.global_batch": 2 * args.ranks, "parallel.strategy": f'"{args.strategy}"',
        "parallel.overlap": "false", "parallel.intra_node": f'"{intra}"',
    }
    command = ["mpirun", "-n", str(args.ranks), "--bind-to", "none", "--oversubscribe",
               os.path.join(build, "shardtrain"), "run", os.path.join(ROOT, "inputs", "default.toml")]
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    if done.returncode != 0:
        sys.exit(f"bench_intra_node: {intra} run failed:\n{done.stdout[-3000:]}")
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if r.get("kind") == "train" and r["step"] >= 2]
    return [(r["exposed_comm_ms"], r["ms"], r["comm_bytes"]) for r in steps]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--strategy", default="ddp")
    args = parser.parse_args()
    samples = {"shm": [], "mpi": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for intra in ("shm", "mpi"):
                samples[intra] += run(args.build, intra, args, os.path.join(tmp, f"{intra}{k}"))
    exposed = {i: statistics.median(s[0] for s in samples[i]) for i in samples}
    step = {i: statistics.median(s[1] for s in samples[i]) for i in samples}
    sent = samples["shm"][0][2]
    print(f"{args.strategy}, {args.ranks} ranks, {sent / 2**20:.2f} MiB sent per rank and step; "
          f"medians of {len(samples['shm'])} steps per setting\n")
    print("| intra_node | exposed comm ms/step | step ms | comm GB/s (bytes sent / exposed time) |")
    print("|---|---|---|---|")
    for intra in ("mpi", "shm"):
        print(f"| {intra} | {exposed[intra]:.1f} | {step[intra]:.1f} | {sent / exposed[intra] / 1e6:.2f} |")
    print(f"\nshm / mpi: communication {exposed['mpi'] / exposed['shm']:.2f}x faster, "
          f"step {step['mpi'] / step['shm']:.2f}x faster")


if __name__ == "__main__":
    main()
