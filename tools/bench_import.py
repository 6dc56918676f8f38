#!/usr/bin/python3
"""Import of GPT-2 124M-shaped weights (model.init_from's reading) against a plain read of the
same file, on one core.

    /usr/bin/python3 tools/bench_import.py [--exe build/shardtrain] [--dir runs/bench_import] [--rounds 5]

Writes random weights of GPT-2 124M's shape (12 layers, d_model 768, 12 heads, 1024 positions,
50257 tokens padded to 50304) as an llm.c model file in fp32 (version 3) and bf16 (version 5) and
as a Hugging Face model.safetensors (F32) with config.json. Then, for --rounds rounds, each
format in turn: a plain read of the file into memory (Python's readinto, one buffer), then
`shardtrain weights inspect FILE` pinned to core 0, which reads every tensor through the import
that model.init_from runs and prints its reading time. Prints every sample and its ratio to the
plain read just before it. The files stay in the page cache (the machine's memory holds them):
this measures the import's own work, not the disk."""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import time

import numpy as np

L, C, NH, T, V, VP = 12, 768, 12, 1024, 50257, 50304
KINDS = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (3 * C, C)), ("attn.c_attn.bias", (3 * C,)),
         ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)), ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
         ("mlp.c_fc.weight", (4 * C, C)), ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (C, 4 * C)),
         ("mlp.c_proj.bias", (C,))]


def write_files(directory):
    rng = np.random.default_rng(124)
    blocks = {(kind, layer): rng.standard_normal(shape, dtype=np.float32) * 0.02
              for kind, shape in KINDS for layer in range(L)}
    wte = rng.standard_normal((V, C), dtype=np.float32) * 0.02
    wpe = rng.standard_normal((T, C), dtype=np.float32) * 0.01
    lnf = [np.ones(C, np.float32), np.zeros(C, np.float32)]
    header = np.zeros(256, "<i4")
    header[:8] = [20240326, 3, T, V, L, NH, C, VP]
    parts = [wte, np.zeros((VP - V, C), np.float32), wpe] + [blocks[(k, l)] for k, _ in KINDS for l in range(L)] + lnf
    with open(f"{directory}/gpt2_124M.bin", "wb") as f:
        f.write(header.tobytes())
        for p in parts:
            f.write(p.tobytes())
    header[1] = 5
    with open(f"{directory}/gpt2_124M_bf16.bin", "wb") as f:
        f.write(header.tobytes())
        for p in parts:  # bf16 by truncation: any bf16 values do for timing
            f.write((p.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    os.makedirs(f"{directory}/hf")
    tensors = {"transformer.wte.weight": wte, "transformer.wpe.weight": wpe, "transformer.ln_f.weight": lnf[0],
               "transformer.ln_f.bias": lnf[1]}
    for (kind, layer), w in blocks.items():
        tensors[f"transformer.h.{layer}.{kind}"] = w.T.copy() if kind.endswith("weight") and w.ndim == 2 else w
    meta, at = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(tensors):
        meta[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [at, at + tensors[name].nbytes]}
        at += tensors[name].nbytes
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(f"{directory}/hf/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in sorted(tensors):
            f.write(tensors[name].tobytes())
    json.dump({"model_type": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "n_positions": T, "vocab_size": V},
              open(f"{directory}/hf/config.json", "w"))


def plain_read(path):
    buffer = bytearray(os.path.getsize(path))
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        view, done = memoryview(buffer), 0
        while done < len(buffer):
            done += f.readinto(view[done:])
    return time.perf_counter() - t0


def import_time(exe, path):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.run(["taskset", "-c", "0", exe, "weights", "inspect", path], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"weights inspect {path} failed:\n{proc.stderr}")
    return float(re.search(r"read in ([0-9.]+) s", proc.stdout).group(1)), wall


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(root, "build", "shardtrain"))
    p.add_argument("--dir", default=os.path.join(root, "runs", "bench_import"))
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    write_files(a.dir)
    files = {"llm.c fp32 (v3)": f"{a.dir}/gpt2_124M.bin", "llm.c bf16 (v5)": f"{a.dir}/gpt2_124M_bf16.bin",
             "safetensors F32": f"{a.dir}/hf/model.safetensors"}
    print("| round | file | MB | plain read s | import s (shardtrain weights inspect) | import / plain read | "
          "whole command s |")
    print("|---|---|---|---|---|---|---|")
    for r in range(1, a.rounds + 1):
        for label, path in files.items():
            base = plain_read(path)
            seconds, wall = import_time(a.exe, path)
            print(f"| {r} | {label} | {os.path.getsize(path) / 1e6:.0f} | {base:.3f} | {seconds:.3f} | "
                  f"{seconds / base:.2f} | {wall:.2f} |", flush=True)
    shutil.rmtree(a.dir)


if __name__ == "__main__":
    main()
