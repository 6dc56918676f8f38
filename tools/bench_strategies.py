#!/usr/bin/python3
"""Strategy benchmark: step time (compute and exposed communication), bytes per level and
memory per rank for every strategy at 1, 2 and 4 ranks, and the overlap experiment: on 2 x 2
emulated nodes behind a slow link, ddp's bucketed all-reduce and zero3's prefetch against the
same runs with parallel.overlap = false.

    /usr/bin/python3 tools/bench_strategies.py [--steps 8] [--gbps 0.02] [--plot docs/img/strategies.png]

Prints Markdown tables for docs/benchmarks.md; the plot shows the step-time breakdown and the
memory per rank of each strategy. All runs use the default deck's model (inputs/default.toml)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")


def metrics_of_run(exe, deck, ranks, sets, work, label, mpirun_flags=("--oversubscribe",)):
    """Trains `deck` on `ranks` ranks with the --set overrides `sets` (no samples, evaluations or
    log lines between steps), in work/label; exits naming the run if it fails. Its metrics.jsonl
    rows. (tools/bench_pipeline.py runs its settings through this too.)"""
    out = os.path.join(work, label)
    cmd = ["mpirun", "-n", str(ranks), "--bind-to", "none", *mpirun_flags, exe, "run", deck,
           "--set", f"run.out_dir={out}", "--set", "run.sample_tokens=0", "--set", "run.eval_every=0",
           "--set", "run.log_every=1000"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def run(exe, deck, ranks, sets, work, label):
    rows = metrics_of_run(exe, deck, ranks, sets, work, label)
    train = [r for r in rows if r["kind"] == "train"][2:]  # the first steps fill the workspace and caches
    memory = [r for r in rows if r["kind"] == "memory"][-1]
    med = lambda key: statistics.median(r[key] for r in train)
    return {"ms": med("ms"), "exposed_ms": med("exposed_comm_ms"), "intra": med("comm_intra_bytes"),
            "inter": med("comm_inter_bytes"), "state": memory["params"] + memory["grads"] + memory["optimizer"],
            "workspace": memory["workspace"], "largest": memory["largest_rank_total"] - memory["activations"]}


def mib(x):
    return f"{x / 2**20:.2f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", "default.toml"))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--gbps", type=float, default=0.02, help="emulated inter-node link for the overlap runs")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="ddp bucket size for the overlap runs")
    p.add_argument("--layout", default="2x2", help="emulated nodes x ranks per node for the overlap runs")
    p.add_argument("--repeat", type=int, default=3, help="overlap off/on pairs per strategy")
    p.add_argument("--only-overlap", action="store_true", help="skip the strategy table")
    p.add_argument("--plot", default=os.path.join(ROOT, "docs", "img", "strategies.png"))
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="st_bench_strategies_")
    steps = [f"run.steps={a.steps}"]

    results = {}
    print("| strategy | ranks | step ms | compute ms | exposed comm ms | intra-node B/step | inter-node B/step "
          "| model state MiB (rank 0) | workspace MiB | largest rank MiB (state + workspace) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for strategy in () if a.only_overlap else STRATEGIES:
        for ranks in (1, 2, 4):
            sets = steps + [f"parallel.strategy={strategy}"]
            if strategy == "hsdp":
                sets.append(f"parallel.ranks_per_node={min(ranks, 2)}")  # groups of 2 on nodes of 2
            r = run(a.exe, a.deck, ranks, sets, work, f"{strategy}_np{ranks}")
            results[(strategy, ranks)] = r
            print(f"| {strategy} | {ranks} | {r['ms']:.1f} | {r['ms'] - r['exposed_ms']:.1f} | {r['exposed_ms']:.1f} "
                  f"| {r['intra']:.0f} | {r['inter']:.0f} | {mib(r['state'])} | {mib(r['workspace'])} "
                  f"| {mib(r['largest'])} |", flush=True)

    print()
    print(f"Overlap on {a.layout} emulated nodes, inter-node link emulated at {a.gbps} GB/s, ddp buckets of {a.bucket_mb} MiB:")
    print()
    print("| strategy | repeat | step ms, overlap off | exposed comm ms, off (= comm time) | step ms, on "
          "| exposed comm ms, on | hidden: by exposed time | hidden: by step time |")
    print("|---|---|---|---|---|---|---|---|")
    nodes, per_node = (int(x) for x in a.layout.split("x"))
    slow = steps + [f"parallel.ranks_per_node={per_node}", f"parallel.inter_node_gbps={a.gbps}", f"parallel.bucket_mb={a.bucket_mb}"]
    for strategy in ("ddp", "zero3"):
        shares = []
        for repeat in range(a.repeat):  # off and on alternate, so drifts of this machine hit both
            off = run(a.exe, a.deck, nodes * per_node, slow + [f"parallel.strategy={strategy}", "parallel.overlap=false"], work,
                      f"{strategy}_overlap_off_{repeat}")
            on = run(a.exe, a.deck, nodes * per_node, slow + [f"parallel.strategy={strategy}"], work, f"{strategy}_overlap_on_{repeat}")
            # With overlap off every collective is waited for where it starts: its exposed time is
            # the communication time. Hidden by exposed time: the part no longer waited for; by step
            # time: what the step gained (less where the progress threads slow compute down).
            hidden = 1 - on["exposed_ms"] / off["exposed_ms"]
            by_step = (off["ms"] - on["ms"]) / off["exposed_ms"]
            shares.append((hidden, by_step))
            print(f"| {strategy} | {repeat + 1} | {off['ms']:.1f} | {off['exposed_ms']:.1f} | {on['ms']:.1f} "
                  f"| {on['exposed_ms']:.1f} | {hidden * 100:.0f}% | {by_step * 100:.0f}% |", flush=True)
        print(f"| {strategy} | median | | | | | {statistics.median(x for x, _ in shares) * 100:.0f}% "
              f"| {statistics.median(y for _, y in shares) * 100:.0f}% |", flush=True)

    if a.plot and results:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        os.makedirs(os.path.dirname(a.plot), exist_ok=True)
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
        labels, compute, exposed, state, workspace = [], [], [], [], []
        for (strategy, ranks), r in results.items():
            labels.append(f"{strategy}\n{ranks}")
            compute.append(r["ms"] - r["exposed_ms"])
            exposed.append(r["exposed_ms"])
            state.append(r["state"] / 2**20)
            workspace.append(r["workspace"] / 2**20)
        x = range(len(labels))
        left.bar(x, compute, label="compute (and other)")
        left.bar(x, exposed, bottom=compute, label="exposed communication")
        left.set_xticks(list(x), labels, fontsize=7)
        left.set_ylabel("ms per step (median)")
        left.set_title("step time by strategy and ranks")
        left.legend()
        right.bar(x, state, label="model state")
        right.bar(x, workspace, bottom=state, label="workspace (gathers, buckets)")
        right.set_xticks(list(x), labels, fontsize=7)
        right.set_ylabel("MiB on rank 0")
        right.set_title("memory per rank (activations excluded)")
        right.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"\nplot: {os.path.relpath(a.plot, ROOT)}")


if __name__ == "__main__":
    main()
