#!/usr/bin/python3
"""Activation recomputation benchmark: memory and step time of model.recompute = none, selective
and full, side by side in one run.

    /usr/bin/python3 tools/bench_recompute.py [--rounds 3] [--steps 4] [--batch 1] [--arch gpt2|llama]

d_model 768, 12 heads, 4 layers, seq_len 1024 (byte vocabulary), one rank pinned to core 0 with
one thread; GPT-2, or (--arch llama) a Llama of SmolLM2's proportions (4 key/value heads for the
12 query heads, SwiGLU 2048 wide). Each round trains the three settings one after another (none, selective, full, in
that order, so a change of machine speed shows in the rounds rather than in one setting), each
for a few steps. Per run: the median step time over the steps after the first, the activation
bytes the run accounts, its predicted memory per rank, and the measured growth of the resident
set (peak resident above what the process held before the run's buffers). Ratios are against
the none run of the same round. Prints every sample and a Markdown summary for
docs/benchmarks.md."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SETTINGS = ("none", "selective", "full")
MiB = 2 ** 20


def run(exe, setting, steps, batch, corpus, work, label, arch="gpt2"):
    out = os.path.join(work, label)
    deck = os.path.join(work, f"{label}.toml")
    with open(deck, "w") as f:
        f.write(f"""[run]
steps = {steps}
log_every = 1
eval_every = 0
eval_batches = 1
sample_tokens = 0
threads = 1
out_dir = "{out}"
[model]
{'arch = "llama"' + chr(10) + 'n_kv_head = 4' + chr(10) + 'ffn_dim = 2048' + chr(10) if arch == "llama" else ""}n_layer = 4
d_model = 768
n_head = 12
seq_len = 1024
recompute = "{setting}"
[data]
path = "{corpus}"
global_batch = {batch}
[checkpoint]
every = 0
""")
    proc = subprocess.run(["taskset", "-c", "0", exe, "run", deck], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"shardtrain failed ({setting}):\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    ms = [r["ms"] for r in rows if r["kind"] == "train"][1:]  # the first step warms caches up
    memory = [r for r in rows if r["kind"] == "memory"][-1]
    return {"ms": statistics.median(ms), "activations": memory["activations"], "total": memory["total"],
            "measured": memory["resident_peak"] - memory["resident_before"],
            "loss": [r["loss"] for r in rows if r["kind"] == "train"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "fortunes.txt"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="sequences per step")
    parser.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    a = parser.parse_args()
    samples = []
    with tempfile.TemporaryDirectory() as work:
        for rnd in range(a.rounds):
            got = {s: run(a.exe, s, a.steps, a.batch, a.corpus, work, f"r{rnd}_{s}", a.arch) for s in SETTINGS}
            for s in SETTINGS:
                g, base = got[s], got["none"]
                same = "yes" if g["loss"] == base["loss"] else "NO"
                samples.append((rnd, s, g, base, same))
                print(f"round {rnd + 1} {s:9s}: step {g['ms']:8.1f} ms ({g['ms'] / base['ms']:.3f}x none), "
                      f"activations {g['activations'] / MiB:8.2f} MiB (none / this {base['activations'] / g['activations']:.2f}), "
                      f"predicted {g['total'] / MiB:8.2f} MiB, measured {g['measured'] / MiB:8.2f} MiB "
                      f"({(g['measured'] / g['total'] - 1) * 100:+.1f}%), losses equal to none: {same}", flush=True)
    print("\n| setting | activations | none / this | predicted per rank | measured (resident growth) | "
          "step ms, each round | step time vs none, each round | losses as none |")
    print("|---|---|---|---|---|---|---|---|")
    for s in SETTINGS:
        rows = [x for x in samples if x[1] == s]
        g = rows[0][2]
        print(f"| {s} | {g['activations'] / MiB:.1f} MiB | {rows[0][3]['activations'] / g['activations']:.2f}x | "
              f"{g['total'] / MiB:.1f} MiB | "
              + ", ".join(f"{x[2]['measured'] / MiB:.1f}" for x in rows) + " MiB | "
              + ", ".join(f"{x[2]['ms']:.0f}" for x in rows) + " | "
              + ", ".join(f"{x[2]['ms'] / x[3]['ms']:.3f}" for x in rows) + " | "
              + ("yes" if all(x[4] == "yes" for x in rows) else "NO") + " |")


if __name__ == "__main__":
    main()
