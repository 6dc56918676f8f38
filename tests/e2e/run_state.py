"""A run never loses or mislabels its state in everyday mistakes.

- A deck whose model changed, with resume = "latest" on a directory of another model's
  checkpoints: the run refuses before training, names the directory, every skipped checkpoint and
  the settings that would fit; every checkpoint and `latest` stay byte for byte, and `check`
  refuses the same way.
- resume = "none" into that directory on purpose: the new run's checkpoint never replaces the
  other run's file of the same name (that one is moved aside, byte for byte), retention deletes
  only the new run's own checkpoints, `latest` names a file that exists, and the earlier run's
  train.log and metrics.jsonl are kept (rotated) and the log says so.
- The checkpoint stores the resolved settings (deck plus --set): eval of a run directory trained
  with --set data.val_fraction equals its logged validation loss; ckpt inspect shows the run's
  real steps; a --set model.n_layer run is evaluated without repeating the option.
- ckpt export never replaces a checkpoint (not even with --force), refuses an existing output
  without --force, creates a missing output directory.
- With a damaged newest checkpoint, `check` and `run` name the same checkpoint to resume, and
  `ckpt inspect` of the damaged file names the dataset, chunk and offset.
- Small things: a CLI range error is one readable line; a key under another common name gets the
  deck's name; an out_dir that cannot be made is named as run.out_dir and `check` fails;
  `plan` on one rank does not compare to ddp's 0 bytes; `doctor` without a launcher says so.
"""
import hashlib
import os
import re
import shutil
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def deck(label, **sections):
    base = {"checkpoint": {"dir": f"{work}/{label}/ckpt", "every": 4, "keep": 3, "resume": "latest"},
            "run": {"steps": 12}}
    for name, keys in sections.items():
        base.setdefault(name, {}).update(keys)
    return h.small_deck(work, label, corpus, **base)


def shardtrain(ranks, argv, expect=0, label=""):
    proc = h.mpirun(args, ranks, argv)
    h.check(proc.returncode == expect, f"{label or argv[0]}: exits {expect} (got {proc.returncode})\n"
                                       f"{proc.stdout[-800:]}\n{proc.stderr[-1500:]}")
    return proc


def digests(directory):
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def val_losses(run_dir):
    return [r["val_loss"] for r in h.metrics(run_dir) if r["kind"] == "val"]


# ---- 1. a changed model against another model's checkpoints refuses and loses nothing ----
base = deck("base")
shardtrain(2, ["run", base], label="the 2-layer run")
ckpt_dir = os.path.join(work, "base", "ckpt")
h.check(sorted(os.listdir(ckpt_dir)) == ["ckpt_00000004.h5", "ckpt_00000008.h5", "ckpt_00000012.h5", "latest"],
        f"the first run leaves checkpoints 4, 8, 12 and latest ({sorted(os.listdir(ckpt_dir))})")
before = digests(ckpt_dir)
log_before = open(os.path.join(work, "base", "train.log")).read()

proc = shardtrain(2, ["run", base, "--set", "model.n_layer=3"], expect=2, label="the 3-layer resume")
err = proc.stderr
h.check(ckpt_dir in err and "none of the 3 checkpoint(s)" in err and "nothing was trained or written" in err,
        f"the refusal names the directory and says nothing was done\n{err[-1500:]}")
h.check(all(f"ckpt_{s:08d}.h5" in err for s in (4, 8, 12)) and "model.n_layer = 2 in the checkpoint, 3 in the deck" in err,
        "it names every skipped checkpoint and the first mismatch")
h.check("--set model.n_layer=2" in err and 'checkpoint.resume = "none"' in err and "checkpoint.dir" in err,
        "it says what to do: the checkpoints' model, another directory, or resume = none")
h.check("step 1 " not in proc.stdout and digests(ckpt_dir) == before, "no step ran; every checkpoint and latest "
                                                                       "are byte for byte as they were")
h.check(open(os.path.join(work, "base", "train.log")).read() == log_before, "and the run's train.log is untouched")

proc = shardtrain(1, ["check", base, "--set", "model.n_layer=3"], expect=2, label="check of the 3-layer resume")
h.check("none of the 3 checkpoint(s)" in proc.stderr and ckpt_dir in proc.stderr,
        f"check refuses the same way\n{proc.stderr[-800:]}")

# ---- resume = "none" on purpose into that directory: another run, nothing of the first lost ----
proc = shardtrain(2, ["run", base, "--set", "model.n_layer=3", "--set", "checkpoint.resume=none",
                      "--set", "run.steps=8"], label="the 3-layer run from step 0")
names = sorted(os.listdir(ckpt_dir))
aside = [n for n in names if n.startswith("ckpt_00000004.run-")]
h.check(len(aside) == 1 and "ckpt_00000012.h5" in names and "ckpt_00000008.h5" in names,
        f"the first run's ckpt_00000004.h5 was moved aside, not replaced ({names})")
h.check(digests(ckpt_dir)[aside[0]] == before["ckpt_00000004.h5"], "byte for byte")
h.check("was in the way" in proc.stdout and aside[0] in proc.stdout, f"and the log says so\n{proc.stdout[-1500:]}")
h.check("left alone" in proc.stdout and "ckpt_00000012.h5" in proc.stdout, "retention reports the other run's files "
                                                                          "it left alone")
with open(os.path.join(ckpt_dir, "latest")) as f:
    latest = f.read().strip()
h.check(latest == "ckpt_00000008.h5" and os.path.exists(os.path.join(ckpt_dir, latest)), "latest names the new "
                                                                                         "run's last checkpoint")
inspect = shardtrain(1, ["ckpt", "inspect", os.path.join(ckpt_dir, "latest")], label="inspect latest")
h.check("n_layer = 3" in inspect.stdout or "3 layers" in inspect.stdout or "n_layer 3" in inspect.stdout,
        f"which holds the 3-layer model\n{inspect.stdout[:1200]}")
rotated = os.path.join(work, "base", "train.1.log")
h.check(os.path.exists(rotated) and open(rotated).read() == log_before
        and os.path.exists(os.path.join(work, "base", "metrics.1.jsonl")),
        "the first run's train.log and metrics.jsonl are kept as train.1.log and metrics.1.jsonl")
h.check("train.1.log" in proc.stdout, "and the log says where")
# Evaluating the directory takes the checkpoint latest names, with its own model.
proc = shardtrain(1, ["eval", os.path.join(work, "base")], label="eval of the run directory")
h.check("ckpt_00000008.h5" in proc.stdout, f"eval reads the checkpoint latest names\n{proc.stdout[-600:]}")

# ---- 2. the checkpoint holds the run's resolved settings ----
split = deck("split", run={"steps": 8, "eval_every": 8}, checkpoint={"every": 8})
shardtrain(2, ["run", split, "--set", "data.val_fraction=0.2", "--set", "model.n_layer=3"], label="the --set run")
logged = val_losses(os.path.join(work, "split"))[-1]
proc = shardtrain(2, ["eval", os.path.join(work, "split")], label="eval of the --set run")
m = re.search(r"loss ([0-9.]+)", proc.stdout)
h.check(m is not None and abs(float(m.group(1)) - logged) <= 1e-6 * logged,
        f"eval of the run directory equals the logged val loss {logged} without repeating --set\n{proc.stdout[-600:]}")
proc = shardtrain(1, ["ckpt", "inspect", os.path.join(work, "split", "ckpt", "ckpt_00000008.h5")], label="inspect")
h.check("steps = 8" in proc.stdout and "val_fraction = 0.2" in proc.stdout and "n_layer = 3" in proc.stdout,
        f"ckpt inspect shows the run's settings, --set included\n{proc.stdout[:2000]}")

# ---- 3. exports never replace a checkpoint and never overwrite silently ----
source = os.path.join(ckpt_dir, "ckpt_00000012.h5")
target = os.path.join(ckpt_dir, "ckpt_00000008.h5")
kept = digests(ckpt_dir)
for extra in ([], ["--force"]):
    proc = shardtrain(1, ["ckpt", "export"] + extra + [source, target], expect=2, label=f"export onto a checkpoint {extra}")
    h.check(target in proc.stderr and digests(ckpt_dir) == kept,
            f"export onto a checkpoint {extra} refuses and leaves it byte for byte\n{proc.stderr[-600:]}")
out = os.path.join(work, "exports", "new", "model.safetensors")
shardtrain(1, ["ckpt", "export", "--format", "safetensors", source, out], label="export into a missing directory")
h.check(os.path.getsize(out) > 0, "export creates a missing output directory")
first = open(out, "rb").read()
proc = shardtrain(1, ["ckpt", "export", "--format", "safetensors", target, out], expect=2, label="export onto an output")
h.check("--force" in proc.stderr and open(out, "rb").read() == first, "an existing output needs --force")
shardtrain(1, ["ckpt", "export", "--force", "--format", "safetensors", target, out], label="export --force")
h.check(open(out, "rb").read() != first, "--force replaces it")

# ---- 4. check and run agree with a damaged newest checkpoint; inspect names the damage ----
damaged_dir = os.path.join(work, "damaged")
shutil.copytree(os.path.join(work, "split", "ckpt"), damaged_dir)
shutil.copy(os.path.join(work, "split", "ckpt", "ckpt_00000008.h5"), os.path.join(damaged_dir, "ckpt_00000004.h5"))
h.flip_checkpoint_byte(os.path.join(damaged_dir, "ckpt_00000008.h5"), "adam_m")
sets = ["--set", f"checkpoint.dir={damaged_dir}", "--set", "run.steps=12", "--set", "data.val_fraction=0.2",
        "--set", "model.n_layer=3", "--set", "run.eval_every=0"]
proc = shardtrain(1, ["ckpt", "inspect", os.path.join(damaged_dir, "ckpt_00000008.h5")], expect=2, label="inspect damaged")
h.check(all(w in proc.stderr for w in ("adam_m", "chunk", "offset", "Fletcher32 checksum mismatch")),
        f"inspect of the damaged file names the dataset, chunk and offset\n{proc.stderr[-800:]}")
checked = shardtrain(1, ["check", split] + sets, label="check with a damaged newest")
ran = shardtrain(2, ["run", split] + sets, label="run with a damaged newest")
older = os.path.join(damaged_dir, "ckpt_00000004.h5")
h.check(older in checked.stdout and "ckpt_00000008.h5" in checked.stdout,
        f"check names the checkpoint it would resume and the one it skips\n{checked.stdout[-1500:]}")
h.check(f"resumed from {older}" in ran.stdout, f"run resumes from that same checkpoint\n{ran.stdout[-1500:]}")

# ---- 6. small things ----
proc = subprocess.run([args.exe, "generate", os.path.join(work, "split"), "--tokens", "-5"], capture_output=True,
                      text=True, timeout=120)
lines = [line for line in proc.stderr.splitlines() if line.strip()]
h.check(proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("shardtrain: error:")
        and "--tokens" in lines[0] and "-5" in lines[0] and len(lines[0]) < 200,
        f"a CLI range error is one readable line ({lines})")
proc = h.mpirun(args, 1, ["check", base, "--set", "optimizer.learning_rate=0.001"])
h.check(proc.returncode == 2 and "optimizer.lr" in proc.stderr, f"learning_rate suggests optimizer.lr\n{proc.stderr}")
blocker = os.path.join(work, "a_file")
open(blocker, "w").close()
for command in ("check", "run"):
    proc = h.mpirun(args, 1, [command, base, "--set", f"run.out_dir={blocker}/run", "--set",
                              f"checkpoint.dir={work}/elsewhere"])
    h.check(proc.returncode == 2 and "run.out_dir" in proc.stderr and f"{blocker}/run" in proc.stderr,
            f"{command}: an out_dir that cannot be made is named as run.out_dir\n{proc.stdout[-400:]}{proc.stderr}")
proc = shardtrain(1, ["plan", base, "--ranks", "1"], label="plan on one rank")
h.check("1.5x as much" not in proc.stdout and "docs/topology.md" not in proc.stdout, f"plan on one rank\n{proc.stdout}")
proc = subprocess.run([args.exe, "doctor"], capture_output=True, text=True, timeout=120)
h.check("launcher: none" in proc.stdout, f"doctor started alone says there is no launcher\n{proc.stdout}")
print("passed")
