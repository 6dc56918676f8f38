#!/usr/bin/env python3
"""GPT-2 124M on one GPU: each precision and each strategy one GPU can run, ~20 steps each;
prints tokens/s, step time, MFU (against the GEMM rate each run measured on the device, as the
log line reports it) and peak device memory, as medians over the steps after the first two.
Called by tools/gpu_check.sh; usable alone: gpu_bench.py --exe build-cuda/shardtrain."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

p = argparse.ArgumentParser()
p.add_argument("--exe", required=True)
p.add_argument("--mpiexec", default="mpirun")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=16, help="sequences of 1024 tokens per step")
p.add_argument("--out", default=".")
p.add_argument("--all-strategies", action="store_true",
               help="every strategy (on one GPU zero1, zero2 and hsdp add nothing to ddp and zero3 but time)")
p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "fortunes.txt"))
args = p.parse_args()

work = tempfile.mkdtemp(prefix="st_gpu_bench_")
if args.steps < 3:
    p.error("--steps must be at least 3 (the first two steps are left out of the medians)")
strategies = ("ddp", "zero1", "zero2", "zero3", "hsdp") if args.all_strategies else ("ddp", "zero3")
settings = [(prec, strat) for prec in ("bf16", "fp32") for strat in strategies]
rows = []
for precision, strategy in settings:
    label = f"{precision}_{strategy}"
    deck = os.path.join(work, label + ".toml")
    with open(deck, "w") as f:
        f.write(f"""[run]
steps = {args.steps}
log_every = 1
eval_every = 0
sample_tokens = 0
out_dir = "{work}/{label}"
[model]
n_layer = 12
d_model = 768
n_head = 12
seq_len = 1024
vocab_size = 50257
vocab_pad_to = 128
[data]
path = "{os.path.abspath(args.data)}"
global_batch = {args.batch}
[optimizer]
lr = 6e-4
warmup_steps = 2
[parallel]
device = "cuda"
strategy = "{strategy}"
precision = "{precision}"
""")
    proc = subprocess.run([args.mpiexec, "-n", "1", args.exe, "run", deck], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        print(f"{label}: FAILED (exit {proc.returncode})\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}", flush=True)
        rows.append({"setting": label, "failed": True})
        continue
    metrics = [json.loads(l) for l in open(os.path.join(work, label, "metrics.jsonl"))]
    train = [m for m in metrics if m["kind"] == "train"][2:]
    memory = [m for m in metrics if m["kind"] == "memory"]
    log = open(os.path.join(work, label, "train.log")).read()
    peak = ""
    for line in log.splitlines():
        if "at most" in line and "GPU memory" in line:
            peak = line.split("at most ")[1].split(";")[0]
    row = {"setting": label, "tokens_per_s": statistics.median(m["tokens_per_s"] for m in train),
           "ms": statistics.median(m["ms"] for m in train), "mfu": statistics.median(m["mfu"] for m in train),
           "peak_device_memory": peak, "loss_first": train[0]["loss"] if train else None,
           "loss_last": train[-1]["loss"] if train else None, "memory": memory[-1] if memory else None}
    rows.append(row)
    print(f"{label}: {row['tokens_per_s']:.0f} tok/s, {row['ms']:.1f} ms/step, MFU {row['mfu']*100:.1f}%, "
          f"peak {peak}", flush=True)

print()
print(f"GPT-2 124M, seq_len 1024, {args.batch} sequences per step, one GPU; medians of steps 3-{args.steps}")
print("| setting | tokens/s | step ms | MFU | peak device memory |")
print("|---|---|---|---|---|")
for r in rows:
    if r.get("failed"):
        print(f"| {r['setting']} | failed | | | |")
    else:
        print(f"| {r['setting']} | {r['tokens_per_s']:.0f} | {r['ms']:.1f} | {r['mfu']*100:.1f}% | "
              f"{r['peak_device_memory']} |")
with open(os.path.join(args.out, "gpu_bench.json"), "w") as f:
    json.dump(rows, f, indent=1)
sys.exit(1 if any(r.get("failed") for r in rows) else 0)
