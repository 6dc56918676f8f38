#!/usr/bin/env python3
"""GPT-2 124M (or, with --model smollm2-135m, the Llama of SmolLM2-135M's shape,
inputs/smollm2_135m.toml) on one GPU for each setting (precision/recompute[/strategy], e.g.
bf16/selective), a few steps each; prints tokens/s, step time, MFU (against the GPU's datasheet peak at the run's
precision, as the step line reports it), the model's share of the GEMM rate the run measured,
and peak device memory, as medians over the steps after the first two. Writes the table to
gpu_bench.md and every figure to gpu_bench.json in --out (gpu_bench_smollm2-135m.* for that
model). Called by tools/gpu_check.sh; usable alone:
gpu_bench.py --exe build-cuda/shardtrain --settings bf16/none,bf16/selective."""
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
p.add_argument("--batch", type=int, default=16, help="sequences of seq_len tokens per step")
p.add_argument("--model", default="gpt2-124m", choices=["gpt2-124m", "smollm2-135m"])
p.add_argument("--out", default=".")
p.add_argument("--settings", default="bf16/none,fp32/none",
               help="comma-separated precision/recompute[/strategy] (strategy: ddp unless given)")
p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "fortunes.txt"))
args = p.parse_args()

work = tempfile.mkdtemp(prefix="st_gpu_bench_")
if args.steps < 3:
    p.error("--steps must be at least 3 (the first two steps are left out of the medians)")
# The [model] section of each: GPT-2 124M; SmolLM2-135M's shape as inputs/smollm2_135m.toml has it.
MODELS = {
    "gpt2-124m": ("GPT-2 124M", 1024, """n_layer = 12
d_model = 768
n_head = 12
seq_len = 1024
vocab_size = 50257
vocab_pad_to = 128"""),
    "smollm2-135m": ("SmolLM2-135M-shaped Llama", 2048, """arch = "llama"
n_layer = 30
d_model = 576
n_head = 9
n_kv_head = 3
ffn_dim = 1536
seq_len = 2048
vocab_size = 49152
rope_theta = 100000.0
tie_embeddings = true"""),
}
model_name, seq_len, model_keys = MODELS[args.model]
suffix = "" if args.model == "gpt2-124m" else "_" + args.model
settings = []
for item in args.settings.split(","):
    parts = item.strip().split("/")
    if len(parts) not in (2, 3) or parts[0] not in ("bf16", "fp32") or parts[1] not in ("none", "selective", "full"):
        p.error(f"--settings: '{item}' is not precision/recompute[/strategy] (bf16|fp32 / none|selective|full)")
    settings.append((parts[0], parts[1], parts[2] if len(parts) == 3 else "ddp"))
rows = []
for precision, recompute, strategy in settings:
    label = f"{precision}_{recompute}_{strategy}"
    deck = os.path.join(work, label + ".toml")
    with open(deck, "w") as f:
        f.write(f"""[run]
steps = {args.steps}
log_every = 1
eval_every = 0
sample_tokens = 0
out_dir = "{work}/{label}"
[model]
{model_keys}
recompute = "{recompute}"
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
                          timeout=300)
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
    mfu_against = ""
    for line in log.splitlines():
        if "MFU against" in line:
            mfu_against = line.split("MFU against", 1)[1].strip(" |")
    row = {"setting": label, "tokens_per_s": statistics.median(m["tokens_per_s"] for m in train),
           "ms": statistics.median(m["ms"] for m in train), "mfu": statistics.median(m["mfu"] for m in train),
           "of_measured_gemm": statistics.median(m.get("mfu_of_measured_gemm", 0) for m in train),
           "mfu_against": mfu_against, "steps": [m["ms"] for m in train],
           "peak_device_memory": peak, "loss_first": train[0]["loss"] if train else None,
           "loss_last": train[-1]["loss"] if train else None, "memory": memory[-1] if memory else None}
    rows.append(row)
    print(f"{label}: {row['tokens_per_s']:.0f} tok/s, {row['ms']:.1f} ms/step, MFU {row['mfu']*100:.1f}% "
          f"({row['of_measured_gemm']*100:.1f}% of measured GEMM), peak {peak}; MFU against {mfu_against}",
          flush=True)

table = [f"{model_name}, seq_len {seq_len}, {args.batch} sequences per step, one GPU; medians of steps 3-{args.steps}",
         "", "| setting | tokens/s | step ms | MFU (datasheet peak) | of measured GEMM | peak device memory |",
         "|---|---|---|---|---|---|"]
for r in rows:
    if r.get("failed"):
        table.append(f"| {r['setting']} | failed | | | | |")
    else:
        table.append(f"| {r['setting']} | {r['tokens_per_s']:.0f} | {r['ms']:.1f} | {r['mfu']*100:.1f}% | "
                     f"{r['of_measured_gemm']*100:.1f}% | {r['peak_device_memory']} |")
print("\n" + "\n".join(table))
with open(os.path.join(args.out, f"gpu_bench{suffix}.md"), "w") as f:
    f.write("\n".join(table) + "\n")
with open(os.path.join(args.out, f"gpu_bench{suffix}.json"), "w") as f:
    json.dump(rows, f, indent=1)
sys.exit(1 if any(r.get("failed") for r in rows) else 0)
