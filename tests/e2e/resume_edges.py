"""Resuming as a user does it: what `check` says a resume would do, a run resumed after it has
finished, a resume with more steps, and schedule settings that cannot do what they say.

1. A run of 6 steps (checkpoints at 3 and 6, timeline of steps 1-2).
2. `check` with checkpoint.resume = "latest" names the checkpoint of step 6 and says the run
   has finished; a named checkpoint that is missing, or holds another model, is an error
   naming it (exit 2).
3. `run` again: exit 0, says the run has finished, and writes nothing (train.log,
   metrics.jsonl, the traces and the checkpoints stay byte for byte and no file is added).
4. `run` with run.steps = 9: the log says the schedule differs from the checkpoint's deck,
   steps 7-9 are appended, and the resumed timeline (steps 7-8) is written beside the first
   (trace.rank0.from_step7.json), which stays as it was.
5. `run` with another data.global_batch: the log says so; the tokens seen (metrics, checkpoint)
   count each step's own batch.
6. `check` warns about optimizer.warmup_steps >= run.steps, or over half of it, and a min_lr
   that a constant schedule never uses."""
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
run_dir = os.path.join(work, "edges")
deck = h.small_deck(work, "edges", corpus, run={"steps": 6, "trace_steps": 8},
                    checkpoint={"every": 3, "keep": 3, "resume": "latest"})
proc = h.mpirun(args, 2, ["run", deck])
h.check(proc.returncode == 0, f"first run exits 0\n{proc.stderr[-800:]}")


def snapshot():
    files = {}
    for root, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, run_dir)] = f.read()
    return files


before = snapshot()
h.check("trace.rank0.json" in before and "checkpoints/ckpt_00000006.h5" in before, "the first run left its files")

# 2. What check says.
proc = h.mpirun(args, 1, ["check", deck])
h.check(proc.returncode == 0 and "ckpt_00000006.h5 at step 6" in proc.stdout and "the run has finished" in proc.stdout,
        f"check: resume names the step-6 checkpoint and says the run has finished\n{proc.stdout[-1200:]}")
missing = os.path.join(work, "nothing.h5")
proc = h.mpirun(args, 2, ["check", deck, "--set", f'checkpoint.resume="{missing}"'])
h.check(proc.returncode == 2 and missing in proc.stderr and "checkpoint.resume" in proc.stderr,
        f"check: a missing checkpoint.resume file is named (exit {proc.returncode})\n{proc.stderr[-400:]}")
ckpt3 = os.path.join(run_dir, "checkpoints", "ckpt_00000003.h5")
proc = h.mpirun(args, 2, ["check", deck, "--set", f'checkpoint.resume="{ckpt3}"', "--set", "model.n_layer=3"])
h.check(proc.returncode == 2 and "model.n_layer = 2 in the checkpoint, 3 in the deck" in proc.stderr,
        f"check: a checkpoint of another model is named with the difference\n{proc.stderr[-400:]}")
proc = h.mpirun(args, 1, ["check", deck, "--set", f'checkpoint.resume="{ckpt3}"'])
h.check(proc.returncode == 0 and "at step 3" in proc.stdout and "trains steps 4 to 6" in proc.stdout,
        "check: a named checkpoint says which steps the resume trains")

# 3. Resuming a finished run.
proc = h.mpirun(args, 2, ["run", deck])
h.check(proc.returncode == 0 and "the run has finished" in proc.stdout, f"run again: exit 0, says it has finished\n"
                                                                         f"{proc.stdout[-600:]}")
h.check(snapshot() == before, "run again: nothing in the run directory changed or was added")

# 4. More steps: the schedule change is stated, the first timeline kept.
proc = h.mpirun(args, 2, ["run", deck, "--set", "run.steps=9"])
h.check(proc.returncode == 0, f"run with run.steps = 9 exits 0\n{proc.stderr[-800:]}")
h.check("schedule differs from the checkpoint's deck (run.steps 6 -> 9)" in proc.stdout,
        f"the log states the changed schedule\n{proc.stdout[-1500:]}")
after = snapshot()
train = [r for r in h.metrics(run_dir) if r["kind"] == "train"]
h.check([r["step"] for r in train] == list(range(1, 10)), "steps 7-9 are appended to metrics.jsonl")
h.check(after["trace.rank0.json"] == before["trace.rank0.json"], "the first run's timeline is kept as it was")
h.check("trace.rank0.from_step7.json" in after and "trace.rank1.from_step7.json" in after,
        "the resumed run's timeline is written beside it, named by its first step")

# 4b. Another batch size: the change is stated, and the tokens seen count each step's own batch
# (6 of 12 x 32 tokens, then 9 of 24 x 32 with steps 10-12), in metrics and in the checkpoint.
proc = h.mpirun(args, 2, ["run", deck, "--set", "run.steps=12", "--set", "data.global_batch=24"])
h.check(proc.returncode == 0 and "the batch differs from the checkpoint's deck (data.global_batch 12 -> 24" in proc.stdout
        and "its 9 steps read 3456 tokens; each step from here reads 768" in proc.stdout,
        f"the log states the changed batch and the tokens seen\n{proc.stdout[-1500:]}")
seen = 9 * 12 * 32 + 3 * 24 * 32
train = [r for r in h.metrics(run_dir) if r["kind"] == "train"]
h.check(train[-1]["step"] == 12 and train[-1]["tokens"] == seen, f"metrics count {seen} tokens after step 12")
proc = h.mpirun(args, 1, ["ckpt", "inspect", run_dir])
h.check(f"step 12, tokens seen {seen}" in proc.stdout, f"the checkpoint keeps them\n{proc.stdout[:400]}")

# 5. Schedule warnings.
for extra, warning in ((["optimizer.warmup_steps=10"], "warning: optimizer.warmup_steps = 10 is not below run.steps = 6"),
                       (["optimizer.warmup_steps=4"], "warning: optimizer.warmup_steps = 4 is over half of run.steps = 6"),
                       (["optimizer.min_lr=1e-4", 'optimizer.schedule="constant"'],
                        'warning: optimizer.min_lr is set but optimizer.schedule = "constant" never uses it')):
    argv = ["check", deck, "--set", 'checkpoint.resume="none"']
    for e in extra:
        argv += ["--set", e]
    proc = h.mpirun(args, 1, argv)
    h.check(proc.returncode == 0 and warning in proc.stdout, f"check warns: {warning}\n{proc.stdout[-600:]}")
proc = h.mpirun(args, 1, ["check", deck, "--set", 'checkpoint.resume="none"'])
h.check("warning:" not in proc.stdout, "a sound schedule gets no warning")
print("passed")
