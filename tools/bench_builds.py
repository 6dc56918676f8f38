#!/usr/bin/python3
"""Two builds of shardtrain side by side: the default deck's step time with each, interleaved.

    /usr/bin/python3 tools/bench_builds.py BASELINE_EXE NEW_EXE [--settings 1x2 2x1] [--rounds 3] [--steps 40]

For each round and each setting RANKSxTHREADS (ranks under mpirun, run.threads per rank) it runs
inputs/default.toml for --steps steps with the baseline, then with the new build, and takes the
median step time after the first five steps from metrics.jsonl. Every sample is printed, then
the ratios new/baseline per setting (a machine whose speed swings within minutes gives meaning
to ratios of runs made back to back, not to times). Build the baseline from the commit to
compare with (git worktree add ../base COMMIT && tools/build.sh in it)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_step_ms(exe, ranks, threads, steps, work, label):
    out = os.path.join(work, label)
    cmd = ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-n", str(ranks), exe, "run", "inputs/default.toml",
           "--set", f"run.steps={steps}", "--set", "run.eval_every=0", "--set", "run.sample_tokens=0",
           "--set", f"run.threads={threads}", "--set", f'run.out_dir="{out}"']
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_builds.py: {' '.join(cmd)} failed\n{proc.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return statistics.median(r["ms"] for r in rows if r["kind"] == "train" and r["step"] > 5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("baseline")
    p.add_argument("new")
    p.add_argument("--settings", nargs="+", default=["1x2", "2x1"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="bench_builds_")
    ratios = {s: [] for s in a.settings}
    print("| round | ranks x threads | baseline ms/step | new ms/step | new / baseline |")
    print("|---|---|---|---|---|")
    for r in range(1, a.rounds + 1):
        for setting in a.settings:
            ranks, threads = (int(x) for x in setting.split("x"))
            base = median_step_ms(os.path.abspath(a.baseline), ranks, threads, a.steps, work, f"base_{r}_{setting}")
            new = median_step_ms(os.path.abspath(a.new), ranks, threads, a.steps, work, f"new_{r}_{setting}")
            ratios[setting].append(new / base)
            print(f"| {r} | {setting} | {base:.1f} | {new:.1f} | {new / base:.2f} |", flush=True)
    for setting, values in ratios.items():
        print(f"\n{setting}: new / baseline median {statistics.median(values):.2f} "
              f"(samples {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
