#!/usr/bin/python3
"""Step benchmark: shardtrain against PyTorch on one core, same model shape, same run.

    /usr/bin/python3 tools/bench_step.py [--layers 2 4] [--steps 8] [--batch 4]

For each depth it trains d_model 768, 12 heads, seq_len 256 (byte vocabulary) for a few steps
with one rank pinned to core 0 (taskset, one thread), then times the same model, AdamW step
included, in PyTorch (Debian's python3-torch, also pinned to core 0, one thread). MFU of both
is reported against the sgemm rate that shardtrain measures in the same run. Prints a Markdown
table for docs/benchmarks.md."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
D_MODEL, N_HEAD, SEQ, VOCAB = 768, 12, 256, 256


def flops_per_token(layers):
    # shardtrain's count (lib/model/layout.cpp): 6 x matmul parameters + 12 L C T.
    return 6 * (layers * 12 * D_MODEL ** 2 + VOCAB * D_MODEL) + 12 * layers * D_MODEL * SEQ


def run_shardtrain(exe, layers, steps, batch, corpus, work):
    out = os.path.join(work, f"st_{layers}")
    deck = os.path.join(work, f"bench_{layers}.toml")
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
n_layer = {layers}
d_model = {D_MODEL}
n_head = {N_HEAD}
seq_len = {SEQ}
[data]
path = "{corpus}"
global_batch = {batch}
""")
    proc = subprocess.run(["taskset", "-c", "0", exe, "run", deck], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"shardtrain failed:\n{proc.stderr}")
    rate = float(re.search(r"measured sgemm rate\s+\|\s+([0-9.]+) GFLOP/s", proc.stdout).group(1)) * 1e9
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    ms = [r["ms"] for r in rows if r["kind"] == "train"][2:]  # first steps warm caches up
    return statistics.median(ms) / 1e3, rate


TORCH_CHILD = r"""
import sys, time, statistics, torch
sys.path.insert(0, sys.argv[1])
from torch_gpt2 import gpt2_init, gpt2_loss
layers, steps, batch, C, H, T, V = map(int, sys.argv[2:9])
torch.set_num_threads(1)
torch.manual_seed(0)
w = gpt2_init(layers, C, T, V)
opt = torch.optim.AdamW(w.values(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
data = torch.randint(0, V, (steps, batch, T + 1))
times = []
for s in range(steps):
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = gpt2_loss(w, data[s, :, :-1], data[s, :, 1:], layers, C, H, V)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(w.values(), 1.0)
    opt.step()
    times.append(time.perf_counter() - start)
print(statistics.median(times[2:]))
"""


def run_torch(layers, steps, batch):
    proc = subprocess.run(["taskset", "-c", "0", "/usr/bin/python3", "-c", TORCH_CHILD, HERE, str(layers), str(steps),
                           str(batch), str(D_MODEL), str(N_HEAD), str(SEQ), str(VOCAB)],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        sys.exit(f"PyTorch baseline failed:\n{proc.stderr}")
    return float(proc.stdout.strip())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--corpus", default=os.path.join(ROOT, "data", "fortunes.txt"))
    p.add_argument("--layers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4, help="sequences per step")
    p.add_argument("--compare-exe", help="another shardtrain build (e.g. an earlier commit): run round by round, "
                                         "interleaved with --exe, and report every sample and the ratio")
    p.add_argument("--rounds", type=int, default=3, help="with --compare-exe: rounds of (exe, compare-exe)")
    args = p.parse_args()
    if args.compare_exe:
        return compare(args)
    work = tempfile.mkdtemp(prefix="st_bench_")
    tokens = args.batch * SEQ
    print(f"# step benchmark, one core (taskset -c 0), d_model {D_MODEL}, {N_HEAD} heads, seq_len {SEQ}, "
          f"batch {args.batch} x {SEQ} = {tokens} tokens, vocabulary {VOCAB}; {time.strftime('%Y-%m-%d')}")
    print(f"# OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print()
    print("| layers | sgemm GFLOP/s (measured) | shardtrain ms/step | tok/s | MFU | PyTorch ms/step | tok/s | MFU "
          "| shardtrain / PyTorch tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layers in args.layers:
        st_s, rate = run_shardtrain(args.exe, layers, args.steps, args.batch, args.corpus, work)
        pt_s = run_torch(layers, args.steps, args.batch)
        flops = flops_per_token(layers) * tokens
        print(f"| {layers} | {rate / 1e9:.1f} | {st_s * 1e3:.0f} | {tokens / st_s:.0f} | {flops / st_s / rate:.1%} "
              f"| {pt_s * 1e3:.0f} | {tokens / pt_s:.0f} | {flops / pt_s / rate:.1%} | {pt_s / st_s:.2f} |",
              flush=True)


def compare(args):
    """This build against another, interleaved: exe, other, exe, other, ... per depth; each
    sample's ms/step (median of steps 3-N), then the median ratio other/exe (> 1: this build is
    faster)."""
    work = tempfile.mkdtemp(prefix="st_bench_cmp_")
    print(f"# step benchmark, one core (taskset -c 0), d_model {D_MODEL}, {N_HEAD} heads, seq_len {SEQ}, batch "
          f"{args.batch}; {time.strftime('%Y-%m-%d %H:%M')}; exe {args.exe}; compare-exe {args.compare_exe}")
    print()
    print("| layers | round | this build ms/step | other build ms/step | other / this |")
    print("|---|---|---|---|---|")
    for layers in args.layers:
        ratios = []
        for r in range(args.rounds):
            this_s, _ = run_shardtrain(args.exe, layers, args.steps, args.batch, args.corpus, work)
            other_s, _ = run_shardtrain(args.compare_exe, layers, args.steps, args.batch, args.corpus, work)
            ratios.append(other_s / this_s)
            print(f"| {layers} | {r + 1} | {this_s * 1e3:.1f} | {other_s * 1e3:.1f} | {other_s / this_s:.3f} |",
                  flush=True)
        print(f"| {layers} | median | | | {statistics.median(ratios):.3f} |", flush=True)


if __name__ == "__main__":
    main()
