#!/usr/bin/python3
"""Checkpoint benchmark: each checkpoint write of a >= 100M-parameter model with Adam state next to
a plain sequential write of the same number of bytes (a new file, 8 MiB writes, fsync) on the same
file system, one after the other; the resume read next to a plain read; and the asynchronous
checkpoint's stall.

    /usr/bin/python3 tools/bench_checkpoint.py [--ranks 2] [--strategy zero3] [--layers 16] [--writes 6]

One training run writes a checkpoint after every step. After each checkpoint the benchmark stops
the ranks (SIGSTOP), makes the plain write, and lets them go on (SIGCONT): shardtrain and plain
writes alternate one by one under the same load, which on a shared machine swings by several
times within minutes. Like the checkpoints (keep = 2), the plain files are kept two at a time, the
older ones deleted after a new one is written. Every write is printed with its phases
(SHARDTRAIN_CKPT_TIMING=1) and its ratio to the plain write right after it; then the median and
the worst. Reads: the resume read of the newest checkpoint and a plain read of a plain file, both
evicted from the page cache first (posix_fadvise DONTNEED), alternating. Prints Markdown tables
for docs/benchmarks.md."""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BLOCK = 8 << 20
CKPT = re.compile(r"^checkpoint (\S+): .* in ([0-9.]+) s .*training waited ([0-9.]+) s")
PHASES = re.compile(r"^checkpoint phases \(rank 0\): copy ([0-9.]+) s \(of the stall\); (.*)$")


def env():
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", SHARDTRAIN_CKPT_TIMING="1")


def command(a, deck, sets):
    cmd = ["mpirun", "-n", str(a.ranks), "--bind-to", "none", a.exe, "run", deck]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def ranks_of(pid):
    """The processes mpirun started (the ranks)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def run_checkpointing(a, deck, sets, between=None):
    """Runs shardtrain; for each checkpoint returns (path, write s, stall s, copy s, phases). When
    `between` is given, it is called after each checkpoint with the ranks stopped."""
    proc = subprocess.Popen(command(a, deck, sets), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env(), bufsize=1)
    found, pending, lines = [], None, []
    for line in proc.stdout:
        lines.append(line)
        m = CKPT.match(line)
        if m:
            pending = (m.group(1).rstrip(":"), float(m.group(2)), float(m.group(3)))
            continue
        m = PHASES.match(line)
        if m and pending:
            phases = [(name, float(s)) for name, s in re.findall(r"(\w+) ([0-9.]+) s", m.group(2))]
            found.append(pending + (float(m.group(1)), phases))
            pending_path, pending = pending[0], None
            if between:
                ranks = ranks_of(proc.pid)
                for r in ranks:
                    os.kill(r, signal.SIGSTOP)
                try:
                    between(len(found), pending_path)
                finally:
                    for r in ranks:
                        os.kill(r, signal.SIGCONT)
    err = proc.stderr.read()
    if proc.wait() != 0:
        sys.exit(f"shardtrain failed:\n{''.join(lines[-20:])}\n{err[-3000:]}")
    return found, "".join(lines)


def plain_write(path, nbytes, block):
    """Seconds for the write calls and for the fsync."""
    start = time.time()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    while written < nbytes:
        written += os.write(fd, block[:min(BLOCK, nbytes - written)])
    wrote = time.time()
    os.fsync(fd)
    os.close(fd)
    return wrote - start, time.time() - wrote


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def plain_read(path):
    start = time.time()
    with open(path, "rb", buffering=0) as f:
        while f.read(BLOCK):
            pass
    return time.time() - start


def write_deck(a, path, out_dir, steps):
    with open(path, "w") as f:
        f.write(f"""[run]
steps = {steps}
eval_every = 0
eval_batches = 1
sample_tokens = 0
out_dir = "{out_dir}"
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--strategy", default="zero3")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--writes", type=int, default=6, help="checkpoint writes, each followed by a plain write")
    p.add_argument("--reads", type=int, default=3, help="resume reads, each followed by a plain read")
    p.add_argument("--async-writes", type=int, default=4, help="checkpoints of the checkpoint.async run")
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench_checkpoint"))
    a = p.parse_args()
    if a.writes < 5:
        sys.exit("--writes: at least 5")
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    deck = os.path.join(a.dir, "deck.toml")
    write_deck(a, deck, os.path.join(a.dir, "run"), a.writes)
    block = os.urandom(BLOCK)

    # Writes, alternating.
    plain_files, plain = [], []

    def plain_after(k, checkpoint):
        path = os.path.join(a.dir, f"plain_{k}.bin")
        plain.append(plain_write(path, os.path.getsize(checkpoint), block))
        plain_files.append(path)
        while len(plain_files) > 2:  # as keep = 2
            os.remove(plain_files.pop(0))

    writes, out = run_checkpointing(a, deck, [], plain_after)
    params = int(re.search(r"\| parameters\s+\| (\d+)", out).group(1))
    file_bytes = os.path.getsize(writes[-1][0])
    state_bytes = 3 * 4 * params

    # Reads, alternating.
    reads = []
    for _ in range(a.reads):
        evict(writes[-1][0])
        r = subprocess.run(command(a, deck, ["checkpoint.resume=latest", "checkpoint.every=0"]), capture_output=True,
                           text=True, env=env())
        if r.returncode != 0:
            sys.exit(f"resume failed:\n{r.stderr[-3000:]}")
        read = float(re.search(r"resumed from .* read in ([0-9.]+) s", r.stdout).group(1))
        evict(plain_files[-1])
        reads.append((read, plain_read(plain_files[-1])))
    for path in plain_files:
        os.remove(path)

    # The asynchronous run.
    async_dir = os.path.join(a.dir, "async")
    async_deck = os.path.join(a.dir, "async.toml")
    write_deck(a, async_deck, async_dir, a.async_writes)
    async_writes, _ = run_checkpointing(a, async_deck, ["checkpoint.async=true"])

    # Tables.
    gb = lambda n, s: n / s / 1e9
    names = [n for n, _ in writes[0][4]]
    print(f"{params / 1e6:.1f} M parameters, {a.ranks} ranks, {a.strategy}; parameters + Adam m, v = "
          f"{state_bytes / 1e9:.2f} GB (file {file_bytes / 1e9:.2f} GB); {len(writes)} checkpoint writes in one run, "
          f"each followed by a plain write of {file_bytes / 1e9:.2f} GB\n")
    print("| write | shardtrain s | " + " | ".join(names) + " | plain s (write + fsync) | plain / shardtrain |")
    print("|---|---|" + "---|" * len(names) + "---|---|")
    ratios = []
    for k, ((_, w, _, _, phases), (pw, pf)) in enumerate(zip(writes, plain), 1):
        ratio = (pw + pf) / w
        ratios.append(ratio)
        cells = " | ".join(f"{s:.3f}" for _, s in phases)
        print(f"| {k} | {w:.2f} | {cells} | {pw + pf:.2f} ({pw:.2f} + {pf:.2f}) | {ratio:.2f} |")
    ws = [w for _, w, _, _, _ in writes]
    pws = [pw + pf for pw, pf in plain]
    print(f"\nWrites: shardtrain median {statistics.median(ws):.2f} s ({gb(state_bytes, statistics.median(ws)):.2f} GB/s), "
          f"plain median {statistics.median(pws):.2f} s ({gb(file_bytes, statistics.median(pws)):.2f} GB/s); "
          f"plain / shardtrain median {statistics.median(ratios):.2f}, worst {min(ratios):.2f} "
          f"(write {ratios.index(min(ratios)) + 1}); later writes only (2-{len(writes)}): median "
          f"{statistics.median(ratios[1:]):.2f}, worst {min(ratios[1:]):.2f}")
    print("\n| read | shardtrain resume read s | plain read s | plain / shardtrain |")
    print("|---|---|---|---|")
    for k, (rd, prd) in enumerate(reads, 1):
        print(f"| {k} | {rd:.2f} | {prd:.2f} | {prd / rd:.2f} |")
    read_ratios = [prd / rd for rd, prd in reads]
    print(f"\nReads (both from the device, evicted from the page cache first): median ratio "
          f"{statistics.median(read_ratios):.2f}, worst {min(read_ratios):.2f}")
    print("\nAsynchronous checkpoints (checkpoint.async = true), one run:\n")
    print("| checkpoint | training waited s | of which the copy s | waiting for the previous write s | "
          "write in the background s |")
    print("|---|---|---|---|---|")
    for k, (_, w, stall, copy, _) in enumerate(async_writes, 1):
        print(f"| {k} | {stall:.3f} | {copy:.3f} | {max(0.0, stall - copy):.3f} | {w:.2f} |")
    if len(async_writes) > 1:
        first = async_writes[0][3]
        later = [c for _, _, _, c, _ in async_writes[1:]]
        print(f"\nCopy: first {first:.3f} s, later median {statistics.median(later):.3f} s, worst {max(later):.3f} s "
              f"({max(later) / first:.2f} of the first)")


if __name__ == "__main__":
    main()
