"""parallel.grad_reduction under gradient accumulation: 4 micro-batches a step per data-parallel rank.

1. "every_micro_batch" with zero2 and zero3 on 2 ranks and hsdp on 2 x 2 emulated nodes: every
   step's loss equals one rank's (ddp on the same 8 sequences a step, in 8 micro-batches) within
   1e-5, and so does the same strategy reducing "once".
2. Memory: the measured workspace no longer holds a whole-model fp32 gradient: it falls, against
   "once", by at least half of 4 Psi bytes (a model of 12 blocks: the buffers of three blocks, the
   embeddings and the final norm are in use at once, and three chunks on their way into the shard); `check --ranks N` predicts each
   rank's memory (model state, activations, workspace) within 3% of the measured total, both ways,
   in fp32 and bf16.
3. Bytes: zero3 sends 3m Psi (N-1)/N a step reducing every micro-batch against (2m + 1) Psi (N-1)/N
   once, m = 4 (its gathers before each forward and backward stay): the difference is
   (m - 1) Psi (N-1)/N within 1%, as the communicators count it.
4. auto: on a roomy node it reduces once ("the whole-model gradient fits"); on a node whose memory
   lies between the two predictions, every micro-batch ("a whole-model gradient would not fit"),
   and the run trains."""
import os
import re

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
SCALE = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
STEPS = 4


def deck(label, strategy, reduction, precision="fp32"):
    return h.small_deck(work, label, corpus, run={"steps": STEPS}, model={"n_layer": 12, "d_model": 48, "n_head": 4},
                        data={"global_batch": 8, "micro_batch": 1},
                        parallel={"strategy": strategy, "grad_reduction": reduction, "precision": precision})


def train(label, ranks, strategy, reduction, precision="fp32", extra=()):
    path = deck(label, strategy, reduction, precision)
    proc = h.mpirun(args, ranks, ["run", path] + list(extra), timeout=300)
    h.check(proc.returncode == 0, f"{label}: exits 0\n{proc.stderr[-1500:]}")
    rows = h.metrics(os.path.join(work, label))
    return path, proc, rows


def losses(rows):
    return [r["loss"] for r in rows if r["kind"] == "train"]


def predicted_memory(path, ranks, extra=()):
    proc = h.mpirun_on_node(args, 1, ["check", path, "--ranks", str(ranks)] + list(extra), 1000)
    h.check(proc.returncode == 0, f"check {path} --ranks {ranks}\n{proc.stderr[-800:]}")
    m = re.search(r"memory per rank\s*\|\s*([0-9.]+) (B|KiB|MiB|GiB) predicted", proc.stdout)
    return float(m.group(1)) * SCALE[m.group(2)], proc.stdout


def measured_memory(rows):
    memory = [r for r in rows if r["kind"] == "memory"][-1]
    return memory, sum(memory[k] for k in ("params", "grads", "optimizer", "workspace", "activations"))


_, _, reference_rows = train("reference", 1, "ddp", "once")
reference = losses(reference_rows)
psi = next(r for r in reference_rows if r["kind"] == "run")["parameters"]
h.check(len(reference) == STEPS, f"one rank logs {STEPS} steps ({len(reference)})")

nodes = ["--set", "parallel.ranks_per_node=2"]
workspace = {}
for strategy, ranks, extra in (("zero2", 2, ()), ("zero3", 2, ()), ("hsdp", 4, nodes)):
    for reduction in ("every_micro_batch", "once"):
        label = f"{strategy}_{reduction}"
        path, proc, rows = train(label, ranks, strategy, reduction, extra=extra)
        got = losses(rows)
        worst = max(abs(a - b) for a, b in zip(got, reference))
        h.check(len(got) == STEPS and worst <= 1e-5,
                f"{label} on {ranks} ranks: every step's loss = one rank's within 1e-5 (largest difference {worst:.2e})")
        h.check(re.search(rf"parallel\.grad_reduction\s*\|\s*\"{reduction}\"\s*\|\s*\S+\.toml:\d+", proc.stdout) is not None,
                f"{label}: the settings table shows the deck's parallel.grad_reduction")
        memory, total = measured_memory(rows)
        workspace[label] = memory["workspace"]
        want, _ = predicted_memory(path, ranks, extra)
        h.check(abs(want - total) <= 0.03 * total,
                f"{label}: check predicts {want:.0f} B per rank = measured {total} B within 3%")
        if strategy == "zero3":
            workspace[label + "_sent"] = [r for r in rows if r["kind"] == "train"][1]["comm_bytes"]
    drop = workspace[f"{strategy}_once"] - workspace[f"{strategy}_every_micro_batch"]
    h.check(drop >= 0.5 * 4 * psi, f"{strategy}: every micro-batch holds no whole-model gradient: the workspace "
                                   f"falls by {drop} B >= half of 4 Psi = {2 * psi:.0f} B")

m, n = 4, 2
extra_bytes = workspace["zero3_every_micro_batch_sent"] - workspace["zero3_once_sent"]
expected = (m - 1) * psi * 4 * (n - 1) / n
h.check(abs(extra_bytes - expected) <= 0.01 * expected,
        f"zero3: reducing every micro-batch sends {extra_bytes} B more a step = (m - 1) Psi (N-1)/N = "
        f"{expected:.0f} B within 1%")

# bf16: the fp32 sum of the shard is planned too.
for reduction in ("every_micro_batch", "once"):
    label = f"zero3_bf16_{reduction}"
    path, proc, rows = train(label, 2, "zero3", reduction, "bf16")
    got = losses(rows)
    worst = max(abs(a - b) for a, b in zip(got, reference))
    h.check(worst <= 0.05, f"{label}: losses near fp32's (bf16 rounds; largest difference {worst:.3f})")
    _, total = measured_memory(rows)
    want, _ = predicted_memory(path, 2)
    h.check(abs(want - total) <= 0.03 * total, f"{label}: check predicts {want:.0f} B per rank = measured {total} B "
                                               f"within 3%")

# auto: once where it fits, every micro-batch where only that fits.
auto = deck("zero3_auto", "zero3", "auto")
roomy, text = predicted_memory(auto, 2)
h.check(re.search(r"parallel\.grad_reduction\s*\|\s*\"once\"\s*\|\s*auto: the whole-model gradient fits", text)
        is not None, "auto on a roomy node: once, saying the whole-model gradient fits")
once_bytes, _ = predicted_memory(deck("zero3_once_plan", "zero3", "once"), 2)
each_bytes, _ = predicted_memory(deck("zero3_each_plan", "zero3", "every_micro_batch"), 2)
h.check(each_bytes < once_bytes, f"every micro-batch is predicted smaller ({each_bytes:.0f} < {once_bytes:.0f} B)")
between_gb = 2 * ((once_bytes + each_bytes) / 2) / 2**30  # per rank between the two; a node of 2 ranks
proc = h.mpirun_on_node(args, 2, ["run", auto], between_gb)
h.check(proc.returncode == 0, f"auto on a node of {between_gb * 2**30:.0f} B trains\n{proc.stderr[-1500:]}")
h.check(re.search(r"parallel\.grad_reduction\s*\|\s*\"every_micro_batch\"\s*\|\s*auto: a whole-model gradient would "
                  r"not fit", proc.stdout) is not None,
        "auto where only every micro-batch fits: every_micro_batch, saying why")
worst = max(abs(a - b) for a, b in zip(losses(h.metrics(os.path.join(work, "zero3_auto"))), reference))
h.check(worst <= 1e-5, f"auto's run equals one rank within 1e-5 ({worst:.2e})")
print("passed")
