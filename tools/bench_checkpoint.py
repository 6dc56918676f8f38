#!/usr/bin/python3
"""Checkpoint benchmark: write and read throughput of a >= 100M-parameter model with Adam state,
against a plain sequential write (flushed the same way, fsync) and read of the same number of
bytes on the same file system, measured in the same invocation; and the time to resume.

    /usr/bin/python3 tools/bench_checkpoint.py [--ranks 2] [--strategy zero3] [--layers 16] [--repeat 3]

The model is GPT-2 with d_model 768 and --layers blocks (16: 113 M parameters, 1.36 GB of
parameters + Adam m and v). Prints a Markdown table for docs/benchmarks.md."""
import argparse
import json
import os
import re
import shutil
import statistics
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


def plain_read_into_memory(path):
    """Reads the file into one buffer of its size (touched beforehand), as a resume must place
    its bytes in memory; context for the plain read, whose 8 MiB buffer stays in cache."""
    buffer = bytearray(os.path.getsize(path))
    view = memoryview(buffer)
    start = time.time()
    with open(path, "rb", buffering=0) as f:
        at = 0
        while at < len(buffer):
            at += f.readinto(view[at:at + BLOCK])
    return time.time() - start


def checkpoint_lines(out):
    """(path, write seconds, stall seconds) of each checkpoint line of a run's output."""
    return [(path.rstrip(":"), float(w), float(st)) for path, w, st in
            re.findall(r"checkpoint (\S+): .* in ([0-9.]+) s .*training waited ([0-9.]+) s", out)]


def median(xs):
    return statistics.median(xs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--strategy", default="zero3")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3, help="rounds of the whole comparison; medians are reported")
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
keep = 2
""")
    # keep = 2: neither write deletes an older checkpoint, as the plain write deletes nothing.
    ckpt_dir = os.path.join(a.dir, "run", "checkpoints")
    plain = os.path.join(a.dir, "plain.bin")
    writes, plain_writes, reads, plain_reads, walls, stalls, async_stalls, async_writes = ([] for _ in range(8))
    memory_reads = []
    rows = []
    for round_ in range(a.repeat):
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        out, _ = shardtrain(a.exe, a.ranks, deck, [])
        params = int(re.search(r"\| parameters\s+\| (\d+)", out).group(1))
        lines = checkpoint_lines(out)
        file_bytes = os.path.getsize(lines[-1][0])
        round_writes = [w for _, w, _ in lines]
        stalls += [st for _, _, st in lines]
        round_plain = [plain_write(plain, file_bytes) for _ in lines]
        out, wall = shardtrain(a.exe, a.ranks, deck, ["checkpoint.resume=latest", "checkpoint.every=0"])
        read = float(re.search(r"resumed from .* read in ([0-9.]+) s", out).group(1))
        plain_r = plain_read(plain)
        memory_reads.append(plain_read_into_memory(plain))
        os.remove(plain)
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        async_out, _ = shardtrain(a.exe, a.ranks, deck, ["checkpoint.async=true"])
        async_lines = checkpoint_lines(async_out)
        async_stalls.append([st for _, _, st in async_lines])
        async_writes += [w for _, w, _ in async_lines]
        writes += round_writes
        plain_writes += round_plain
        reads.append(read)
        plain_reads.append(plain_r)
        walls.append(wall)
        rows.append((round_ + 1, round_writes, round_plain, read, plain_r))
    state_bytes = 3 * 4 * params
    step_ms = max(r["ms"] for r in (json.loads(line) for line in open(os.path.join(a.dir, "run", "metrics.jsonl")))
                  if r["kind"] == "train")

    gb = lambda n, s: n / s / 1e9
    print(f"{params / 1e6:.1f} M parameters, {a.ranks} ranks, {a.strategy}; parameters + Adam m, v = "
          f"{state_bytes / 1e9:.2f} GB (file {file_bytes / 1e9:.2f} GB); step {step_ms / 1e3:.1f} s; "
          f"{a.repeat} rounds, two checkpoint writes each\n")
    print("| round | shardtrain writes s | plain writes s | write ratio | shardtrain read s | plain read s | read ratio |")
    print("|---|---|---|---|---|---|---|")
    for r, w, pw, rd, prd in rows:
        print(f"| {r} | {', '.join(f'{x:.2f}' for x in w)} | {', '.join(f'{x:.2f}' for x in pw)} | "
              f"{', '.join(f'{y / x:.2f}' for x, y in zip(w, pw))} | {rd:.2f} | {prd:.2f} | {prd / rd:.2f} |")
    print("\nMedians:\n")
    print("| operation | shardtrain s | GB/s | plain sequential s | GB/s | shardtrain / plain |")
    print("|---|---|---|---|---|---|")
    w, pw, rd, prd = median(writes), median(plain_writes), median(reads), median(plain_reads)
    print(f"| write (flushed) | {w:.2f} | {gb(state_bytes, w):.2f} | {pw:.2f} | {gb(file_bytes, pw):.2f} | {pw / w:.2f} |")
    print(f"| read | {rd:.2f} | {gb(state_bytes, rd):.2f} | {prd:.2f} | {gb(file_bytes, prd):.2f} | {prd / rd:.2f} |")
    mrd = median(memory_reads)
    print(f"\nFor context, the plain read into one buffer of the file's size: {mrd:.2f} s "
          f"({gb(file_bytes, mrd):.2f} GB/s); shardtrain's read is {mrd / rd:.2f} of it.")
    first_stalls = [s[0] for s in async_stalls]
    later_stalls = [x for s in async_stalls for x in s[1:]]
    print(f"\nresume: whole resumed run (start-up, reading, no steps) {median(walls):.1f} s wall (median), of which "
          f"reading {rd:.2f} s. A synchronous write stalls training for {w:.2f} s = {w * 1e3 / step_ms:.1f} steps; "
          f"with checkpoint.async = true training waited {median(first_stalls):.2f} s for the first checkpoint's copy "
          f"and {median(later_stalls):.2f} s for later ones (the copy's memory reused) while the write took "
          f"{median(async_writes):.2f} s in the background (medians)")


if __name__ == "__main__":
    main()
