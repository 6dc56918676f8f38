"""Memory before allocation: `check` and `run` compare the planner's memory per rank with the
node's (SHARDTRAIN_NODE_MEM_GB / --node-mem-gb: one node's memory, shared by its ranks) and
refuse a deck that cannot fit, naming the figure, the limit and what would fit; nothing is
allocated first (no std::bad_alloc reaches the user).

1. A 4.8-billion-parameter deck on a 16 GiB node: refused by `check` and by `run`, with the
   model state the ZeRO table gives (16 bytes per parameter in fp32 with Adam).
2. A deck that fits only with zero3 on 4 ranks (each rank its own emulated node): the limit is
   set between zero3's figure on 4 ranks and every other strategy's; zero3 on 4 ranks is
   accepted by `check` and trains under `run`; on 1 rank it is refused, naming zero3 on 4 ranks.
3. A deck whose activations (sequences of 512) fit only with recomputation: the limit is set
   between what selective and none need; `check` without recomputation is refused and names
   model.recompute = "selective" with its figure; the deck with it is accepted and trains under
   `run`, its measured memory within the limit."""
import os
import re

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
SCALE = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def run(ranks, argv, mem_gb):
    return h.mpirun_on_node(args, ranks, argv, mem_gb)


def predicted(deck, ranks, strategy, extra=()):
    """The planner's memory per rank for the strategy on `ranks` ranks (a roomy node)."""
    proc = run(1, ["check", deck, "--ranks", str(ranks), "--set", f'parallel.strategy="{strategy}"'] + list(extra), 1000)
    h.check(proc.returncode == 0, f"check --ranks {ranks} {strategy} on a 1000 GiB node passes\n{proc.stderr[-800:]}")
    m = re.search(r"memory per rank\s*\|\s*([0-9.]+) (B|KiB|MiB|GiB) predicted", proc.stdout)
    psi = int(re.search(r"parameters\s*\|\s*(\d+)", proc.stdout).group(1))
    return float(m.group(1)) * SCALE[m.group(2)], psi


# 1. Far too big for the node.
big = h.small_deck(work, "big", corpus, model={"n_layer": 96, "d_model": 2048, "n_head": 16, "seq_len": 64},
                   data={"global_batch": 64, "micro_batch": 1})
_, psi = predicted(big, 1, "ddp")
state_gib = 16 * psi / 2**30
for command in (["check", big], ["run", big]):
    proc = run(1, command, 16)
    err = proc.stderr
    h.check(proc.returncode == 2, f"{command[0]}: a {psi / 1e9:.1f}e9-parameter deck on a 16 GiB node is refused "
                                  f"(exit {proc.returncode})")
    h.check("bad_alloc" not in err and "deck OK" not in proc.stdout, f"{command[0]}: refused before allocating")
    m = re.search(r"needs ([0-9.]+) GiB per rank \(model state ([0-9.]+) GiB", err)
    h.check(m is not None and abs(float(m.group(2)) - state_gib) <= 0.01 * state_gib,
            f"{command[0]}: names the model state, 16 Psi = {state_gib:.2f} GiB ({m and m.group(0)})")
    h.check("more than the 16.00 GiB per rank available" in err, f"{command[0]}: names the limit")
    h.check("It would fit with" in err and "zero3 on" in err, f"{command[0]}: says what would fit\n{err[-600:]}")
# With a global batch that does not split further, the message says that is the limit.
proc = run(1, ["check", big, "--set", "data.global_batch=4"], 16)
h.check(proc.returncode == 2 and "Nothing fits on up to 4 ranks" in proc.stderr and
        "data.global_batch = 4 does not split over more" in proc.stderr,
        f"check: nothing fits within the global batch's 4 ranks, and it says so\n{proc.stderr[-600:]}")

# 2. Fits only with zero3 on 4 ranks, one rank per (emulated) node.
deck = h.small_deck(work, "zero3only", corpus, run={"steps": 2}, model={"n_layer": 8, "d_model": 128},
                    data={"global_batch": 4}, parallel={"ranks_per_node": 1, "strategy": "zero3"})
zero3_4, _ = predicted(deck, 4, "zero3")
others = [predicted(deck, 4, s)[0] for s in ("ddp", "zero1", "zero2")] + [predicted(deck, 1, "zero3")[0]]
h.check(zero3_4 < min(others), f"zero3 on 4 ranks needs the least ({zero3_4:.0f} B against {min(others):.0f} B)")
limit_gb = (zero3_4 + min(others)) / 2 / 2**30
proc = run(1, ["check", deck, "--ranks", "4"], limit_gb)
h.check(proc.returncode == 0 and "deck OK" in proc.stdout, f"check: zero3 on 4 ranks fits in {limit_gb * 2**30:.0f} B")
for strategy in ("ddp", "zero1", "zero2"):
    proc = run(1, ["check", deck, "--ranks", "4", "--set", f'parallel.strategy="{strategy}"'], limit_gb)
    h.check(proc.returncode == 2 and "needs" in proc.stderr, f"check: {strategy} on 4 ranks is refused")
proc = run(4, ["run", deck], limit_gb)
h.check(proc.returncode == 0, f"run: zero3 on 4 ranks trains\n{proc.stderr[-800:]}")
rows = h.metrics(os.path.join(work, "zero3only"))
memory = [r for r in rows if r["kind"] == "memory"][-1]
measured = sum(memory[k] for k in ("params", "grads", "optimizer", "workspace", "activations"))
h.check(abs(measured - zero3_4) <= 0.05 * measured,
        f"run: the measured {measured} B per rank = the prediction {zero3_4:.0f} B within 5% (10 segments)")
h.check(measured <= limit_gb * 2**30, f"run: the measured {measured} B per rank is within the limit")
for command in ("check", "run"):
    proc = run(1, [command, deck], limit_gb)
    err = proc.stderr
    h.check(proc.returncode == 2 and "bad_alloc" not in err, f"{command}: zero3 on 1 rank is refused (exit {proc.returncode})")
    h.check(re.search(r"zero3 on 4 rank\(s\)", err) is not None, f"{command}: suggests zero3 on 4 ranks\n{err[-600:]}")

# 3. Fits only with activation recomputation.
deck = h.small_deck(work, "recompute", corpus, run={"steps": 2},
                    model={"n_layer": 2, "d_model": 128, "n_head": 8, "seq_len": 512},
                    data={"global_batch": 2, "micro_batch": 2})
need = {r: predicted(deck, 1, "ddp", ["--set", f'model.recompute="{r}"'])[0] for r in ("none", "selective")}
h.check(need["selective"] < need["none"] / 2, f"selective needs less than half: {need}")
limit_gb = (need["none"] + need["selective"]) / 2 / 2**30
proc = run(1, ["check", deck], limit_gb)
m = re.search(r'it fits with model.recompute = "selective": ([0-9.]+) (B|KiB|MiB|GiB) per rank', proc.stderr)
h.check(proc.returncode == 2 and m is not None, f"check: refused without recomputation, naming selective\n"
                                                f"{proc.stderr[-600:]}")
h.check(abs(float(m.group(1)) * SCALE[m.group(2)] - need["selective"]) <= 0.01 * need["selective"],
        f"check: names what selective needs ({m.group(0)})")
with_selective = ["--set", 'model.recompute="selective"']
proc = run(1, ["check", deck] + with_selective, limit_gb)
h.check(proc.returncode == 0 and "deck OK" in proc.stdout, "check: the deck with selective recomputation fits")
proc = run(1, ["run", deck] + with_selective, limit_gb)
h.check(proc.returncode == 0, f"run: trains with selective recomputation\n{proc.stderr[-800:]}")
memory = [r for r in h.metrics(os.path.join(work, "recompute")) if r["kind"] == "memory"][-1]
h.check(memory["total"] <= limit_gb * 2**30, f"run: the measured {memory['total']} B per rank is within the limit")
print("passed")
