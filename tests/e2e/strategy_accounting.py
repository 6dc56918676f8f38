"""Memory and traffic follow the ZeRO table (../shared formulas, in docs/strategies.md).

For every strategy in fp32 and bf16 at 1, 2 and 4 ranks: the model-state bytes each rank reports
(parameters, gradients, optimizer state) equal the table within 5%, and zero3's fall as 1/N.
Bytes per step counted by the communicators equal the formula within 1%: ddp, zero1 and zero2
2 Psi (N-1)/N elements, zero3 3 Psi (N-1)/N; hsdp on 2 x 2 emulated nodes 3 Psi_g (g-1)/g within
the node and one all-reduce of the shard, 2 (Psi/g) (G-1)/G, across nodes. With run.trace_steps
the timeline of each rank is valid Chrome-trace JSON holding compute spans and collectives. The
planner's memory per rank (`check`: model state, activations and workspace) equals the measured
total within 5%."""
import json
import os
import re

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def run(ranks, strategy, precision, extra=()):
    label = f"{strategy}_{precision}_np{ranks}" + ("_nodes" if extra else "")
    deck = h.small_deck(work, label, corpus, run={"steps": 3}, model={"d_model": 64}, data={"global_batch": 4},
                        parallel={"strategy": strategy, "precision": precision, "bucket_mb": 0.05})
    proc = h.mpirun(args, ranks, ["run", deck] + list(extra), timeout=300)
    h.check(proc.returncode == 0, f"{label}: exits 0\n{proc.stderr[-1500:]}")
    rows = h.metrics(os.path.join(work, label))
    return label, rows


def within(x, y, rel):
    return abs(x - y) <= rel * abs(y)


# bytes of a parameter or gradient, and of the optimizer state per parameter (K)
SIZES = {"fp32": (4, 8), "bf16": (2, 12)}


def zero_table(strategy, precision, psi, n):
    t, k = SIZES[precision]
    stage = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "hsdp": 3}[strategy]
    params = t * psi / (n if stage == 3 else 1)
    grads = t * psi / (n if stage >= 2 else 1)
    optimizer = k * psi / (n if stage >= 1 else 1)
    return params + grads + optimizer


zero3_state = {}
for precision in ("fp32", "bf16"):
    for strategy in ("ddp", "zero1", "zero2", "zero3"):
        for ranks in (1, 2, 4):
            label, rows = run(ranks, strategy, precision)
            psi = next(r for r in rows if r["kind"] == "run")["parameters"]
            memory = [r for r in rows if r["kind"] == "memory"][-1]
            state = memory["params"] + memory["grads"] + memory["optimizer"]
            expected = zero_table(strategy, precision, psi, ranks)
            h.check(within(state, expected, 0.05), f"{label}: model state {state} B = ZeRO table {expected:.0f} B "
                                                   f"within 5%")
            if strategy == "zero3":
                zero3_state[(precision, ranks)] = state
            # `check --ranks N` predicts the same bytes (printed in MiB with two decimals).
            proc = h.mpirun(args, 1, ["check", os.path.join(work, label + ".toml"), "--ranks", str(ranks)])
            predicted = re.search(r"model state per rank\s*\|\s*([0-9.]+) (MiB|KiB)", proc.stdout)
            unit = 2**20 if predicted and predicted.group(2) == "MiB" else 2**10
            h.check(predicted is not None and abs(float(predicted.group(1)) * unit - state) <= 0.01 * state,
                    f"{label}: check --ranks {ranks} predicts the model state ({predicted and predicted.group(0)})")
            # ... and the planner's memory per rank (model state, activations, workspace) equals the
            # measured total within 5%.
            total = state + memory["workspace"] + memory["activations"]
            m = re.search(r"memory per rank\s*\|\s*([0-9.]+) (B|KiB|MiB|GiB) predicted", proc.stdout)
            scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
            h.check(m is not None and within(float(m.group(1)) * scale[m.group(2)], total, 0.05),
                    f"{label}: check --ranks {ranks} predicts the memory per rank ({m and m.group(0)}) = measured "
                    f"{total} B within 5%")
            # Step 2 (no validation, buffers warm): bytes this rank sent.
            step = [r for r in rows if r["kind"] == "train"][1]
            t = SIZES[precision][0]
            factor = 3 if strategy == "zero3" else 2
            expected_bytes = factor * psi * t * (ranks - 1) / ranks
            sent = step["comm_bytes"]
            if ranks == 1:
                h.check(sent == 0, f"{label}: one rank sends nothing ({sent} B)")
            else:
                h.check(within(sent, expected_bytes, 0.01), f"{label}: {sent} B sent per step = "
                                                            f"{factor} Psi (N-1)/N = {expected_bytes:.0f} B within 1%")
    for ranks in (2, 4):
        ratio = zero3_state[(precision, ranks)] / zero3_state[(precision, 1)]
        h.check(within(ratio, 1 / ranks, 0.05), f"zero3 {precision}: model state on {ranks} ranks is 1/{ranks} "
                                                f"of one rank's ({ratio:.4f})")

# hsdp on 2 nodes x 2 ranks: sharded in the node, replicated across; with a timeline.
label, rows = run(4, "hsdp", "fp32", ["--set", "parallel.ranks_per_node=2", "--set", "run.trace_steps=2"])
psi = next(r for r in rows if r["kind"] == "run")["parameters"]
memory = [r for r in rows if r["kind"] == "memory"][-1]
state = memory["params"] + memory["grads"] + memory["optimizer"]
h.check(within(state, zero_table("hsdp", "fp32", psi, 2), 0.05), f"{label}: model state = ZeRO-3 over the group "
                                                                   f"of 2 within 5% ({state} B)")
step = [r for r in rows if r["kind"] == "train"][1]
g, groups = 2, 2
intra = 3 * psi * 4 * (g - 1) / g
inter = 2 * (psi / g) * 4 * (groups - 1) / groups
h.check(within(step["comm_intra_bytes"], intra, 0.01), f"{label}: {step['comm_intra_bytes']} B within the node = "
                                                        f"3 Psi (g-1)/g = {intra:.0f} B within 1%")
h.check(within(step["comm_inter_bytes"], inter, 0.01), f"{label}: {step['comm_inter_bytes']} B across nodes = one "
                                                        f"all-reduce of the shard = {inter:.0f} B within 1%")
for rank in range(4):
    with open(os.path.join(work, label, f"trace.rank{rank}.json")) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    names = {e["name"] for e in events}
    h.check({"compute", "comm: group", "comm: replicas"} <= tracks, f"rank {rank}'s timeline has compute, group "
                                                                     f"and replica tracks ({sorted(tracks)})")
    h.check({"forward block0", "backward block1", "all_gather", "reduce_scatter", "all_reduce"} <= names,
            f"rank {rank}'s timeline holds segment compute and each kind of collective")
print("passed")
