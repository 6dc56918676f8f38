#!/usr/bin/python3
"""Step benchmark: shardtrain against PyTorch on one core, same model shape, same run.

    /usr/bin/python3 tools/bench_step.py [--arch gpt2|llama] [--shape NAME] [--layers 2 4] [--steps 8]
                                         [--batch 4] [--rounds 1]

For each depth it trains d_model 768, 12 heads, seq_len 256 (byte vocabulary) for a few steps
with one rank pinned to core 0 (taskset, one thread), then times the same model, AdamW step
included, in PyTorch (Debian's python3-torch, also pinned to core 0, one thread); with
--rounds N the two alternate N times and every sample is printed, then the median ratio. GPT-2,
or (--arch llama) a Llama of SmolLM2's proportions: 4 key/value heads for the 12 query heads,
SwiGLU 2048 wide, tied embedding. --shape (llama) takes another: smollm2 (SmolLM2-135M's own:
d_model 576, 9 heads over 3, SwiGLU 1536, vocabulary 49152; 4 layers unless --layers) or
llama_tiny (inputs/llama_tiny.toml's: d_model 192, 6 heads over 2, SwiGLU 512, seq_len 128,
16 sequences). MFU of both is reported against the sgemm rate that shardtrain measures in the
same run. Prints a Markdown table for docs/benchmarks.md."""
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
N_KV_HEAD, FFN_DIM = 4, 2048  # llama: SmolLM2's ratios (9 heads over 3, 1536 for 576)
# --shape: (d_model, n_head, n_kv_head, ffn_dim, seq_len, vocabulary, default layers, default batch)
SHAPES = {
    "proportions": (768, 12, 4, 2048, 256, 256, [2, 4], 4),
    "smollm2": (576, 9, 3, 1536, 256, 49152, [4], 4),
    "llama_tiny": (192, 6, 2, 512, 128, 256, [4], 16),
}


def flops_per_token(arch, layers):
    # shardtrain's count (lib/model/layout.cpp): 6 x matmul parameters + 12 L C T.
    if arch == "llama":
        qkv = D_MODEL + 2 * N_KV_HEAD * (D_MODEL // N_HEAD)
        block = qkv * D_MODEL + D_MODEL ** 2 + 3 * FFN_DIM * D_MODEL
    else:
        block = 12 * D_MODEL ** 2
    return 6 * (layers * block + VOCAB * D_MODEL) + 12 * layers * D_MODEL * SEQ


def model_keys(arch):
    if arch != "llama":
        return ""
    return (f'arch = "llama"\nn_kv_head = {N_KV_HEAD}\nffn_dim = {FFN_DIM}\n')


def run_shardtrain(exe, layers, steps, batch, corpus, work, arch="gpt2"):
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
{model_keys(arch)}n_layer = {layers}
d_model = {D_MODEL}
n_head = {N_HEAD}
seq_len = {SEQ}
vocab_size = {VOCAB}
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
from torch_llama import llama_init, llama_loss
layers, steps, batch, C, H, T, V, KV, FF = map(int, sys.argv[2:11])
arch = sys.argv[11]
torch.set_num_threads(1)
torch.manual_seed(0)
cfg = dict(n_layer=layers, d_model=C, n_head=H, n_kv_head=KV, ffn_dim=FF, vocab_size=V, norm_eps=1e-5,
           rope_theta=10000.0, tie_embeddings=True)
if arch == "llama":
    w = llama_init(cfg, V)
    gpt2_loss = lambda w, x, y, *rest: llama_loss(w, x, y, cfg)
else:
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


def run_torch(layers, steps, batch, arch="gpt2"):
    proc = subprocess.run(["taskset", "-c", "0", "/usr/bin/python3", "-c", TORCH_CHILD, HERE, str(layers), str(steps),
                           str(batch), str(D_MODEL), str(N_HEAD), str(SEQ), str(VOCAB), str(N_KV_HEAD),
                           str(FFN_DIM), arch],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        sys.exit(f"PyTorch baseline failed:\n{proc.stderr}")
    return float(proc.stdout.strip())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--corpus", default=os.path.join(ROOT, "data", "fortunes.txt"))
    p.add_argument("--layers", type=int, nargs="+", default=None, help="default 2 4 (the shape's own for --shape)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 4, llama_tiny 16)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="proportions",
                   help="the Llama's shape (--arch llama): SmolLM2's proportions at d_model 768 (default), "
                        "SmolLM2-135M's own, or inputs/llama_tiny.toml's")
    p.add_argument("--compare-exe", help="another shardtrain build (e.g. an earlier commit): run round by round, "
                                         "interleaved with --exe, and report every sample and the ratio (the model as --arch says)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds of (shardtrain, PyTorch), or with --compare-exe of (exe, compare-exe); "
                        "default 1, or 3 with --compare-exe")
    p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    args = p.parse_args()
    if args.shape != "proportions" and args.arch != "llama":
        p.error("--shape is for --arch llama")
    global D_MODEL, N_HEAD, N_KV_HEAD, FFN_DIM, SEQ, VOCAB
    D_MODEL, N_HEAD, N_KV_HEAD, FFN_DIM, SEQ, VOCAB, layers, batch = SHAPES[args.shape]
    if args.arch == "gpt2":
        N_KV_HEAD, FFN_DIM = N_HEAD, 4 * D_MODEL
    args.layers = args.layers or layers
    args.batch = args.batch or batch
    if args.compare_exe:
        args.rounds = args.rounds or 3
        return compare(args)
    rounds = args.rounds or 1
    work = tempfile.mkdtemp(prefix="st_bench_")
    tokens = args.batch * SEQ
    shape = (f"{N_HEAD} heads over {N_KV_HEAD} key/value heads, SwiGLU {FFN_DIM} ({args.shape})" if args.arch == "llama"
             else f"{N_HEAD} heads")
    print(f"# step benchmark, one core (taskset -c 0), {args.arch}, d_model {D_MODEL}, {shape}, seq_len {SEQ}, "
          f"batch {args.batch} x {SEQ} = {tokens} tokens, vocabulary {VOCAB}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print()
    print("| layers | round | sgemm GFLOP/s (measured) | shardtrain ms/step | tok/s | MFU | PyTorch ms/step | tok/s "
          "| MFU | shardtrain / PyTorch tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layers in args.layers:
        ratios = []
        for r in range(rounds):
            st_s, rate = run_shardtrain(args.exe, layers, args.steps, args.batch, args.corpus, work, args.arch)
            pt_s = run_torch(layers, args.steps, args.batch, args.arch)
            flops = flops_per_token(args.arch, layers) * tokens
            ratios.append(pt_s / st_s)
            print(f"| {layers} | {r + 1} | {rate / 1e9:.1f} | {st_s * 1e3:.0f} | {tokens / st_s:.0f} "
                  f"| {flops / st_s / rate:.1%} | {pt_s * 1e3:.0f} | {tokens / pt_s:.0f} | {flops / pt_s / rate:.1%} "
                  f"| {pt_s / st_s:.2f} |", flush=True)
        if rounds > 1:
            print(f"| {layers} | median | | | | | | | | {statistics.median(ratios):.2f} |", flush=True)


def compare(args):
    """This build against another, interleaved: exe, other, exe, other, ... per depth; each
    sample's ms/step (median of steps 3-N), then the median ratio other/exe (> 1: this build is
    faster)."""
    work = tempfile.mkdtemp(prefix="st_bench_cmp_")
    print(f"# step benchmark, one core (taskset -c 0), {args.arch}, d_model {D_MODEL}, {N_HEAD} heads, seq_len {SEQ}, "
          f"batch {args.batch}; {time.strftime('%Y-%m-%d %H:%M')}; exe {args.exe}; compare-exe {args.compare_exe}")
    print()
    print("| layers | round | this build ms/step | other build ms/step | other / this |")
    print("|---|---|---|---|---|")
    for layers in args.layers:
        ratios = []
        for r in range(args.rounds):
            this_s, _ = run_shardtrain(args.exe, layers, args.steps, args.batch, args.corpus, work, args.arch)
            other_s, _ = run_shardtrain(args.compare_exe, layers, args.steps, args.batch, args.corpus, work, args.arch)
            ratios.append(other_s / this_s)
            print(f"| {layers} | {r + 1} | {this_s * 1e3:.1f} | {other_s * 1e3:.1f} | {other_s / this_s:.3f} |",
                  flush=True)
        print(f"| {layers} | median | | | {statistics.median(ratios):.3f} |", flush=True)


if __name__ == "__main__":
    main()
