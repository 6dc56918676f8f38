#!/usr/bin/env python3
"""GPT-2 124M (or, with --model smollm2-135m, the Llama of SmolLM2-135M's shape,
inputs/smollm2_135m.toml) on one GPU for each setting
(precision/recompute[/strategy[/attention[/classifier[/gelu]]]], e.g. bf16/selective, bf16/none/ddp/exact
for the exact attention path (parallel.attention), bf16/none/ddp/auto/unfused for the unfused
classifier, fp32 logits (parallel.classifier), or bf16/none/ddp/auto/auto/fused for GPT-2's GELU in
cuBLASLt's epilogues (parallel.gelu_fusion; "separate", the default, keeps its kernels)),
a few steps each; prints tokens/s, step time, MFU (against the GPU's datasheet peak at the run's
precision, as the step line reports it: llm.c's count of the model's FLOPs), the model's share of
the GEMM rate the run measured, as medians over the steps after the first
two, every step's time, and the most device memory in use at the run's memory lines; beside it,
`check`'s prediction of a rank's memory (model state, activations, workspace and the kernels'
scratch) against what the run held at most in those (its buffers' peak plus its kernels'
scratch peak, metrics.jsonl's device_buffers_peak + device_scratch_peak, plus cuBLAS's fixed
workspace), and their ratio.
--rounds N runs the list N times in turn (A B A B ...: a drift of the
card touches every setting alike) and takes the medians over all rounds' steps. Writes the table
to gpu_bench.md and every figure to gpu_bench.json in --out (gpu_bench_smollm2-135m.* for that
model; --tag adds a suffix). Called by tools/gpu_check.sh; usable alone:
gpu_bench.py --exe build-cuda/shardtrain --settings bf16/none,bf16/selective.

--profile: afterwards, the first setting again for 4 steps under Nsight Compute (ncu, one metric:
each kernel's duration), and a table of where one step's GPU time went, kernel by kernel
(gpu_profile*.md/.json). ncu runs the kernels one at a time, so these are kernel times, not the
step's wall time; a step is the block of launches that repeats three times in a row."""
import argparse
import csv
import glob
import json
import os
import re
import shutil
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
               help="comma-separated precision/recompute[/strategy[/attention[/classifier[/gelu[/activations]]]]] "
                    "(strategy: ddp, attention: auto, classifier: auto, gelu: separate, activations: fp32 unless "
                    "given)")
p.add_argument("--rounds", type=int, default=1, help="run the settings this many times in turn")
p.add_argument("--tag", default="", help="suffix of the output files (gpu_bench<suffix><tag>.md)")
p.add_argument("--profile", action="store_true", help="profile the first setting's kernels with ncu")
p.add_argument("--ncu", default=shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)),
                                                               "/usr/local/cuda/bin/ncu"))
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
suffix = ("" if args.model == "gpt2-124m" else "_" + args.model) + args.tag
settings = []
for item in args.settings.split(","):
    parts = item.strip().split("/")
    if (len(parts) not in (2, 3, 4, 5, 6, 7) or parts[0] not in ("bf16", "fp32")
            or parts[1] not in ("none", "selective", "full")
            or (len(parts) >= 4 and parts[3] not in ("auto", "exact"))
            or (len(parts) >= 5 and parts[4] not in ("auto", "unfused"))
            or (len(parts) >= 6 and parts[5] not in ("separate", "fused"))
            or (len(parts) == 7 and parts[6] not in ("fp32", "bf16"))):
        p.error(f"--settings: '{item}' is not precision/recompute[/strategy[/attention[/classifier[/gelu"
                "[/activations]]]]] (bf16|fp32 / none|selective|full / ... / auto|exact / auto|unfused / "
                "separate|fused / fp32|bf16)")
    settings.append((parts[0], parts[1], parts[2] if len(parts) >= 3 else "ddp", parts[3] if len(parts) >= 4 else "auto",
                     parts[4] if len(parts) >= 5 else "auto", parts[5] if len(parts) >= 6 else "separate",
                     parts[6] if len(parts) == 7 else "fp32"))
if args.rounds < 1:
    p.error("--rounds must be at least 1")
rows = []


def write_deck(label, precision, recompute, strategy, steps, run_keys="", attention="auto", classifier="auto",
               gelu="separate", activations="fp32"):
    deck = os.path.join(work, label + ".toml")
    with open(deck, "w") as f:
        f.write(f"""[run]
steps = {steps}
{run_keys}
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
attention = "{attention}"
""")
        # Only when asked for: a build from before parallel.classifier existed runs the default.
        if classifier != "auto":
            f.write(f'classifier = "{classifier}"\n')
        # Likewise parallel.gelu_fusion, only when asked for.
        if gelu == "fused":
            f.write("gelu_fusion = true\n")
        # And parallel.activations: bf16 storage only when asked for.
        if activations == "bf16":
            f.write('activations = "bf16"\n')
    return deck


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def predicted_bytes(check_out):
    """check's 'memory per rank' row ("| memory per rank | 1.23 GiB predicted (...) |") in bytes, or None."""
    found = re.search(r"\|\s*memory per rank\s*\|\s*([0-9.]+) (B|KiB|MiB|GiB|TiB) predicted", check_out)
    return float(found.group(1)) * UNITS[found.group(2)] if found else None


def gib(x):
    return f"{x / 2**30:.2f} GiB" if x is not None else ""


def log_row(log, name):
    """The value of the settings table's row `name` (the derived rows: '| name | value |')."""
    for line in log.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1] == name:
            return cells[2]
    return ""


runs = {}  # setting label -> the train-step metrics of each round
for round_index in range(args.rounds):
    for precision, recompute, strategy, attention, classifier, gelu, activations in settings:
        label = (f"{precision}_{recompute}_{strategy}" + ("" if attention == "auto" else f"_{attention}") +
                 ("" if classifier == "auto" else f"_{classifier}") + ("" if gelu == "separate" else "_gelu_fused") +
                 ("" if activations == "fp32" else "_bf16_activations"))
        run_label = f"{label}_r{round_index + 1}"
        deck = write_deck(run_label, precision, recompute, strategy, args.steps, attention=attention,
                          classifier=classifier, gelu=gelu, activations=activations)
        proc = subprocess.run([args.mpiexec, "-n", "1", args.exe, "run", deck], capture_output=True, text=True,
                              timeout=300)
        entry = runs.setdefault(label, {"setting": label, "rounds": []})
        if "predicted" not in entry:  # check's figure for the deck, on this machine (once a setting)
            checked = subprocess.run([args.mpiexec, "-n", "1", args.exe, "check", deck], capture_output=True,
                                     text=True, timeout=120)
            entry["predicted"] = predicted_bytes(checked.stdout)
        if proc.returncode != 0:
            print(f"{run_label}: FAILED (exit {proc.returncode})\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}", flush=True)
            entry["failed"] = True
            continue
        metrics = [json.loads(l) for l in open(os.path.join(work, run_label, "metrics.jsonl"))]
        train = [m for m in metrics if m["kind"] == "train"][2:]
        memory = [m for m in metrics if m["kind"] == "memory"]
        log = open(os.path.join(work, run_label, "train.log")).read()
        # The most the device had in use at a memory line ("memory ... ; GPU 12.3 GiB of 139.8 GiB in
        # use (...)": cudaMemGetInfo, the CUDA context and every library's buffers included).
        peak, most = "", -1.0
        for line in log.splitlines():
            found = re.search(r"; GPU ([0-9.]+) (B|KiB|MiB|GiB|TiB) of ", line) if line.startswith("memory") else None
            if found and float(found.group(1)) * UNITS[found.group(2)] > most:
                most = float(found.group(1)) * UNITS[found.group(2)]
                peak = f"{found.group(1)} {found.group(2)}"
        # What the rank held at most of what check predicts: its buffers' peak, its kernels' scratch,
        # and what the backend allocates at its start outside both (cuBLAS's 32 MiB workspace and the
        # gradient norm's 1025 partial sums: lib/exec/kernel_scratch.hpp, KernelScratch::total).
        fixed = (32 << 20) + 1025 * 8
        held = max((m.get("device_buffers_peak", 0) + m.get("device_scratch_peak", 0) + fixed for m in memory),
                   default=None)
        entry["rounds"].append({"train": train, "memory": memory[-1] if memory else None, "peak": peak, "held": held,
                                "mfu_against": log_row(log, "MFU against"), "attention": log_row(log, "attention"),
                                "classifier": log_row(log, "classifier"),
                                "activations": log_row(log, "activations per rank")})
        print(f"{run_label}: steps 3-{args.steps} ms: " + " ".join(f"{m['ms']:.1f}" for m in train) +
              f" | tok/s " + " ".join(f"{m['tokens_per_s']:.0f}" for m in train) +
              f" | peak {peak} | attention: {log_row(log, 'attention')} | classifier: {log_row(log, 'classifier')}",
              flush=True)

for label, entry in runs.items():
    if entry.get("failed") or not entry["rounds"]:
        rows.append({"setting": label, "failed": True})
        continue
    train = [m for r in entry["rounds"] for m in r["train"]]
    last = entry["rounds"][-1]
    row = {"setting": label, "tokens_per_s": statistics.median(m["tokens_per_s"] for m in train),
           "ms": statistics.median(m["ms"] for m in train), "mfu": statistics.median(m["mfu"] for m in train),
           "of_measured_gemm": statistics.median(m.get("mfu_of_measured_gemm", 0) for m in train),
           "mfu_against": last["mfu_against"], "steps": [[m["ms"] for m in r["train"]] for r in entry["rounds"]],
           "peak_device_memory": last["peak"], "attention": last["attention"], "classifier": last["classifier"],
           "activations": last["activations"], "predicted_bytes": entry.get("predicted"),
           "held_bytes": max((r["held"] for r in entry["rounds"] if r["held"] is not None), default=None),
           "loss_first": train[0]["loss"] if train else None,
           "loss_last": entry["rounds"][0]["train"][-1]["loss"] if train else None, "memory": last["memory"]}
    rows.append(row)
    print(f"{label}: {row['tokens_per_s']:.0f} tok/s, {row['ms']:.1f} ms/step, MFU {row['mfu']*100:.1f}% "
          f"({row['of_measured_gemm']*100:.1f}% of measured GEMM), peak {row['peak_device_memory']}, activations "
          f"{row['activations']}; MFU against {row['mfu_against']}", flush=True)

rounds_note = f", {args.rounds} rounds interleaved" if args.rounds > 1 else ""
table = [f"{model_name}, seq_len {seq_len}, {args.batch} sequences per step, one GPU; medians of steps 3-{args.steps}"
         f"{rounds_note}; MFU counted as llm.c counts it", "",
         "| setting | attention | classifier | tokens/s | step ms | MFU (datasheet peak) | of measured GEMM | device memory in use (most at a memory line) | rank memory, check's prediction | held at most (buffers + kernels' scratch) | held / predicted |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    if r.get("failed"):
        table.append(f"| {r['setting']} | | | failed | | | | | | | |")
    else:
        ratio = (f"{r['held_bytes'] / r['predicted_bytes']:.3f}" if r["held_bytes"] and r["predicted_bytes"] else "")
        table.append(f"| {r['setting']} | {r['attention'].split(' (')[0]} | {r['classifier'].split(' (')[0]} | "
                     f"{r['tokens_per_s']:.0f} | {r['ms']:.1f} | {r['mfu']*100:.1f}% | {r['of_measured_gemm']*100:.1f}% | "
                     f"{r['peak_device_memory']} | {gib(r['predicted_bytes'])} | {gib(r['held_bytes'])} | {ratio} |")
print("\n" + "\n".join(table))
with open(os.path.join(args.out, f"gpu_bench{suffix}.md"), "w") as f:
    f.write("\n".join(table) + "\n")
with open(os.path.join(args.out, f"gpu_bench{suffix}.json"), "w") as f:
    json.dump(rows, f, indent=1)


def one_step(names):
    """(start, length) of one training step in the launch sequence: the longest block that occurs
    three times in a row and holds the optimizer's update (a block of layers can repeat too, but
    holds no AdamW). Steps 2-4 launch the same kernels; two steps together would need six
    identical steps, and the final evaluation (one batch) is shorter than a step. None if no such
    block."""
    ids = {}
    seq = [ids.setdefault(n, len(ids)) for n in names]
    for period in range(len(seq) // 3, 0, -1):
        # A block repeats three times where seq[i] == seq[i + period] for 2 * period i in a row.
        run = 0
        for i in range(len(seq) - period):
            run = run + 1 if seq[i] == seq[i + period] else 0
            if run == 2 * period:
                first = i - 2 * period + 1 + period  # the middle copy
                if any("adamw" in names[j] for j in range(first, first + period)):
                    return first, period
                break  # this period repeats, but as a part of a step; try shorter ones
    return None


def profile(precision, recompute, strategy, attention, classifier, gelu, activations):
    label = f"profile_{precision}_{recompute}_{strategy}"
    deck = write_deck(label, precision, recompute, strategy, 4, "eval_batches = 1\n", attention, classifier, gelu,
                      activations)
    cmd = [args.mpiexec, "-n", "1", args.ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
           "--print-units", "base", "--print-kernel-base", "function", "--csv", "--page", "raw", args.exe, "run", deck]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    except subprocess.TimeoutExpired:
        print("profile: FAILED (ncu ran past 400 s)", flush=True)
        return False
    with open(os.path.join(args.out, f"ncu{suffix}.csv"), "w") as f:
        f.write(proc.stdout)
    if proc.returncode != 0:
        print(f"profile: FAILED (exit {proc.returncode})\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}", flush=True)
        return False
    reader = csv.reader(l for l in proc.stdout.splitlines() if l.startswith('"'))
    header = next(reader)
    name_at, time_at = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    launches = []
    for row in reader:
        try:
            launches.append((row[name_at], float(row[time_at].replace(",", ""))))
        except (ValueError, IndexError):
            continue  # the units row
    found = one_step([n for n, _ in launches])
    if found is None:
        print(f"profile: FAILED (no block of {len(launches)} launches repeats three times with the optimizer in it)",
              flush=True)
        return False
    first, period = found
    step = launches[first:first + period]
    total = sum(t for _, t in step)
    by_name = {}
    for name, t in step:
        calls, sum_t = by_name.get(name, (0, 0.0))
        by_name[name] = (calls + 1, sum_t + t)
    ordered = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    ms = 1e-6  # --print-units base: nanoseconds
    out = [f"{model_name}, {precision}/{recompute}: kernel time of one of 4 steps under ncu ({period} launches, "
           f"{total * ms:.1f} ms of kernel time in all)", "", "| kernel | launches | ms | share |", "|---|---|---|---|"]
    for name, (calls, t) in ordered:
        out.append(f"| `{name[:70]}` | {calls} | {t * ms:.2f} | {100 * t / total:.1f}% |")
    print("\n" + "\n".join(out[:40]), flush=True)
    with open(os.path.join(args.out, f"gpu_profile{suffix}.md"), "w") as f:
        f.write("\n".join(out) + "\n")
    with open(os.path.join(args.out, f"gpu_profile{suffix}.json"), "w") as f:
        json.dump({"launches_per_step": period, "kernel_ms": total * ms,
                   "kernels": [{"name": n, "launches": c, "ms": t * ms} for n, (c, t) in ordered]}, f, indent=1)
    return True


ok = not any(r.get("failed") for r in rows)
if args.profile:
    ok = profile(*settings[0]) and ok
sys.exit(0 if ok else 1)

