"""model.arch = "llama" end to end, from the command line:
- a small Llama (grouped-query attention, untied head) trains on 1 rank and on 2 with zero3: the
  same losses within 1e-5, falling;
- checkpointed on 2 ranks with zero3, it resumes on 1 rank with ddp (resharded) and on 2 with
  zero3 (bit for bit): steps 7-10 as the uninterrupted run's;
- `ckpt inspect` names the architecture; `eval` of the run directory equals the logged
  validation loss; `generate` gives the same samples on 1 rank and on 2 with zero3;
- mistakes are refused with the key named: a llama key on a GPT-2 deck, n_kv_head that does not
  divide n_head, model.init_from naming a checkpoint, an llm.c export of a llama checkpoint, a resume
  with the other architecture; rope scaling on a GPT-2 deck, its parameters without it, its blend
  bounds the wrong way round, a resume with another scaling."""
import json
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
LLAMA = {"arch": "llama", "n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "ffn_dim": 48,
         "tie_embeddings": False, "rope_theta": 500000.0}


def deck(label, **sections):
    sections.setdefault("model", {}).update(LLAMA)
    sections.setdefault("parallel", {}).setdefault("device", "cpu")
    return h.small_deck(work, label, corpus, **sections)


def worst_relative(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


# Training, and the same on two ranks with zero3.
ref_deck = deck("ref", run={"steps": 10, "eval_every": 10, "eval_batches": 2},
                checkpoint={"every": 6, "keep": 2})
ref = h.train(args, 1, ref_deck, os.path.join(work, "ref"), "llama on 1 rank")
h.check(len(ref["loss"]) == 10 and ref["loss"][-1] < ref["loss"][0] - 0.3,
        f"the loss falls over 10 steps ({ref['loss'][0]:.4f} -> {ref['loss'][-1]:.4f})")
z3_deck = deck("z3", run={"steps": 10, "eval_every": 10, "eval_batches": 2}, parallel={"strategy": "zero3"},
               checkpoint={"every": 6, "keep": 2})
z3 = h.train(args, 2, z3_deck, os.path.join(work, "z3"), "llama, zero3 on 2 ranks")
err = worst_relative(z3["loss"], ref["loss"])
h.check(err < 1e-5, f"zero3 on 2 ranks: losses equal 1 rank's within 1e-5 ({err:.2e})")

# Resume from step 6 of the zero3 run: resharded onto 1 rank with ddp, and as it was.
ckpt6 = os.path.join(work, "z3", "checkpoints", "ckpt_00000006.h5")
h.check(os.path.exists(ckpt6), "the zero3 run wrote ckpt_00000006.h5")
for ranks, strategy, tolerance in ((1, "ddp", 1e-5), (2, "zero3", 0.0)):
    label = f"resumed_{strategy}"
    resumed = h.train(args, ranks, z3_deck, os.path.join(work, label), f"resume on {ranks} rank(s) with {strategy}",
                      extra=["--set", f'checkpoint.resume="{ckpt6}"', "--set", f'parallel.strategy="{strategy}"',
                             "--set", f'run.out_dir="{os.path.join(work, label)}"', "--set",
                             f'checkpoint.dir="{os.path.join(work, label, "ckpt")}"'])
    steps = [r["step"] for r in resumed["rows"] if r["kind"] == "train"]
    err = worst_relative(resumed["loss"], z3["loss"][6:])
    h.check(steps == [7, 8, 9, 10] and err <= tolerance,
            f"resumed on {ranks} rank(s) with {strategy}: steps {steps}, losses equal the uninterrupted run's "
            f"({err:.2e}, tolerance {tolerance})")

# Inspect, eval, generate.
latest = os.path.join(work, "z3", "checkpoints", "latest")
proc = h.mpirun(args, 1, ["ckpt", "inspect", latest])
h.check(proc.returncode == 0 and "llama, n_layer 2, d_model 32, n_head 4, n_kv_head 2, ffn_dim 48, untied LM head"
        in proc.stdout, f"ckpt inspect names the architecture\n{proc.stdout[:1500]}{proc.stderr[-800:]}")
logged = [r["val_loss"] for r in z3["rows"] if r["kind"] == "val"][-1]
proc = h.mpirun(args, 1, ["eval", os.path.join(work, "z3"), "--json"])
got = json.loads(proc.stdout) if proc.returncode == 0 else {}
h.check(proc.returncode == 0 and abs(got["loss"] - logged) < 1e-6,
        f"eval of the run directory: {got.get('loss')} = logged {logged} within 1e-6\n{proc.stderr[-800:]}")
samples = []
for ranks, strategy in ((1, "ddp"), (2, "zero3")):
    proc = h.mpirun(args, ranks, ["generate", os.path.join(work, "z3"), "--prompt", "The ", "--tokens", "24",
                                  "--top-k", "20", "--seed", "3", "--set", f'parallel.strategy="{strategy}"',
                                  "--json"])
    h.check(proc.returncode == 0, f"generate on {ranks} rank(s) exits 0\n{proc.stderr[-800:]}")
    samples.append([s["tokens"] for s in json.loads(proc.stdout)["samples"]])
h.check(len(samples[0][0]) == 24 and samples[0] == samples[1],
        "generate: 24 tokens, the same on 1 rank and on 2 with zero3")

# Mistakes, refused before training with the key named.
gpt2_deck = h.small_deck(work, "gpt2", corpus)
CASES = [
    ("a llama key on a GPT-2 deck", gpt2_deck, ["--set", "model.rope_theta=500000"],
     'model.rope_theta applies to model.arch = "llama" only'),
    ("n_kv_head not dividing n_head", ref_deck, ["--set", "model.n_kv_head=3"],
     "model.n_kv_head = 3 does not divide model.n_head = 4"),
    ("an odd head width", ref_deck, ["--set", "model.d_model=36", "--set", "model.n_head=4"],
     "is odd; rotary embeddings rotate pairs of channels"),
    ("init_from of a checkpoint", ref_deck, ["--set", f'model.init_from="{ckpt6}"'],
     "bad header: neither an llm.c model file"),
    ("resuming with the other architecture", gpt2_deck, ["--set", f'checkpoint.resume="{ckpt6}"'],
     "model.arch = llama in the checkpoint, gpt2 in the deck"),
    ("rope scaling on a GPT-2 deck", gpt2_deck, ["--set", 'model.rope_scaling="llama3"'],
     'model.rope_scaling applies to model.arch = "llama" only'),
    ("a scaling factor without the scaling", ref_deck, ["--set", "model.rope_factor=4"],
     'model.rope_factor applies to model.rope_scaling = "llama3" only (this deck has "none")'),
    ("blend bounds the wrong way round", ref_deck,
     ["--set", 'model.rope_scaling="llama3"', "--set", "model.rope_high_freq_factor=0.5"],
     "model.rope_high_freq_factor = 0.5 must exceed model.rope_low_freq_factor = 1"),
    ("resuming with another rope scaling", ref_deck,
     ["--set", f'checkpoint.resume="{ckpt6}"', "--set", 'model.rope_scaling="llama3"'],
     "model.rope_scaling = none in the checkpoint, llama3 in the deck"),
]
for what, path, extra, message in CASES:
    proc = h.mpirun(args, 1, ["run", path] + extra)
    h.check(proc.returncode == 2 and message in proc.stderr,
            f"{what}: exit 2 naming it ({proc.returncode})\n{proc.stderr[-1200:]}")
out = os.path.join(work, "exported")
proc = h.mpirun(args, 1, ["ckpt", "export", ckpt6, os.path.join(out, "m.bin"), "--format", "llmc"])
h.check(proc.returncode != 0 and 'this one is model.arch = "llama" (export it with --format safetensors or hdf5)'
        in proc.stderr and not os.path.exists(os.path.join(out, "m.bin")),
        f"an llm.c export of a llama checkpoint is refused, nothing written\n{proc.stderr[-800:]}")
print("passed")
