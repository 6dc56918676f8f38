"""Using a trained model: `shardtrain eval` and `shardtrain generate` on its checkpoints.

A small GPT trains 20 steps on 2 ranks, validating and writing a checkpoint every 10 steps.
- eval of each checkpoint (given as the file, or as the run directory for `latest`) equals the
  validation loss the run logged for it within 1e-6 relative, on 1, 2 and 4 ranks with every
  strategy; perplexity is exp(loss); another --batches count gives another value. --data
  evaluates every token of a file once, in order (a last window shorter than the rest), to the
  same loss on 1 to 4 ranks with any strategy; --batches with it is refused.
- generate with a fixed seed prints the same samples on 1, 2 and 4 ranks with every strategy;
  another seed gives other text; --top-k 1 is greedy (the same tokens whatever the seed).
- GPT-2 weights exported from the checkpoint (llm.c file, model.safetensors directory) generate
  the same samples and evaluate (--data) to the same loss as the checkpoint itself; eval of
  weights without --data is refused.
- Bad paths and prompts get a message naming them and exit code 2."""
import json
import math
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
run_dir = os.path.join(work, "trained")
# Trained on emulated nodes of 2 ranks: a job of 1 rank cannot group its ranks so, and uses its
# real nodes with a note.
deck = h.small_deck(work, "trained", corpus, run={"steps": 20, "eval_every": 10, "eval_batches": 2},
                    checkpoint={"every": 10, "keep": 3}, parallel={"ranks_per_node": 2})
proc = h.mpirun(args, 2, ["run", deck])
h.check(proc.returncode == 0, f"training exits 0\n{proc.stderr[-800:]}")
logged = {r["step"]: r["val_loss"] for r in h.metrics(run_dir) if r["kind"] == "val"}
h.check(sorted(logged) == [10, 20], f"the run validated at steps 10 and 20 ({logged})")
ckpt10 = os.path.join(run_dir, "checkpoints", "ckpt_00000010.h5")

CASES = [(1, "ddp", []), (2, "zero1", []), (2, "zero2", []), (4, "zero3", []), (4, "ddp", []),
         (4, "hsdp", ["--set", "parallel.ranks_per_node=2"])]


def json_out(ranks, argv):
    proc = h.mpirun(args, ranks, argv + ["--json"])
    h.check(proc.returncode == 0, f"{' '.join(argv)} on {ranks} rank(s) exits 0\n{proc.stderr[-800:]}")
    return json.loads(proc.stdout)


for ranks, strategy, extra in CASES:
    label = f"{strategy} on {ranks} rank(s)"
    for path, step in ((ckpt10, 10), (run_dir, 20)):
        got = json_out(ranks, ["eval", path, "--set", f'parallel.strategy="{strategy}"'] + extra)
        # Forward passes only: the parameters as the strategy shards them, nothing else.
        state, n = got["model_state_bytes_per_rank"], got["parameters"]
        shards = {"ddp": 1, "zero1": 1, "zero2": 1, "zero3": ranks, "hsdp": 2}[strategy]
        h.check(state["grads"] == 0 and state["optimizer"] == 0 and
                4 * n / shards <= state["params"] <= 4 * n / shards * 1.05,
                f"eval, {label}: holds {state} for {n} parameters in {shards} shard(s)")
        h.check(got["step"] == step and abs(got["loss"] - logged[step]) <= 1e-6 * logged[step],
                f"eval, {label}: step {step} loss {got['loss']!r} = logged {logged[step]!r} within 1e-6")
        h.check(abs(got["perplexity"] - math.exp(got["loss"])) <= 1e-9 * got["perplexity"],
                f"eval, {label}: perplexity is exp(loss)")

# --data: every token of a file once, in order, in windows of seq_len (32) and a last shorter
# one; the same loss on any number of ranks and with any strategy.
got = json_out(1, ["eval", run_dir])
first, last = [int(x) for x in got["data"].split("tokens ")[1].rstrip(")").split(" to ")]
with open(corpus, "rb") as f:
    text = f.read()[first:first + 3000]
val_file = os.path.join(work, "val.txt")
with open(val_file, "wb") as f:
    f.write(text)
whole = json_out(1, ["eval", run_dir, "--data", val_file])
h.check(whole["tokens"] == len(text) - 1 and whole["windows"] == (len(text) - 1) // 32 and
        whole["last_window"] == (len(text) - 1) % 32 and whole["data"] == val_file,
        f"eval --data predicts each of the file's {len(text) - 1} tokens after the first once: {whole}")
for ranks, strategy in ((2, "zero1"), (3, "zero3"), (4, "ddp")):
    again = json_out(ranks, ["eval", run_dir, "--data", val_file, "--set", f'parallel.strategy="{strategy}"'])
    h.check(abs(again["loss"] - whole["loss"]) <= 1e-9 * whole["loss"],
            f"eval --data, {strategy} on {ranks} rank(s): {again['loss']!r} = one rank's {whole['loss']!r}")
proc = h.mpirun(args, 1, ["eval", run_dir, "--data", val_file, "--batches", "2"])
h.check(proc.returncode == 2 and "--batches applies to the validation split" in proc.stderr,
        f"--batches with --data is refused ({proc.returncode}: {proc.stderr[-300:]})")
other = json_out(1, ["eval", run_dir, "--batches", "1"])
h.check(other["batches"] == 1 and other["loss"] != logged[20], "eval --batches 1 evaluates other batches")

# generate: the same samples everywhere for one seed.
reference = None
for ranks, strategy, extra in CASES:
    got = json_out(ranks, ["generate", run_dir, "--prompt", "The ", "--tokens", "30", "--samples", "2",
                           "--top-k", "20", "--seed", "7", "--set", f'parallel.strategy="{strategy}"'] + extra)
    samples = [(s["seed"], s["tokens"], s["text"]) for s in got["samples"]]
    h.check(len(samples) == 2 and all(len(s[1]) == 30 for s in samples), f"generate, {strategy} on {ranks}: "
                                                                          f"2 samples of 30 tokens")
    h.check(all(s[2].startswith("The ") for s in samples), "each sample starts with its prompt")
    if reference is None:
        reference = samples
    h.check(samples == reference, f"generate, {strategy} on {ranks} rank(s): the same samples as ddp on 1")
h.check(reference[0][1] != reference[1][1], "samples 1 and 2 (seeds 7 and 8) differ")
greedy = [json_out(1, ["generate", run_dir, "--tokens", "20", "--top-k", "1", "--seed", str(s)])["samples"][0]["tokens"]
          for s in (1, 2)]
h.check(greedy[0] == greedy[1], "--top-k 1 is greedy: the same tokens for seeds 1 and 2")
proc = h.mpirun(args, 1, ["generate", run_dir, "--tokens", "5"])
h.check(proc.returncode == 0 and "parallel.ranks_per_node = 2" in proc.stderr and "real nodes" in proc.stderr,
        f"generate on 1 rank of a model trained on emulated nodes of 2: a note, exit 0 ({proc.returncode}: "
        f"{proc.stderr[-300:]})")
proc = h.mpirun(args, 1, ["generate", run_dir, "--tokens", "5", "--set", "parallel.ranks_per_node=2"])
h.check(proc.returncode == 2 and "parallel.ranks_per_node = 2 does not divide the 1 ranks" in proc.stderr,
        f"--set parallel.ranks_per_node=2 on 1 rank is refused ({proc.returncode}: {proc.stderr[-300:]})")

# GPT-2 weights exported from the checkpoint: the same model, so the same samples and loss.
# The weights carry no deck: the byte tokenizer is the default, as in this deck.
from_checkpoint = json_out(1, ["generate", run_dir, "--prompt", "The ", "--tokens", "30", "--top-k", "20", "--seed", "7"])
ckpt_loss = json_out(1, ["eval", run_dir, "--data", val_file])["loss"]
latest = os.path.join(run_dir, "checkpoints", open(os.path.join(run_dir, "checkpoints", "latest")).read().strip())
os.makedirs(os.path.join(work, "exported_hf"))
for fmt, out, given in (("llmc", os.path.join(work, "exported.bin"), os.path.join(work, "exported.bin")),
                        ("safetensors", os.path.join(work, "exported_hf", "model.safetensors"),
                         os.path.join(work, "exported_hf"))):
    proc = h.mpirun(args, 1, ["ckpt", "export", "--format", fmt, latest, out])
    h.check(proc.returncode == 0, f"ckpt export --format {fmt}\n{proc.stderr[-500:]}")
    out = given  # generate and eval take the safetensors' directory
    for ranks, strategy in ((1, "ddp"), (2, "zero3")):
        got = json_out(ranks, ["generate", out, "--prompt", "The ", "--tokens", "30", "--top-k", "20", "--seed", "7",
                               "--set", f'parallel.strategy="{strategy}"'])
        h.check(got["weights"] == out and got["step"] is None, f"generate {fmt} weights names them ({got['weights']})")
        h.check(got["samples"][0]["tokens"] == from_checkpoint["samples"][0]["tokens"],
                f"generate from {fmt} weights, {strategy} on {ranks}: the checkpoint's sample")
    loss = json_out(2, ["eval", out, "--data", val_file])["loss"]
    h.check(abs(loss - ckpt_loss) <= 1e-6 * ckpt_loss, f"eval of {fmt} weights {loss!r} = the checkpoint's {ckpt_loss!r}")
    proc = h.mpirun(args, 1, ["eval", out])
    h.check(proc.returncode == 2 and "give --data FILE" in proc.stderr, f"eval of {fmt} weights without --data: "
                                                                       f"exit 2 ({proc.returncode}: {proc.stderr[-300:]})")

# Bad input.
empty_dir = os.path.join(work, "empty")
os.makedirs(empty_dir)
for argv, words in ((["generate", os.path.join(work, "missing.h5")], ["missing.h5", "no such file"]),
                    (["eval", empty_dir], [empty_dir, "a directory without checkpoints"]),
                    (["generate", corpus], [corpus, "not an HDF5 checkpoint, nor weights"]),
                    (["generate", run_dir, "--prompt-tokens", "1 x 3"], ["'x' is not a token id"]),
                    (["generate", run_dir, "--prompt-tokens", "300"], ["'300' is not a token id (0 to 255)"]),
                    (["generate", val_file], [val_file])):
    proc = h.mpirun(args, 2, argv)
    h.check(proc.returncode == 2 and all(w in proc.stderr for w in words) and "Traceback" not in proc.stderr,
            f"{' '.join(argv[:2])}: exit 2 naming {words} (exit {proc.returncode}: {proc.stderr[-300:]})")
print("passed")
