#!/usr/bin/python3
"""Pipeline benchmark: the default deck's model trained on the same ranks as data parallelism
alone (ddp) and as pipelines of 2, 4, ... stages (1f1b, gpipe, and interleaved with 2 chunks a
stage where the model has the blocks), round after round so that the
machine's swings fall on every setting alike. Per setting: the median step time, the time rank 0
(the first stage) waited for other ranks (collectives and its neighbour stage's messages: the
pipeline's bubble shows here), the bytes it sent to the next stage, its activations, the largest
rank's accounted memory and the measured peak; beside them what `shardtrain plan` predicts for the
same deck on the same ranks, run just before each setting under the same mpirun: its step time,
its memory for the fullest stage and the bubble, (P - 1) / (m V) of a stage's work.

    /usr/bin/python3 tools/bench_pipeline.py [--ranks 2] [--rounds 3] [--steps 12] [--micro-batch 1]

Prints every sample, then Markdown tables of the medians over the rounds for docs/benchmarks.md.
More ranks than cores share them (mpirun --oversubscribe): the step times are then those of
ranks taking turns, alike for every setting."""
import argparse
import os
import statistics
import sys
import tempfile
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_strategies import metrics_of_run  # noqa: E402
from validate_planner import mpirun, plan_rows  # noqa: E402


def run(exe, deck, ranks, sets, work, label):
    flags = ("--oversubscribe",) if ranks > os.cpu_count() else ()
    rows = metrics_of_run(exe, deck, ranks, list(sets) + ["run.threads=1", "checkpoint.at_end=false"], work, label,
                          mpirun_flags=flags)
    train = [r for r in rows if r["kind"] == "train"][2:]  # the first steps fill caches and pools
    memory = [r for r in rows if r["kind"] == "memory"][-1]
    med = lambda key: statistics.median(r[key] for r in train)
    return {"ms": med("ms"), "waited_ms": med("exposed_comm_ms"), "pipeline_bytes": med("comm_pipeline_bytes"),
            "activations": memory["activations"], "largest": memory["largest_rank_total"],
            "peak": max(r["peak_bytes"] for r in train)}


def predict(exe, deck, ranks, sets, strategy, pipeline):
    """The planner's row for the deck's own strategy and pipeline, on the same ranks."""
    out = mpirun(ranks, [exe, "plan", deck] + [x for s in list(sets) + ["run.threads=1"] for x in ("--set", s)])
    for r in plan_rows(out):
        if r["strategy"] == strategy and r["pipeline"] == pipeline and r["tensor"] == 1:
            return r
    sys.exit(f"no row for {strategy} with {pipeline} stage(s) in the planner's output:\n{out}")


def label_of(setting):
    _, _, schedule, chunks = setting
    return schedule if chunks == 1 else f"{schedule}, V = {chunks}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", "default.toml"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--micro-batch", type=int, default=1)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="st_bench_pipeline_")
    with open(a.deck, "rb") as f:
        deck = tomllib.load(f)
    global_batch, n_layer = deck["data"]["global_batch"], deck["model"]["n_layer"]
    settings = [("ddp", 1, "1f1b", 1)]
    stages = 2
    while stages <= a.ranks:
        settings += [("ddp", stages, "1f1b", 1), ("ddp", stages, "gpipe", 1)]
        micro_batches = global_batch // (a.ranks // stages) // a.micro_batch
        if n_layer >= 2 * stages and micro_batches % stages == 0:
            settings.append(("ddp", stages, "interleaved", 2))
        stages *= 2
    samples = {s: [] for s in settings}
    predicted = {s: [] for s in settings}
    for round_ in range(a.rounds):
        for s in settings:
            strategy, pipeline, schedule, chunks = s
            label = f"r{round_}_p{pipeline}_{schedule}"
            sets = [f"run.steps={a.steps}", f"data.micro_batch={a.micro_batch}", f"parallel.pipeline={pipeline}",
                    f'parallel.pipeline_schedule="{schedule}"', f"parallel.virtual_stages={chunks}",
                    f'parallel.strategy="{strategy}"']
            plan = predict(a.exe, a.deck, a.ranks, sets, strategy, pipeline)
            got = run(a.exe, a.deck, a.ranks, sets, work, label)
            samples[s].append(got)
            predicted[s].append(plan)
            print(f"round {round_ + 1}: pipeline {pipeline} x data {a.ranks // pipeline} {label_of(s)}: "
                  f"{got['ms']:.1f} ms/step (plan {plan['step']:.1f}), waited {got['waited_ms']:.1f} ms, "
                  f"rank 0 sent {got['pipeline_bytes'] / 2**10:.0f} KiB, "
                  f"activations {got['activations'] / 2**20:.2f} MiB, largest rank {got['largest'] / 2**20:.2f} MiB "
                  f"(plan {plan['total'] / 2**20:.2f}), peak {got['peak'] / 2**20:.1f} MiB", flush=True)
    # Medians over the rounds: what was measured, then against the plan.
    measured, against_plan = [], []
    for s in settings:
        _, pipeline, _, chunks = s
        data = a.ranks // pipeline
        m = global_batch // data // a.micro_batch
        med = lambda key: statistics.median(x[key] for x in samples[s])
        planned = lambda key: statistics.median(x[key] for x in predicted[s])
        idle = med("waited_ms") / max(med("ms") - med("waited_ms"), 1e-9)
        name = f"| {pipeline} x {data} | {label_of(s) if pipeline > 1 else '-'} |"
        measured.append(f"{name} {m} | {med('ms'):.1f} | {med('waited_ms'):.1f} | {100 * idle:.0f}% | "
                        f"{100 * (pipeline - 1) / (m * chunks):.0f}% | {med('pipeline_bytes') / 2**10:.0f} KiB | "
                        f"{med('activations') / 2**20:.2f} MiB | {med('peak') / 2**20:.1f} MiB |")
        against_plan.append(f"{name} {med('ms'):.1f} | {planned('step'):.1f} | {planned('step') / med('ms'):.2f} | "
                            f"{med('largest') / 2**20:.2f} MiB | {planned('total') / 2**20:.2f} MiB | "
                            f"{planned('total') / med('largest'):.3f} |")
    print()
    print("| pipeline x data | schedule | micro-batches per rank | step ms | rank 0 waited ms | waited / (step - waited) "
          "| predicted bubble (P-1)/(mV) | rank 0 sent per step | rank 0 activations | peak memory |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(measured))
    print()
    print("| pipeline x data | schedule | step ms measured | step ms planned | planned / measured "
          "| largest rank measured | planned | planned / measured |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(against_plan))


if __name__ == "__main__":
    main()
