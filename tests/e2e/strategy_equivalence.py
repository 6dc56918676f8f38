"""Each parallel strategy gives the single-rank run: 20 steps of a small GPT on 1, 2, 3 and 4
ranks (hsdp on 2 x 2 emulated nodes and in groups of 2 on 4 flat ranks), and with
parallel.overlap = false, match one rank's losses, gradient norms and final parameters within
1e-5 (fp32). Accumulation: 3 micro-batches on 2 ranks equal one batch. In bf16 mixed precision
the strategy runs on several ranks match bf16 on one rank closely and fp32 loosely."""
import os

import harness as h

args = h.parse_args({"--strategy": {"required": True}})
strategy = args.strategy
work = h.tmpdir()
corpus = h.corpus(args)


def run(ranks, label, strategy, micro=0, precision="fp32", extra=()):
    deck = h.small_deck(work, label, corpus, run={"steps": 20, "eval_every": 10, "eval_batches": 2},
                        data={"micro_batch": micro},
                        parallel={"strategy": strategy, "precision": precision, "bucket_mb": 0.02})
    return h.train(args, ranks, deck, os.path.join(work, label), label, extra)


def close(a, b, rel):
    return len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


def params_close(a, b, rel):
    """Every parameter within rel of the reference, relative to the tensor scale (max |p|)."""
    scale = max(abs(x) for x in b)
    worst = max(abs(x - y) for x, y in zip(a, b))
    return len(a) == len(b) and worst <= rel * scale, worst / scale


def compare(label, got, ref, rel):
    h.check(close(got["loss"], ref["loss"], rel), f"{label}: losses equal the reference within {rel}\n"
                                                   f"{got['loss']}\n{ref['loss']}")
    h.check(close(got["norm"], ref["norm"], rel), f"{label}: gradient norms equal within {rel}")
    h.check(close(got["val"], ref["val"], rel), f"{label}: validation losses equal within {rel}")
    ok, worst = params_close(got["params"], ref["params"], rel)
    h.check(ok, f"{label}: final parameters equal within {rel} of the largest (worst {worst:.2e})")


ref = run(1, "ref_ddp_np1", "ddp")
h.check(ref["loss"][-1] < ref["loss"][0] - 0.5, "the reference run learns")
nodes = ["--set", "parallel.ranks_per_node=2"]
if strategy == "hsdp":
    cases = [(1, 0, [], "np1"), (4, 0, nodes, "nodes2x2"), (4, 0, nodes + ["--set", "parallel.collectives=flat"],
                                                             "nodes2x2_flat_world"),
             (4, 0, ["--set", "parallel.shard_group=2"], "np4_groups_of_2"),
             (2, 2, nodes[:1] + ["parallel.ranks_per_node=1"], "np2_groups_of_1_micro2")]
else:
    cases = [(1, 0, [], "np1"), (2, 0, [], "np2"), (3, 0, [], "np3"), (4, 0, [], "np4"), (2, 3, [], "np2_micro3"),
             (4, 0, nodes, "nodes2x2"), (3, 2, ["--set", "parallel.overlap=false"], "np3_micro2_no_overlap")]
for ranks, micro, extra, label in cases:
    compare(f"{strategy} {label}", run(ranks, f"{strategy}_{label}", strategy, micro, extra=extra), ref, 1e-5)

# bf16 mixed precision: several ranks against one (same rounding points, other summation order),
# and against fp32 (bf16 parameters and gradients: a looser match).
bf16_ref = run(1, "bf16_ref_np1", strategy, precision="bf16")
bf16 = run(4 if strategy != "hsdp" else 4, f"bf16_{strategy}_np4", strategy, precision="bf16",
           extra=nodes if strategy == "hsdp" else [])
h.check(close(bf16["loss"], bf16_ref["loss"], 2e-3), f"bf16 {strategy}: 4 ranks match 1 rank within 2e-3\n"
                                                      f"{bf16['loss']}\n{bf16_ref['loss']}")
h.check(close(bf16_ref["loss"], ref["loss"], 2e-2), f"bf16 {strategy}: losses within 2e-2 of fp32\n"
                                                     f"{bf16_ref['loss']}\n{ref['loss']}")
print("passed")
