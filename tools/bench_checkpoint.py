#!/usr/bin/python3
"""Checkpoint benchmark: write and read throughput of a >= 100M-parameter model with Adam state,
against a plain sequential write (flushed the same way, fsync) and read of the same number of
bytes on the same file system, measured in the same invocation; and the time to resume.

    /usr/bin/python3 tools/bench_checkpoint.py [--ranks 2] [--strategy zero3] [--layers 16] [--dir runs/bench_checkpoint]

The model is GPT-2 with d_model 768 and --layers blocks (16: 113 M parameters, 1.36 GB of
parameters + Adam m and v). Prints a Markdown table for docs/benchmarks.md."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BLOCK = 8 << 20


def shardtrain(exe, ranks, deck, sets):
    cmd = ["mpirun", "-n", str(ranks), "--bind-to", "none", exe, "run", deck]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"shardtrain failed:\n{proc.stderr[-3000:]}")
    return proc.stdout, time.time() - start


def plain_write(path, nbytes):
    block = os.urandom(BLOCK)
    start = time.time()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    while written < nbytes:
        written += os.write(fd, block[:min(BLOCK, nbytes - written)])
    os.fsync(fd)
    os.close(fd)
    return time.time() - start


def plain_read(path):
    start = time.time()
    with open(path, "rb", buffering=0) as f:
        while f.read(BLOCK):
            pass
    return time.time() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--strategy", default="zero3")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench_checkpoint"))
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    deck = os.path.join(a.dir, "deck.toml")
    with open(deck, "w") as f:
        f.write(f"""[run]
steps = 2
eval_every = 0
eval_batches = 1
sample_tokens = 0
out_dir = "{a.dir}/run"
[model]
n_layer = {a.layers}
d_model = 768
n_head = 12
seq_len = 64
[data]
path = "{ROOT}/data/fortunes.txt"
global_batch = {a.ranks}
[parallel]
strategy = "{a.strategy}"
[checkpoint]
every = 1
keep = 1
""")
    out, _ = shardtrain(a.exe, a.ranks, deck, [])
    params = int(re.search(r"\| parameters\s+\| (\d+)", out).group(1))
    write = re.findall(r"checkpoint (\S+): .* in ([0-9.]+) s .*training waited ([0-9.]+) s", out)[0]
    ckpt_path, ckpt_write = write[0].rstrip(":"), float(write[1])
    async_out, _ = shardtrain(a.exe, a.ranks, deck, ["checkpoint.async=true"])
    async_write = re.findall(r"checkpoint (\S+): .* in ([0-9.]+) s .*training waited ([0-9.]+) s", async_out)[0]
    ckpt_path = re.findall(r"checkpoint (\S+): ", async_out)[-1]  # the one kept (checkpoint.keep = 1)
    rows = [json.loads(line) for line in open(os.path.join(a.dir, "run", "metrics.jsonl"))]
    step_ms = max(r["ms"] for r in rows if r["kind"] == "train")
    state_bytes = 3 * 4 * params
    file_bytes = os.path.getsize(ckpt_path)

    plain = os.path.join(a.dir, "plain.bin")
    plain_w = plain_write(plain, file_bytes)
    out, wall = shardtrain(a.exe, a.ranks, deck, ["checkpoint.resume=latest", "checkpoint.every=0"])
    ckpt_read = float(re.search(r"resumed from .* read in ([0-9.]+) s", out).group(1))
    plain_r = plain_read(plain)
    os.remove(plain)

    gb = lambda n, s: n / s / 1e9
    print(f"{params / 1e6:.1f} M parameters, {a.ranks} ranks, {a.strategy}; parameters + Adam m, v = "
          f"{state_bytes / 1e9:.2f} GB (file {file_bytes / 1e9:.2f} GB); step {step_ms / 1e3:.1f} s\n")
    print("| operation | shardtrain s | GB/s | plain sequential s | GB/s | shardtrain / plain |")
    print("|---|---|---|---|---|---|")
    print(f"| write (flushed) | {ckpt_write:.2f} | {gb(state_bytes, ckpt_write):.2f} | {plain_w:.2f} "
          f"| {gb(file_bytes, plain_w):.2f} | {plain_w / ckpt_write:.2f} |")
    print(f"| read | {ckpt_read:.2f} | {gb(state_bytes, ckpt_read):.2f} | {plain_r:.2f} | {gb(file_bytes, plain_r):.2f} "
          f"| {plain_r / ckpt_read:.2f} |")
    print(f"\nresume: whole resumed run (start-up, reading, no steps) {wall:.1f} s wall, of which reading "
          f"{ckpt_read:.2f} s. A synchronous write stalls training for {ckpt_write:.2f} s = "
          f"{ckpt_write * 1e3 / step_ms:.1f} steps; with checkpoint.async = true training waited "
          f"{float(async_write[2]):.2f} s (the state copy) while the write took {float(async_write[1]):.2f} s "
          f"in the background")


if __name__ == "__main__":
    main()
