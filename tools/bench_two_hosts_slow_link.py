#!/usr/bin/python3
"""Slow-link emulation on top of a real TCP link: two hosts made by tools/two_hosts.sh, 2 ranks
each, hsdp, the same run with and without parallel.inter_node_gbps, alternating.

    /usr/bin/python3 tools/bench_two_hosts_slow_link.py [--rounds 4] [--steps 12] [--gbps 0.005]

With parallel.overlap = false every cross-node collective is waited for, and the throttle makes
each one last at least its bytes / rate (latency 0 here). The predicted step time of the slow run
is therefore the fast run's step time plus (inter-node bytes per step) / rate, minus the time the
real link took for those bytes (not subtracted: it is part of the error). Prints every round's
median step time (steps 3..N) of both runs, the measured and predicted slowdown, and their
ratio. Needs root (tools/two_hosts.sh)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(build, args, out_dir, gbps, env):
    sets = {
        "run.steps": args.steps, "run.out_dir": f'"{out_dir}"', "run.eval_every": 0, "run.sample_tokens": 0,
        "checkpoint.every": 0, "model.n_layer": 2, "model.d_model": 64, "model.n_head": 4, "model.seq_len": 32,
        "data.global_batch": 8, "data.path": f'"{os.path.join(ROOT, "data", "fortunes.txt")}"',
        "parallel.strategy": '"hsdp"', "parallel.overlap": "false", "parallel.inter_node_gbps": gbps,
    }
    command = [os.path.join(HERE, "two_hosts.sh"), "run", "-n", "4", "--bind-to", "none",
               os.path.join(build, "shardtrain"), "run", os.path.join(ROOT, "inputs", "default.toml")]
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    if done.returncode != 0:
        sys.exit(f"bench_two_hosts_slow_link: run at {gbps} GB/s failed:\n{done.stdout[-3000:]}")
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if r.get("kind") == "train" and r["step"] >= 3]
    return statistics.median(r["ms"] for r in steps), statistics.median(r["comm_inter_bytes"] for r in steps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--gbps", type=float, default=0.005)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="st_bench_slow_link_")
    env = dict(os.environ, TWO_HOSTS_DIR=os.path.join(work, "hosts"))
    up = subprocess.run([os.path.join(HERE, "two_hosts.sh"), "up"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(f"bench_two_hosts_slow_link: {up.stderr.strip()}")
    try:
        print(f"hsdp on 2 hosts x 2 ranks, overlap off, inter_node_gbps {args.gbps} against 0, medians of steps "
              f"3..{args.steps}\n")
        print("| round | real TCP ms/step | emulated ms/step | inter-node B/step | measured extra ms | "
              "predicted extra ms | measured / predicted |")
        print("|---|---|---|---|---|---|---|")
        ratios = []
        for i in range(1, args.rounds + 1):
            fast, _ = run(args.build, args, os.path.join(work, f"fast{i}"), 0, env)
            slow, inter = run(args.build, args, os.path.join(work, f"slow{i}"), args.gbps, env)
            predicted = inter / (args.gbps * 1e9) * 1e3
            ratios.append((slow - fast) / predicted)
            print(f"| {i} | {fast:.1f} | {slow:.1f} | {inter:.0f} | {slow - fast:.1f} | {predicted:.1f} | "
                  f"{ratios[-1]:.2f} |", flush=True)
        print(f"\nmeasured / predicted: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")
    finally:
        subprocess.run([os.path.join(HERE, "two_hosts.sh"), "down"], env=env)


if __name__ == "__main__":
    main()
