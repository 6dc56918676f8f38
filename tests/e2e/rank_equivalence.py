"""One deck, one training run: the same losses on 1, 2, 3 and 4 ranks, with gradient
accumulation (k micro-batches of b equal one batch of k*b), with DDP's gradient buckets small
(many all-reduces started during backward) or single, and on emulated nodes."""
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def run(ranks, micro, label, extra=()):
    deck = h.small_deck(work, label, corpus, run={"eval_every": 4, "eval_batches": 2}, data={"micro_batch": micro})
    proc = h.mpirun(args, ranks, ["run", deck] + list(extra), timeout=300)
    h.check(proc.returncode == 0, f"{label}: exits 0\n{proc.stderr[-1500:]}")
    rows = h.metrics(os.path.join(work, label))
    train = [r for r in rows if r["kind"] == "train"]
    run.inter_bytes[label] = train[-1]["comm_inter_bytes"]
    return [r["loss"] for r in train], [r["val_loss"] for r in rows if r["kind"] == "val"], \
        [r["grad_norm"] for r in train]


run.inter_bytes = {}


def close(a, b, rel):
    return len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


ref_loss, ref_val, ref_norm = run(1, 0, "np1")
h.check(ref_loss[-1] < ref_loss[0], "the reference run learns")
nodes = ["--set", "parallel.ranks_per_node=2"]
for ranks, micro, extra, label in ((2, 0, [], "np2"), (3, 0, [], "np3"), (4, 0, [], "np4"), (1, 3, [], "np1_micro3"),
                                   (2, 2, [], "np2_micro2"), (3, 2, [], "np3_micro2"),
                                   (3, 0, ["--set", "parallel.intra_node=mpi"], "np3_mpi_collectives"),
                                   (3, 2, ["--set", "parallel.bucket_mb=0.01"], "np3_micro2_small_buckets"),
                                   (2, 0, ["--set", "parallel.bucket_mb=0"], "np2_one_bucket"),
                                   (4, 0, nodes, "nodes2x2_two_level"),
                                   (4, 0, nodes + ["--set", "parallel.collectives=flat"], "nodes2x2_flat")):
    loss, val, norm = run(ranks, micro, label, extra)
    h.check(close(loss, ref_loss, 1e-5), f"{label}: losses equal the 1-rank run within 1e-5\n{loss}\n{ref_loss}")
    h.check(close(norm, ref_norm, 1e-5), f"{label}: gradient norms equal within 1e-5")
    h.check(close(val, ref_val, 1e-5), f"{label}: validation losses equal within 1e-5")
two, flat = run.inter_bytes["nodes2x2_two_level"], run.inter_bytes["nodes2x2_flat"]
# Flat ring over 4 ranks: 2 (3/4) B counted as crossing; two-level: 2 (1/2) B / 2 across nodes.
# (Both also all-reduce the step's loss, 8 bytes: 12 bytes across nodes flat, 8 two-level.)
h.check(two * 3 - 24 == flat - 12, f"on 2 x 2 nodes the two-level all-reduce sends a third of the flat ring's "
                                    f"gradient bytes across nodes ({two} vs {flat})")
print("passed")
