"""Training data in several token files (shards), as llm.c's fineweb_train_*.bin.

- A glob of 3 shards trains exactly as one file holding their concatenation, in random and in
  sequential order (losses and validation losses equal), and data.val_path as the same file
  with the validation part at its end; the sequential order on 1 rank as on 2.
- A sequential run's checkpoints name the shard and offset of the next batch (mid-shard, and
  after the data wrapped around); a run resumed from one continues exactly (losses equal the
  uninterrupted run's), also with the shards moved to another directory.
- A checkpoint without a data position (as written before it was recorded) resumes in random
  order and is refused in sequential order, saying why; a random-order resume on other data
  says that the data differ.
"""
import os
import shutil
import struct
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-h5py
G, T = 12, 32  # the small deck's global batch and sequence length

# Token files of byte tokens from the corpus: shards of 1000, 1500 and 2000 tokens, a
# validation file of 500, and the concatenations.
text = open(corpus, "rb").read()
sizes = [1000, 1500, 2000]
shard_dir = os.path.join(work, "shards")
os.makedirs(shard_dir)


def write_tokens(path, data):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(data)] + [0] * 253)))
        f.write(struct.pack(f"<{len(data)}H", *data))


at = 0
shards = []
for k, n in enumerate(sizes):
    shards.append(os.path.join(shard_dir, f"train_{k:06d}.bin"))
    write_tokens(shards[-1], text[at:at + n])
    at += n
train_tokens = text[:at]
val_tokens = text[at:at + 500]
write_tokens(os.path.join(work, "val.bin"), val_tokens)
write_tokens(os.path.join(work, "all.bin"), train_tokens)
write_tokens(os.path.join(work, "all_and_val.bin"), train_tokens + val_tokens)
glob = os.path.join(shard_dir, "train_*.bin")


def run(label, ranks, data, extra_sets=(), steps=8, checkpoint=None, expect=0):
    sections = {"data": data, "run": {"steps": steps, "eval_every": 4, "eval_batches": 2}}
    if checkpoint:
        sections["checkpoint"] = checkpoint
    deck = h.small_deck(work, label, corpus, **sections)
    argv = ["run", deck]
    for s in extra_sets:
        argv += ["--set", s]
    proc = h.mpirun(args, ranks, argv, timeout=300)
    h.check(proc.returncode == expect, f"{label}: exits {expect}" +
            ("" if proc.returncode == expect else f" (got {proc.returncode})\n{proc.stderr[-1500:]}"))
    return proc


def curves(label):
    rows = h.metrics(os.path.join(work, label))
    return ({r["step"]: r["loss"] for r in rows if r["kind"] == "train"},
            {r["step"]: r["val_loss"] for r in rows if r["kind"] == "val"})


def attributes(path):
    code = ("import h5py, sys\nf = h5py.File(sys.argv[1], 'r')\n"
            "for k in ('data_order', 'data_shard', 'data_shard_offset', 'data_epoch', 'data_position'):\n"
            "    v = f.attrs[k]\n    print(k, v.decode() if isinstance(v, bytes) else v)\n")
    proc = subprocess.run([SYSTEM_PYTHON, "-c", code, path], capture_output=True, text=True)
    if proc.returncode != 0:
        h.fail(f"h5py cannot read {path}: {proc.stderr}")
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


# ---- a glob of shards is their concatenation ----
for order in ("random", "sequential"):
    proc = run(f"{order}_glob", 2, {"path": glob, "order": order})
    h.check(f"3 files {shards[0]} ... {shards[2]}: 4500 tokens" in proc.stdout,
            f"{order}: the settings table names the 3 files and their 4500 tokens")
    run(f"{order}_concat", 2, {"path": os.path.join(work, "all.bin"), "order": order})
    glob_curves, concat_curves = curves(f"{order}_glob"), curves(f"{order}_concat")
    h.check(glob_curves == concat_curves and len(glob_curves[0]) == 8 and len(glob_curves[1]) == 2,
            f"{order}: training over the glob equals training over the concatenation (losses and validation "
            "losses)" + ("" if glob_curves == concat_curves else f"\n{glob_curves}\n{concat_curves}"))
# A list of the files is the glob.
run("list", 2, {"path": shards, "order": "sequential"})
h.check(curves("list") == curves("sequential_glob"), "a list of the three files trains as their glob")
# Sequential order on 1 rank as on 2.
run("sequential_1rank", 1, {"path": glob, "order": "sequential"})
one, two = curves("sequential_1rank")[0], curves("sequential_glob")[0]
same = sorted(one) == sorted(two) and all(abs(one[s] - two[s]) <= 1e-5 * abs(two[s]) for s in two)
h.check(same, "sequential order: 1 rank trains as 2 (losses within 1e-5)" + ("" if same else f"\n{one}\n{two}"))

# ---- validation in a file of its own ----
proc = run("val_path", 2, {"path": glob, "val_path": os.path.join(work, "val.bin")})
h.check(f"train 3 files {shards[0]} ... {shards[2]}: 4500 tokens; val {os.path.join(work, 'val.bin')}: 500 tokens"
        in proc.stdout, "data.val_path: the settings table names both parts")
run("val_fraction", 2, {"path": os.path.join(work, "all_and_val.bin"), "val_fraction": 0.1})
h.check(curves("val_path") == curves("val_fraction"),
        "data.val_path trains and validates as one file with that validation part at its end")

# ---- checkpoints name the shard and offset; resume continues exactly ----
steps = 12
seq = {"path": glob, "order": "sequential"}
ckpt_dir = os.path.join(work, "seq_ckpt")
run("seq_full", 2, seq, steps=steps, checkpoint={"dir": ckpt_dir, "every": 1, "keep": 20})
full = curves("seq_full")[0]
# The training part is the first 90% (4050 tokens); a step reads G*T = 384 of them and one more
# for the last target, so 10 steps fit and the 11th starts over.
train_part = 4500 - int(4500 * 0.1)
per_epoch = (train_part - 1) // (G * T)
h.check(per_epoch == 10, "10 steps fit in one pass over the training part")
starts = [0] + [sum(sizes[:k + 1]) for k in range(len(sizes))]


def expected_position(step):
    position = (step % per_epoch) * G * T
    k = max(i for i in range(len(sizes)) if starts[i] <= position)
    return shards[k], position - starts[k], step // per_epoch


for step in (4, 11):
    a = attributes(os.path.join(ckpt_dir, f"ckpt_{step:08d}.h5"))
    shard, offset, epoch = expected_position(step)
    h.check(a["data_order"] == "sequential" and a["data_shard"] == shard and int(a["data_shard_offset"]) == offset
            and int(a["data_epoch"]) == epoch and int(a["data_position"]) == step,
            f"the step-{step} checkpoint names {os.path.basename(shard)}, token {offset}, epoch {epoch} ({a})")
inspect = h.mpirun(args, 1, ["ckpt", "inspect", os.path.join(ckpt_dir, "ckpt_00000004.h5")])
h.check(f"data: sequential order, next batch at token 536 of {shards[1]}, epoch 0" in inspect.stdout,
        "ckpt inspect shows the data position")

for step in (4, 11):
    label = f"seq_resumed_{step}"
    run(label, 2, seq, steps=steps, extra_sets=[f"checkpoint.resume={ckpt_dir}/ckpt_{step:08d}.h5",
                                                f"checkpoint.dir={work}/{label}/ckpt"])
    resumed = curves(label)[0]
    same = sorted(resumed) == list(range(step + 1, steps + 1)) and all(resumed[s] == full[s] for s in resumed)
    h.check(same, f"resumed from step {step}: the losses equal the uninterrupted run's exactly" +
            ("" if same else f"\n{resumed}\n{full}"))

# The shards moved to another directory: found by their names.
moved = os.path.join(work, "moved")
shutil.copytree(shard_dir, moved)
run("seq_moved", 2, {"path": os.path.join(moved, "train_*.bin"), "order": "sequential"}, steps=steps,
    extra_sets=[f"checkpoint.resume={ckpt_dir}/ckpt_00000004.h5", f"checkpoint.dir={work}/seq_moved/ckpt"])
h.check(curves("seq_moved")[0] == {s: full[s] for s in range(5, steps + 1)},
        "resumed with the shards in another directory: the same losses")
# Data that lack the checkpoint's shard are refused.
proc = run("seq_other_data", 2, {"path": os.path.join(work, "all.bin"), "order": "sequential"}, steps=steps,
           extra_sets=[f"checkpoint.resume={ckpt_dir}/ckpt_00000004.h5", f"checkpoint.dir={work}/other/ckpt"],
           expect=2)
h.check(f"the next batch starts at token 536 of '{shards[1]}', a file data.path does not name" in proc.stderr,
        "a checkpoint whose shard the data lack is refused, naming the shard")

# ---- checkpoints without a data position ----
old = os.path.join(work, "old.h5")
shutil.copy(os.path.join(ckpt_dir, "ckpt_00000004.h5"), old)
code = ("import h5py, sys\nf = h5py.File(sys.argv[1], 'r+')\n"
        "for k in ('data_order', 'data_shard', 'data_shard_offset', 'data_epoch'):\n    del f.attrs[k]\n")
subprocess.run([SYSTEM_PYTHON, "-c", code, old], check=True)
proc = run("old_sequential", 2, seq, steps=steps, extra_sets=[f"checkpoint.resume={old}"], expect=2)
h.check("this one was written before checkpoints recorded them; resume it with data.order = \"random\"" in proc.stderr,
        "sequential order refuses a checkpoint without a data position, saying why")
run("old_random", 2, {"path": glob}, steps=steps, extra_sets=[f"checkpoint.resume={old}"])
h.check(sorted(curves("old_random")[0]) == list(range(5, steps + 1)), "random order resumes it from its batch count")

# A random-order checkpoint resumed on other data: said.
run("random_ckpt", 2, {"path": glob}, checkpoint={"dir": f"{work}/random_ckpt/ckpt", "every": 4})
proc = run("random_other", 2, {"path": glob, "val_fraction": 0.2},
           extra_sets=[f"checkpoint.resume={work}/random_ckpt/ckpt/ckpt_00000004.h5"])
h.check("the training data differ from the checkpoint's" in proc.stdout,
        "resuming a random-order checkpoint on other data says that the data differ")
proc = run("random_same", 2, {"path": glob}, extra_sets=[f"checkpoint.resume={work}/random_ckpt/ckpt/ckpt_00000004.h5"])
h.check("differ" not in proc.stdout and curves("random_same")[0] == {s: curves("random_ckpt")[0][s] for s in range(5, 9)},
        "resuming it on its own data: no note, the same losses")
print("passed")
