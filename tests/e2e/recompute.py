"""Activation recomputation (model.recompute) changes memory, not results.

For every strategy, selective and full recomputation give the run that keeps every activation
bit for bit: 20 steps of losses, gradient norms, validation losses and the final parameters, on
2 ranks with 2 micro-batches per step (hsdp on 2 x 2 emulated nodes), in fp32, and for zero3
in bf16 too. Communication per step is the same byte for byte (zero3's gathers for backward
serve the recomputation: no extra gather). The activation bytes each run reports equal what
`check` predicts for the deck, fall from none to selective to full, and the memory per rank the
run measures (peak resident set above what the process held before its buffers) equals the
predicted total within 5%."""
import os
import re

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
SETTINGS = ("none", "selective", "full")


def run(label, strategy, recompute, ranks=2, precision="fp32", extra=(), steps=20, model=None, data=None):
    deck = h.small_deck(work, label, corpus, run={"steps": steps, "eval_every": 10, "eval_batches": 2},
                        model={"recompute": recompute, **(model or {})}, data={"micro_batch": 3, **(data or {})},
                        parallel={"strategy": strategy, "precision": precision, "bucket_mb": 0.02})
    got = h.train(args, ranks, deck, os.path.join(work, label), label, extra)
    train = [r for r in got["rows"] if r["kind"] == "train"]
    got["comm"] = [(r["comm_intra_bytes"], r["comm_inter_bytes"]) for r in train]
    got["memory"] = [r for r in got["rows"] if r["kind"] == "memory"][-1]
    got["deck"] = deck
    return got


def same(label, got, ref):
    for key in ("loss", "norm", "val"):
        h.check(got[key] == ref[key], f"{label}: {key} equal to the run without recomputation bit for bit\n"
                                      f"{got[key]}\n{ref[key]}")
    h.check(got["params"].tobytes() == ref["params"].tobytes(), f"{label}: final parameters equal bit for bit")
    h.check(got["comm"] == ref["comm"], f"{label}: bytes sent per step equal ({got['comm'][0]} vs {ref['comm'][0]})")


nodes = ["--set", "parallel.ranks_per_node=2"]
for strategy in ("ddp", "zero1", "zero2", "zero3", "hsdp"):
    ranks, extra = (4, nodes) if strategy == "hsdp" else (2, [])
    ref = run(f"{strategy}_none", strategy, "none", ranks, extra=extra)
    h.check(ref["loss"][-1] < ref["loss"][0] - 0.3, f"{strategy}: the reference run learns")
    h.check(all(sum(c) > 0 for c in ref["comm"]), f"{strategy}: ranks communicate every step")
    for recompute in SETTINGS[1:]:
        same(f"{strategy} {recompute}", run(f"{strategy}_{recompute}", strategy, recompute, ranks, extra=extra), ref)

# bf16 mixed precision, and one rank (where the whole step runs on two threads).
for label, strategy, ranks, precision in (("bf16_zero3", "zero3", 2, "bf16"), ("np1", "ddp", 1, "fp32")):
    ref = run(f"{label}_none", strategy, "none", ranks, precision)
    for recompute in SETTINGS[1:]:
        same(f"{label} {recompute}", run(f"{label}_{recompute}", strategy, recompute, ranks, precision), ref)

# Memory: a shape where activations are most of it (sequences of 512, the attention probabilities
# 8 x 512 x 512 per sequence and block), one rank, few steps (the pages of the training text a
# run reads count in its resident set too).
unit = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
activations = {}
for recompute in SETTINGS:
    label = f"memory_{recompute}"
    got = run(label, "ddp", recompute, 1, steps=3, model={"n_layer": 2, "d_model": 256, "n_head": 8, "seq_len": 512},
              data={"global_batch": 4, "micro_batch": 2})
    m = got["memory"]
    activations[recompute] = m["activations"]
    proc = h.mpirun(args, 1, ["check", got["deck"]])
    h.check(proc.returncode == 0, f"{label}: check exits 0\n{proc.stderr[-800:]}")
    said = re.search(r"activations per rank\s*\|\s*([0-9.]+) (B|KiB|MiB|GiB) \(model.recompute = (\w+)\)", proc.stdout)
    h.check(said is not None and said.group(3) == recompute, f"{label}: check names the recomputation")
    predicted = float(said.group(1)) * unit[said.group(2)]
    h.check(abs(predicted - m["activations"]) <= 0.005 * m["activations"] + 0.01 * unit[said.group(2)],
            f"{label}: check predicts {said.group(0)}, the run holds {m['activations']} B")
    grown = m["resident_peak"] - m["resident_before"]
    h.check(abs(grown - m["total"]) <= 0.05 * m["total"],
            f"{label}: measured growth of the resident set {grown} B = the predicted {m['total']} B within 5%")
# They fall by what each setting stops keeping (4-byte elements; N = B T rows, C channels, L
# blocks): selective the probabilities (B NH T^2 per block, less the blocks of the heads in
# flight, one per thread) and the GELU output (4 N C); full also ln1, qkv, atty, res2, ln2, fch
# (11 N C) and the norm statistics (4 N) of every block but one working set.
threads = int(re.search(r"threads per rank\s*\|\s*(\d+)", got["stdout"]).group(1))
B, T, C, NH, L = 2, 512, 256, 8, 2
N, heads = B * T, min(threads, B * NH)
# Each run of the allocation (statistics, values) is padded to 256 bytes: the differences hold to
# within two runs' padding.
h.check(abs(activations["none"] - activations["selective"] - 4 * (L * (B * NH * T * T + 4 * N * C) - heads * T * T)) < 512,
        f"selective keeps {activations['none'] - activations['selective']} B less than none: the probabilities and "
        f"GELU outputs of {L} blocks, less {heads} block(s) in flight")
h.check(abs(activations["selective"] - activations["full"] - 4 * (L - 1) * (11 * N * C + 4 * N)) < 512,
        f"full keeps {activations['selective'] - activations['full']} B less than selective: all but each block's "
        f"input, once for {L} blocks less one working set")
print("passed")
