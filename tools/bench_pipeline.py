#!/usr/bin/python3
"""Pipeline benchmark: the default deck's model trained on the same ranks as data parallelism
alone (ddp) and as a pipeline of stages (1f1b, gpipe), round after round so that the machine's
swings fall on every setting alike. Per setting: the median step time, the time rank 0 waited
for other ranks (collectives and its neighbour stage's messages: the pipeline's bubble shows
here), the bytes it sent to the next stage, its activations and its measured peak memory; and
the bubble the schedule predicts, (P - 1) / m of the compute.

    /usr/bin/python3 tools/bench_pipeline.py [--ranks 2] [--rounds 3] [--steps 12] [--micro-batch 1]

Prints every sample, then a Markdown table of the medians over the rounds for docs/benchmarks.md.
One rank per core: on a machine of two cores, 2 ranks (a pipeline of 2, or 2 data-parallel
ranks)."""
import argparse
import os
import statistics
import tempfile
import tomllib

from bench_strategies import metrics_of_run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(exe, deck, ranks, sets, work, label):
    rows = metrics_of_run(exe, deck, ranks, list(sets) + ["run.threads=1", "checkpoint.at_end=false"], work, label,
                          mpirun_flags=())
    train = [r for r in rows if r["kind"] == "train"][2:]  # the first steps fill caches and pools
    memory = [r for r in rows if r["kind"] == "memory"][-1]
    med = lambda key: statistics.median(r[key] for r in train)
    return {"ms": med("ms"), "waited_ms": med("exposed_comm_ms"), "pipeline_bytes": med("comm_pipeline_bytes"),
            "activations": memory["activations"], "peak": max(r["peak_bytes"] for r in train)}


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
    settings = [("ddp", 1, "1f1b")]
    stages = 2
    while stages <= a.ranks:
        settings += [("ddp", stages, "1f1b"), ("ddp", stages, "gpipe")]
        stages *= 2
    samples = {s: [] for s in settings}
    for round_ in range(a.rounds):
        for s in settings:
            strategy, pipeline, schedule = s
            label = f"r{round_}_p{pipeline}_{schedule}"
            got = run(a.exe, a.deck, a.ranks, [f"run.steps={a.steps}", f"data.micro_batch={a.micro_batch}",
                                               f"parallel.pipeline={pipeline}",
                                               f'parallel.pipeline_schedule="{schedule}"'], work, label)
            samples[s].append(got)
            print(f"round {round_ + 1}: pipeline {pipeline} x data {a.ranks // pipeline} {schedule}: "
                  f"{got['ms']:.1f} ms/step, waited {got['waited_ms']:.1f} ms, "
                  f"sent to the next stage {got['pipeline_bytes'] / 2**10:.0f} KiB, "
                  f"activations {got['activations'] / 2**20:.2f} MiB, peak {got['peak'] / 2**20:.1f} MiB", flush=True)
    print()
    print("| pipeline x data | schedule | micro-batches per rank | step ms | rank 0 waited ms | waited / (step - waited) "
          "| predicted bubble (P-1)/m | to next stage per step | activations | peak memory |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with open(a.deck, "rb") as f:
        global_batch = tomllib.load(f)["data"]["global_batch"]
    for s in settings:
        strategy, pipeline, schedule = s
        data = a.ranks // pipeline
        m = global_batch // data // a.micro_batch
        med = lambda key: statistics.median(x[key] for x in samples[s])
        idle = med("waited_ms") / max(med("ms") - med("waited_ms"), 1e-9)
        bubble = (pipeline - 1) / m
        print(f"| {pipeline} x {data} | {schedule if pipeline > 1 else '-'} | {m} | {med('ms'):.1f} | "
              f"{med('waited_ms'):.1f} | {100 * idle:.0f}% | {100 * bubble:.0f}% | "
              f"{med('pipeline_bytes') / 2**10:.0f} KiB | {med('activations') / 2**20:.2f} MiB | "
              f"{med('peak') / 2**20:.1f} MiB |")


if __name__ == "__main__":
    main()
