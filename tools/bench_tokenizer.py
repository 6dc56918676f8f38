#!/usr/bin/python3
"""Tokenizer benchmark: shardtrain's GPT-2 encoder against OpenAI's tiktoken (npm, its Rust core
compiled to WebAssembly, run by node) on the same file, one core each.

    /usr/bin/python3 tools/bench_tokenizer.py [--samples 7] [--core 0] [FILE ...]

Default files: data/fortunes.txt and a generated text of many scripts (the one the tokenizer
test makes). Each sample runs, pinned to one core (taskset), tiktoken then shardtrain, each
in a fresh process: tiktoken through tests/tools/tiktoken_encode.js (a fresh encoder, the
time of encode_ordinary), shardtrain through `shardtrain tokenize` on one rank (a fresh
tokenizer with an empty piece cache, the time of encoding alone). Loading the vocabularies
and writing the output are outside both times. Both outputs are compared token for token.
Prints every sample, its ratio (tiktoken's time / shardtrain's) and the median, as Markdown
for docs/benchmarks.md."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
OURS = re.compile(r"^encoded .* into (\d+) tokens on 1 rank\(s\) in ([0-9.]+) s", re.M)
THEIRS = re.compile(r"^tiktoken: (\d+) bytes into (\d+) tokens in ([0-9.]+) s", re.M)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*")
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "shardtrain"))
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="st_bench_tok_")
    files = [(f, f) for f in a.files]
    if not files:
        from many_scripts import many_scripts
        mixed = os.path.join(work, "many_scripts.txt")
        with open(mixed, "w", encoding="utf-8", newline="") as f:
            f.write(many_scripts(2024, 40000))
        files = [(os.path.join(ROOT, "data", "fortunes.txt"), "data/fortunes.txt"),
                 (mixed, "many scripts (tests/e2e/many_scripts.py, seed 2024, 40000 pieces)")]
    pin = ["taskset", "-c", str(a.core)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for path, label in files:
        size = os.path.getsize(path)
        print(f"\n{label}: {size} bytes\n")
        print("| sample | tiktoken s | shardtrain s | tiktoken MB/s | shardtrain MB/s | ratio (tiktoken s / shardtrain s) |")
        print("|---|---|---|---|---|---|")
        ratios = []
        ref_out, our_out = os.path.join(work, "tiktoken.bin"), os.path.join(work, "ours.bin")
        for k in range(a.samples):
            theirs = subprocess.run(pin + ["node", os.path.join(ROOT, "tests", "tools", "tiktoken_encode.js"), path,
                                           ref_out], capture_output=True, text=True, check=True)
            ours = subprocess.run(pin + [a.exe, "tokenize", path, our_out], capture_output=True, text=True, env=env,
                                  check=True)
            t, o = THEIRS.search(theirs.stdout), OURS.search(ours.stdout)
            if not t or not o:
                sys.exit(f"unexpected output:\n{theirs.stdout}\n{ours.stdout}")
            with open(ref_out, "rb") as x, open(our_out, "rb") as y:
                if x.read() != y.read():
                    sys.exit(f"{path}: shardtrain's tokens differ from tiktoken's")
            t_s, o_s = float(t.group(3)), float(o.group(2))
            ratios.append(t_s / o_s)
            print(f"| {k + 1} | {t_s:.3f} | {o_s:.3f} | {size / t_s / 1e6:.2f} | {size / o_s / 1e6:.2f} | "
                  f"{t_s / o_s:.2f} |", flush=True)
        print(f"\nmedian ratio {statistics.median(ratios):.2f}, lowest {min(ratios):.2f}, highest {max(ratios):.2f} "
              f"({a.samples} samples; above 1: shardtrain is faster)")


if __name__ == "__main__":
    main()
