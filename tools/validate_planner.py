#!/usr/bin/python3
"""Planner validation: predicted against measured step time for every strategy at 1, 2 and 4
ranks on this node, and on 2 x 2 emulated nodes with the inter-node link throttled (0.05 and
1 GB/s); and whether `auto`'s choice is the measured-fastest strategy or within 5% of it.

    /usr/bin/python3 tools/validate_planner.py [--steps 8] [--plot docs/img/planner.png]

For each setting the planner runs first under the same mpirun (`shardtrain plan`: its ranks
probe the sgemm and memory copy rates together, as in training), then each strategy trains the
default deck's model; measured = median step time after the first two steps. This machine's
speed swings within minutes (docs/benchmarks.md), so each prediction is taken next to its
measurements. Prints Markdown tables for docs/benchmarks.md."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# A row of `shardtrain plan`'s table: rank, strategy (a trailing * where it reduces every
# micro-batch), tensor, pipe, group, recompute, state, activations, workspace, total (each
# "<number> <unit>"), fits, compute, comm, exposed and step ms, "<- chosen" on the choice.
SIZE = r"([\d.]+ \S?i?B)"
ROW = re.compile(r"^(\S+)\s+(ddp|zero1|zero2|zero3|hsdp)(\*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+" +
                 r"\s+".join([SIZE] * 4) + r"\s+(yes|NO)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(\s+<- chosen)?$", re.M)
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}


def bytes_of(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def plan_rows(text):
    """The rows of a `shardtrain plan` table (tools/bench_tensor.py and bench_pipeline.py read them
    through this too)."""
    rows = []
    for m in ROW.finditer(text):
        rows.append({"strategy": m.group(2), "each_micro_batch": m.group(3) == "*", "tensor": int(m.group(4)),
                     "pipeline": int(m.group(5)), "group": int(m.group(6)), "recompute": m.group(7),
                     "state": bytes_of(m.group(8)), "activations": bytes_of(m.group(9)),
                     "workspace": bytes_of(m.group(10)), "total": bytes_of(m.group(11)), "fits": m.group(12) == "yes",
                     "compute": float(m.group(13)), "comm": float(m.group(14)), "exposed": float(m.group(15)),
                     "step": float(m.group(16)), "chosen": bool(m.group(17))})
    return rows


def mpirun(ranks, argv):
    cmd = ["mpirun", "-n", str(ranks), "--bind-to", "none", "--oversubscribe"] + argv
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def plan(exe, deck, ranks, sets):
    """The rows with whole layers and no pipeline by strategy, and the chosen row, whichever it is
    (on emulated nodes the planner also plans pipelines, which may win)."""
    out = mpirun(ranks, [exe, "plan", deck] + [x for s in sets for x in ("--set", s)])
    every = plan_rows(out)
    rows = {r["strategy"]: r for r in every if r["tensor"] == 1 and r["pipeline"] == 1}
    chosen = [r for r in every if r["chosen"]]
    if not rows or not chosen:
        sys.exit(f"no table or no choice in the planner's output:\n{out}")
    return rows, chosen[0]


def measure(exe, deck, ranks, sets, work, label):
    out = os.path.join(work, label)
    mpirun(ranks, [exe, "run", deck] + [x for s in sets + [f"run.out_dir={out}"] for x in ("--set", s)])
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    train = [r for r in rows if r["kind"] == "train"][2:]
    return statistics.median(r["ms"] for r in train), statistics.median(r["exposed_comm_ms"] for r in train)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", "default.toml"))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--plot", default="")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="st_validate_planner_")
    base = [f"run.steps={a.steps}", "run.sample_tokens=0", "run.eval_every=0", "run.log_every=1000"]
    settings = [("1 rank", 1, []), ("2 ranks", 2, []), ("4 ranks", 4, []),
                ("2x2 nodes, 1 GB/s", 4, ["parallel.ranks_per_node=2", "parallel.inter_node_gbps=1"]),
                ("2x2 nodes, 0.05 GB/s", 4, ["parallel.ranks_per_node=2", "parallel.inter_node_gbps=0.05"])]
    results = []
    # Other jobs on a shared machine change its speed between the probe and the runs: say how busy it was.
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| setting | strategy | predicted step ms | measured step ms | predicted / measured | "
          "predicted exposed comm ms | measured exposed comm ms |")
    print("|---|---|---|---|---|---|---|")
    choices = []
    for name, ranks, sets in settings:
        predicted, choice = plan(a.exe, a.deck, ranks, base + sets)
        if choice["pipeline"] > 1:  # measured too, as the setting auto would run
            name_of = f"{choice['strategy']} x pipeline {choice['pipeline']}"
            predicted[name_of] = dict(choice, run=[f'parallel.strategy="{choice["strategy"]}"',
                                                   f"parallel.pipeline={choice['pipeline']}", "run.sample_every=0"])
        measured = {}
        for strategy, pred in predicted.items():
            extra = pred.get("run", [f'parallel.strategy="{strategy}"'])
            if strategy == "hsdp":
                extra.append("parallel.shard_group=2")
            ms, exposed = measure(a.exe, a.deck, ranks, base + sets + extra, work,
                                  f"{name.replace(' ', '_').replace(',', '').replace('/', '')}_{strategy}")
            measured[strategy] = ms
            ratio = pred["step"] / ms
            results.append((name, strategy, pred["step"], ms))
            print(f"| {name} | {strategy} | {pred['step']:.1f} | {ms:.1f} | {ratio:.2f}{'' if abs(ratio - 1) <= 0.25 else ' (miss)'} "
                  f"| {pred['exposed']:.1f} | {exposed:.1f} |", flush=True)
        chosen = next(s for s, r in predicted.items() if r["chosen"] and (r["pipeline"] > 1 or choice["pipeline"] == 1))
        fastest = min(measured, key=measured.get)
        choices.append((name, chosen, measured[chosen], fastest, measured[fastest]))
    print()
    print("| setting | auto chose | its measured step ms | measured fastest | its step ms | auto's pick slower by |")
    print("|---|---|---|---|---|---|")
    for name, chosen, c_ms, fastest, f_ms in choices:
        slower = c_ms / f_ms - 1
        print(f"| {name} | {chosen} | {c_ms:.1f} | {fastest} | {f_ms:.1f} | {100 * slower:.1f}%"
              f"{'' if slower <= 0.05 else ' (miss)'} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    within = sum(abs(p / m - 1) <= 0.25 for _, _, p, m in results)
    print(f"\n{within} of {len(results)} predictions within 25% of the measured step time.")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 6))
        for name, _, _ in settings:
            pts = [(m, p) for n, _, p, m in results if n == name]
            ax.scatter([x for x, _ in pts], [y for _, y in pts], label=name)
        top = max(max(p, m) for _, _, p, m in results) * 1.1
        ax.plot([0, top], [0, top], "k-", lw=0.8)
        ax.plot([0, top], [0, top * 1.25], "k:", lw=0.8)
        ax.plot([0, top], [0, top * 0.75], "k:", lw=0.8)
        ax.set_xlabel("measured step time (ms)")
        ax.set_ylabel("predicted step time (ms)")
        ax.set_title("shardtrain plan: predicted vs measured (dotted: +-25%)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"wrote {a.plot}")


if __name__ == "__main__":
    main()
