#!/usr/bin/python3
"""Generation from GPT-2 124M-shaped weights on one core: `shardtrain generate` (key/value cache,
one row per token) against greedy decoding with a key/value cache written in PyTorch, side by
side.

    /usr/bin/python3 tools/bench_generate.py [--exe build/shardtrain] [--dir runs/bench_generate]
                                             [--rounds 3] [--tokens 256]

Writes random weights of GPT-2 124M's shape (12 layers, d_model 768, 12 heads, 1024 positions,
50257 tokens padded to 50304) as an llm.c model file (fp32). Each round, in turn:
- `shardtrain generate FILE --prompt-tokens ... --tokens N --top-k 1 --json`, pinned to core 0
  with one OpenMP thread: the time of the generation itself (the JSON's "seconds") and of the
  whole command (MPI start-up, the import, the allocations);
- `shardtrain --version`, whose time is the process and MPI start-up that the whole command
  includes (it reads nothing);
- the same greedy decoding in PyTorch (tools/torch_gpt2.py, one thread, pinned to core 0) over
  the same weights, already in memory.
Prints every sample, the ratio of the two generation times, and how many of the generated tokens
are the same (greedy decoding of random weights meets near-ties, where float rounding may pick
the other token; from there on the two continue differently)."""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import gpt2_greedy_decode  # noqa: E402

L, C, NH, T, V, VP = 12, 768, 12, 1024, 50257, 50304
# llm.c's order: each kind for every layer in turn; our layout's name for each.
KINDS = [("ln1.w", (C,)), ("ln1.b", (C,)), ("attn.qkv.w", (3 * C, C)), ("attn.qkv.b", (3 * C,)),
         ("attn.proj.w", (C, C)), ("attn.proj.b", (C,)), ("ln2.w", (C,)), ("ln2.b", (C,)),
         ("mlp.fc.w", (4 * C, C)), ("mlp.fc.b", (4 * C,)), ("mlp.proj.w", (C, 4 * C)), ("mlp.proj.b", (C,))]
PROMPT = [464, 3616, 286, 1204, 318]  # "The meaning of life is" in GPT-2's tokens


def write_weights(path):
    """Random GPT-2 124M weights as an llm.c model file; returns them by our layout's names."""
    rng = np.random.default_rng(124)
    w = {"wte": np.concatenate([rng.standard_normal((V, C), dtype=np.float32) * 0.02,
                                np.zeros((VP - V, C), np.float32)]),
         "wpe": rng.standard_normal((T, C), dtype=np.float32) * 0.01}
    for name, shape in KINDS:
        for layer in range(L):
            if name.startswith("ln") and name.endswith(".w"):
                w[f"block{layer}.{name}"] = np.ones(shape, np.float32)
            else:
                w[f"block{layer}.{name}"] = rng.standard_normal(shape, dtype=np.float32) * 0.02
    w["lnf.w"], w["lnf.b"] = np.ones(C, np.float32), np.zeros(C, np.float32)
    header = np.zeros(256, "<i4")
    header[:8] = [20240326, 3, T, V, L, NH, C, VP]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(w["wte"].tobytes())
        f.write(w["wpe"].tobytes())
        for name, _ in KINDS:
            for layer in range(L):
                f.write(w[f"block{layer}.{name}"].tobytes())
        f.write(w["lnf.w"].tobytes())
        f.write(w["lnf.b"].tobytes())
    return {k: torch.from_numpy(v) for k, v in w.items()}


def run_shardtrain(exe, path, tokens):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    argv = ["taskset", "-c", "0", exe, "generate", path, "--prompt-tokens", " ".join(map(str, PROMPT)),
            "--tokens", str(tokens), "--top-k", "1", "--json"]
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    whole = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stderr}")
    sample = json.loads(proc.stdout)["samples"][0]
    return sample["seconds"], whole, sample["tokens"]


def run_startup(exe):
    start = time.perf_counter()
    subprocess.run([exe, "--version"], capture_output=True, check=True)
    return time.perf_counter() - start


def run_torch(w, tokens):
    start = time.perf_counter()
    out = gpt2_greedy_decode(w, PROMPT, tokens, L, C, NH, V)
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exe", default="build/shardtrain")
    parser.add_argument("--dir", default="runs/bench_generate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    a = parser.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "gpt2_124M.bin")
    w = write_weights(path)
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {0})  # this process (the PyTorch side) on core 0 too
    print(f"{a.tokens} tokens after a prompt of {len(PROMPT)}, greedy, one core; file {path} "
          f"({os.path.getsize(path) / 1e6:.0f} MB)")
    print("| round | shardtrain generate s | tokens/s | whole command s | start-up (--version) s | "
          "PyTorch (KV cache) s | tokens/s | PyTorch / shardtrain | same tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in range(1, a.rounds + 1):
        ours, whole, our_tokens = run_shardtrain(a.exe, path, a.tokens)
        startup = run_startup(a.exe)
        theirs, their_tokens = run_torch(w, a.tokens)
        same = next((i for i, (x, y) in enumerate(zip(our_tokens, their_tokens)) if x != y), len(our_tokens))
        print(f"| {r} | {ours:.2f} | {a.tokens / ours:.1f} | {whole:.2f} | {startup:.2f} | {theirs:.2f} | {a.tokens / theirs:.1f} | "
              f"{theirs / ours:.2f} | first {same} of {a.tokens} |", flush=True)


if __name__ == "__main__":
    main()
