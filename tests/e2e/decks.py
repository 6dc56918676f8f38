"""The decks shipped in inputs/: each passes `shardtrain check` on the rank count its header's
command names, and the tensor-parallel deck trains the default deck's model: its first 30 steps'
losses and gradient norms equal the default deck's on the same two ranks within 1e-5, and its
step lines and metrics count the tensor group's bytes per step as `check` predicts them, and its
time as exposed communication."""
import glob
import os
import re
import subprocess

import harness as h

args = h.parse_args()
h.corpus(args)
work = h.tmpdir()


def header_ranks(path):
    """The ranks of the command in the deck's header comment (`-n N` or `--ranks N`), 1 if none."""
    for line in open(path):
        if not line.startswith("#"):
            break
        m = re.search(r"(?:-n|--ranks) (\d+)", line)
        if m:
            return int(m.group(1))
    return 1


decks = sorted(glob.glob(os.path.join(args.source, "inputs", "*.toml")))
h.check(len(decks) >= 4, f"inputs/ holds the shipped decks ({len(decks)})")
for deck in decks:
    name = os.path.relpath(deck, args.source)
    ranks = header_ranks(deck)
    p = subprocess.run([args.exe, "check", name, "--ranks", str(ranks)], capture_output=True, text=True, timeout=120,
                       cwd=args.source)
    h.check(p.returncode == 0 and "deck OK" in p.stdout,
            f"{name} checks out on {ranks} rank(s)\n{p.stdout[-600:]}\n{p.stderr[-600:]}")

STEPS = ["--set", "run.steps=30", "--set", "run.eval_every=0", "--set", "run.sample_tokens=0"]


def first_steps(deck, label):
    run_dir = os.path.join(work, label)
    proc = h.mpirun(args, 2, ["run", os.path.join("inputs", deck), "--set", f'run.out_dir="{run_dir}"',
                              "--save-params", run_dir + ".f32"] + STEPS, cwd=args.source)
    return h.train_result(proc, run_dir, run_dir + ".f32", label)


whole = first_steps("default.toml", "default")
split = first_steps("tensor_parallel.toml", "tensor_parallel")


def close(a, b, rel):
    return len(a) == len(b) == 30 and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


h.check(close(split["loss"], whole["loss"], 1e-5),
        f"tensor_parallel.toml's first 30 losses equal default.toml's within 1e-5\n{split['loss']}\n{whole['loss']}")
h.check(close(split["norm"], whole["norm"], 1e-5), "and its gradient norms")
# The tensor group's bytes: the step lines and metrics.jsonl give them, as check predicts them.
p = subprocess.run([args.exe, "check", "inputs/tensor_parallel.toml", "--ranks", "2"], capture_output=True, text=True,
                   timeout=120, cwd=args.source)
m = re.search(r"comm per step per rank +\| 0 B, ([\d.]+) MiB within the tensor group", p.stdout)
h.check(m is not None, f"check predicts the tensor group's bytes per step (and none for ddp on one data rank)\n{p.stdout[-800:]}")
predicted = float(m.group(1)) * 2**20
steps = [r for r in split["rows"] if r["kind"] == "train"]
h.check(all(abs(r["comm_tensor_bytes"] - predicted) <= 0.006 * 2**20 for r in steps),
        f"every step's comm_tensor_bytes ({steps[0]['comm_tensor_bytes']}) is check's {m.group(1)} MiB")
h.check(all(r["comm_bytes"] == r["comm_tensor_bytes"] for r in steps),
        "one data-parallel rank: the tensor group sends every byte")
h.check(all(r["exposed_comm_ms"] > 0 for r in steps),
        "the tensor group's collectives, which block the step, count as exposed communication (one data-parallel "
        "rank: the strategy waits for nothing)")
h.check(all(r["comm_tensor_bytes"] == 0 for r in whole["rows"] if r["kind"] == "train"),
        "the default deck has no tensor group")
h.check(re.search(r"\| comm [\d.]+ MiB \(tensor [\d.]+ MiB\), [\d.]+ ms exposed \|", split["stdout"]) is not None,
        "the tensor-parallel run's step lines show the group's share")
h.check(re.search(r"\| comm [\d.]+ MiB, [\d.]+ ms exposed \|", whole["stdout"]) is not None,
        "the default deck's step lines give the bytes sent alone (one node, no tensor group)")
print("passed")
