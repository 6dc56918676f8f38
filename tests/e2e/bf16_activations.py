"""bf16 activations (parallel.activations = "bf16") end to end on the CPU, where the host's
reference kernels store what a GPU in bf16 stores: bf16 parameters read from the strategy's bf16
buffers, bf16 activations, fp32 gradients accumulated across micro-batches.

- 20 steps of the small GPT on one rank learn, and stay within 2e-2 of the same deck with fp32
  activations (both in bf16 precision: the activations' roundings are the only difference).
- Every strategy on 2 ranks (hsdp on 2 x 2 emulated nodes), with 2 micro-batches a step, matches
  one rank within 2e-3, as bf16 strategies do (the same roundings, another order of sums).
- Tensor parallelism over 2 ranks, with and without sequence parallelism, matches one rank within
  2e-3, and its group sends the activations in bf16: the bytes per step are the plan's, the
  activations' half of fp32's.
- A pipeline of 2 stages matches one rank within 2e-3, its stages passing bf16 rows: half the
  bytes of fp32's.
- Llama (grouped-query attention) trains and matches across strategies too.
- `check` predicts the activations the run allocates, two bytes a value, the strategy's workspace
  to the byte on 3 ranks (padded shards), and the reference kernels' own scratch the run reports.
- A run resumed from its own checkpoint ends exactly as the uninterrupted run.
- Refused, naming the key: fp32 precision, an unfused classifier; and, by `plan` for a saved GPU
  topology (the GPUs' kernels with bf16 storage run flash attention), parallel.attention =
  "exact" and heads that flash attention has no kernel for.
"""
import os
import re

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def run(ranks, label, activations="bf16", strategy="ddp", micro=0, extra=(), model=None, checkpoint=None, steps=20):
    sections = {"run": {"steps": steps, "eval_every": 10, "eval_batches": 2},
                "data": {"micro_batch": micro},
                "parallel": {"strategy": strategy, "precision": "bf16", "activations": activations, "bucket_mb": 0.02}}
    if model:
        sections["model"] = model
    if checkpoint:
        sections["checkpoint"] = checkpoint
    deck = h.small_deck(work, label, corpus, **sections)
    return h.train(args, ranks, deck, os.path.join(work, label), label, extra)


def compare(label, got, ref, rel):
    h.check(h.close(got["loss"], ref["loss"], rel), f"{label}: losses within {rel} of the reference\n"
                                                     f"{got['loss']}\n{ref['loss']}")
    h.check(h.close(got["val"], ref["val"], rel), f"{label}: validation losses within {rel}")


# One rank: it learns, and fp32 activations on the same bf16 parameters stay close.
ref = run(1, "bf16_np1")
h.check(ref["loss"][-1] < ref["loss"][0] - 0.5, f"bf16 activations learn: {ref['loss']}")
h.check("activations per rank" in ref["stdout"] and "(bf16; model.recompute = none)" in ref["stdout"],
        f"the settings table says the activations are bf16\n{ref['stdout'][:3000]}")
fp32_activations = run(1, "fp32acts_np1", activations="fp32")
compare("bf16 against fp32 activations", ref, fp32_activations, 2e-2)
h.check(ref["loss"] != fp32_activations["loss"], "bf16 activations are not fp32's under another name")

# check predicts what the run allocated: the activations row of both settings tables.
def activations_row(text):
    return next((line for line in text.splitlines() if "activations per rank" in line), "")


deck = os.path.join(work, "bf16_np1.toml")
out = h.mpirun(args, 1, ["check", deck])
h.check(out.returncode == 0 and activations_row(out.stdout).split("|")[-1].strip() ==
        activations_row(ref["stdout"]).split("|")[-1].strip() and activations_row(out.stdout) != "",
        f"check predicts the activations the run allocates\n{activations_row(out.stdout)}\n{activations_row(ref['stdout'])}")
fp32_row = activations_row(h.mpirun(args, 1, ["check", deck, "--set", 'parallel.activations="fp32"']).stdout)
h.check(fp32_row != activations_row(out.stdout), f"bf16 activations take less than fp32's\n{fp32_row}")

# check predicts the strategy's workspace to the byte (its pools: fp32 gradients, padded, and no
# fp32 copies of segments) beside the host reference's widening scratch, on 3 ranks, where the
# shards' padding shows.
def predicted_workspace(text):
    """check's workspace: the strategy's pools and the kernels' scratch, in bytes."""
    m = re.search(r"workspace ([0-9.]+) (B|KiB|MiB), ([0-9.]+) (B|KiB|MiB) of it the kernels' scratch", text)
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20}
    if not m:
        return None, None
    scratch = float(m.group(3)) * scale[m.group(4)]
    return float(m.group(1)) * scale[m.group(2)] - scratch, scratch


for strategy in ["ddp", "zero1", "zero2", "zero3"]:
    got = run(3, f"bf16_{strategy}_np3", strategy=strategy, steps=2)
    memory = [r for r in got["rows"] if r["kind"] == "memory"][-1]
    out = h.mpirun(args, 1, ["check", os.path.join(work, f"bf16_{strategy}_np3.toml"), "--ranks", "3"])
    pools, scratch = predicted_workspace(out.stdout)
    h.check(pools is not None and abs(pools - memory["workspace"]) <= 11,  # each printed to 0.01 KiB
            f"{strategy} on 3 ranks: check predicts the workspace's pools ({pools}) = measured ({memory['workspace']} B)")
    # ... and the reference kernels' widening slots, which the run reports beside them.
    h.check(scratch is not None and abs(scratch - memory.get("kernels_scratch", -1)) <= 0.005 * scratch,
            f"{strategy} on 3 ranks: check predicts the kernels' scratch ({scratch}) = the run's "
            f"({memory.get('kernels_scratch')} B)")

# Every strategy on 2 ranks, accumulating 2 micro-batches a step.
nodes = ["--set", "parallel.ranks_per_node=2"]
for strategy in ["ddp", "zero1", "zero2", "zero3"]:
    got = run(2, f"bf16_{strategy}_np2_micro3", strategy=strategy, micro=3)
    compare(f"{strategy} on 2 ranks, 2 micro-batches", got, ref, 2e-3)
got = run(4, "bf16_hsdp_nodes2x2", strategy="hsdp", extra=nodes)
compare("hsdp on 2 x 2 nodes", got, ref, 2e-3)

# Tensor parallelism: the group's sums in bf16. Per step (one micro-batch of 12 x 32 rows): the
# embedding's sum, 4 per block for 2 blocks and the head's input gradient, each an all-reduce of
# 384 rows of 32 values (a ring of 2 sends all of it once); the cross-entropy's gather of 3 fp32
# per row from each rank (half of it sent); the gradient norm's double.
def tensor_bytes(value_bytes):
    return 10 * 384 * 32 * value_bytes + 384 * 3 * 4 + 8


for label, extra, sequence_parallel in [("tensor2", [], False), ("tensor2_sp", ["--set", "parallel.sequence_parallel=true"], True)]:
    got = run(2, f"bf16_{label}", extra=["--set", "parallel.tensor=2"] + extra)
    compare(f"bf16 {label}", got, ref, 2e-3)
    if not sequence_parallel:
        sent = [r["comm_tensor_bytes"] for r in got["rows"] if r["kind"] == "train"]
        h.check(all(b == tensor_bytes(2) for b in sent),
                f"{label}: the tensor group sends {tensor_bytes(2)} bytes a step, activations in bf16 ({sent[:3]}; "
                f"fp32's would be {tensor_bytes(4)})")

# A pipeline of 2 stages (1F1B, 4 micro-batches of 3; GPT-2's tied embeddings summed between the
# end stages): the stages pass bf16 rows, the first sending each micro-batch's 3 x 32 rows of 32
# values on, 2 bytes each.
got = run(2, "bf16_pipeline2", micro=3, extra=["--set", "parallel.pipeline=2", "--set", 'parallel.pipeline_schedule="1f1b"'])
compare("bf16 pipeline of 2 stages", got, ref, 2e-3)
sent = [r["comm_pipeline_bytes"] for r in got["rows"] if r["kind"] == "train"]
h.check(all(b == 4 * 3 * 32 * 32 * 2 for b in sent),
        f"pipeline: rank 0 sends 24576 bytes a step, half of fp32's ({sent[:3]})")

# Llama with grouped-query attention, untied.
llama = {"arch": "llama", "n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "seq_len": 32,
         "tie_embeddings": False}
llama_ref = run(1, "bf16_llama_np1", model=llama)
h.check(llama_ref["loss"][-1] < llama_ref["loss"][0] - 0.5, f"Llama with bf16 activations learns: {llama_ref['loss']}")
compare("Llama zero3 on 2 ranks", run(2, "bf16_llama_zero3_np2", strategy="zero3", model=llama), llama_ref, 2e-3)

# The run's own step-10 checkpoint resumes exactly: losses and final parameters bit for bit.
whole = run(2, "bf16_resume_whole", strategy="zero1", checkpoint={"dir": f"{work}/ckpt_whole", "every": 10})
second = run(2, "bf16_resume_second", strategy="zero1",
             checkpoint={"dir": f"{work}/ckpt_second", "resume": f"{work}/ckpt_whole/ckpt_00000010.h5"})
h.check(second["loss"] == whole["loss"][10:], f"the resumed run's losses are the uninterrupted run's\n"
                                               f"{second['loss']}\n{whole['loss'][10:]}")
h.check(second["params"] == whole["params"], "the resumed run ends with the uninterrupted run's parameters, bit for bit")

# Refusals, each naming the key and what it needs.
for label, sets, words in [
        ("fp32 precision", ['parallel.precision="fp32"'], 'it needs parallel.precision = "bf16"'),
        ("unfused classifier", ['parallel.classifier="unfused"'], 'parallel.classifier = "unfused" keeps fp32 logits')]:
    argv = ["check", deck]
    for s in sets:
        argv += ["--set", s]
    out = h.mpirun(args, 1, argv)
    h.check(out.returncode != 0 and "parallel." in out.stderr and words in out.stderr,
            f"{label}: refused with the key named\n{out.stdout[-500:]}{out.stderr[-1500:]}")

# For GPUs (`plan` on a saved topology): flash attention is what bf16 storage runs there.
topo = os.path.join(args.source, "tests", "data", "topo", "01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt")
for label, sets, words in [
        ("exact attention on GPUs", ['parallel.attention="exact"'], 'which parallel.attention = "exact" turns off'),
        ("heads 48 wide on GPUs", ["model.d_model=96", "model.n_head=2"], "no kernel for heads 48 wide"),
        ("heads 32 wide on GPUs", ["model.d_model=64", "model.n_head=2"], None)]:
    argv = ["plan", deck, "--topology", topo, "--gpu-mem", "80"]
    for s in sets:
        argv += ["--set", s]
    out = h.mpirun(args, 1, argv)
    if words is None:
        h.check(out.returncode == 0 and "recommendation:" in out.stdout,
                f"{label}: planned\n{out.stdout[-800:]}{out.stderr[-800:]}")
    else:
        h.check(out.returncode == 2 and "parallel.activations" in out.stderr and words in out.stderr,
                f"{label}: refused with the keys named\n{out.stdout[-500:]}{out.stderr[-1500:]}")
print("passed")
