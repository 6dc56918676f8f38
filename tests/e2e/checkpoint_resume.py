"""HDF5 checkpoints end to end.

- Bitwise resume: for every strategy, a run resumed from its own step-4 checkpoint ends with
  exactly the parameters (byte for byte) and losses of the uninterrupted 8-step run.
- Resharding: checkpoints written by one world size / strategy resume on another (4->2,
  2->3, 3->1, zero3->ddp, ddp->zero3, hsdp->zero1) within 1e-5 of the uninterrupted run.
- Bad files: truncated, a flipped byte in the data, a missing dataset, another model's shape,
  a newer format version: a clear error naming the file and the problem; with
  resume = "latest" the run falls back to the newest valid checkpoint and says so, and a
  checkpoint found bad after part of it was read leaves no trace in the run that resumes from
  the older one.
- A checkpoint with a dataset rewritten by h5repack (other filters) resumes through HDF5's own reading.
- keep = 2 leaves the newest two; every write's phases are logged, named, and add up to it.
- ckpt inspect verifies every checksum; ckpt export writes tensors h5py reads in their shapes.
"""
import array
import os
import shutil
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-h5py


def run(label, ranks, sets=(), expect=0):
    deck = h.small_deck(work, label, corpus, checkpoint={"dir": f"{work}/{label}/ckpt", "every": 4})
    params = os.path.join(work, f"{label}.f32")
    argv = ["run", deck, "--save-params", params]
    for s in sets:
        argv += ["--set", s]
    proc = h.mpirun(args, ranks, argv, timeout=300)
    h.check(proc.returncode == expect, f"{label}: exits {expect} (got {proc.returncode})\n{proc.stderr[-1500:]}")
    return proc, params


def losses(run_dir):
    return {r["step"]: r["loss"] for r in h.metrics(run_dir) if r["kind"] == "train"}


def read_params(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def worst_relative(a, b):
    scale = max(abs(x) for x in b)
    return max(abs(x - y) for x, y in zip(a, b)) / scale


def ckpt(run_label, step):
    return os.path.join(work, run_label, "ckpt", f"ckpt_{step:08d}.h5")


def h5py(code):
    proc = subprocess.run([SYSTEM_PYTHON, "-c", "import h5py, sys\n" + code], capture_output=True, text=True)
    if proc.returncode != 0:
        h.fail(f"h5py helper failed: {proc.stderr}")
    return proc.stdout


# ---- bitwise resume, every strategy ----
for strategy, ranks, extra in (("ddp", 2, []), ("zero1", 2, []), ("zero2", 3, []), ("zero3", 2, []),
                               ("hsdp", 4, ["parallel.ranks_per_node=2"]), ("zero3", 2, ["parallel.precision=bf16"]),
                               ("zero1", 3, ["checkpoint.async=true"])):
    sets = [f"parallel.strategy={strategy}"] + extra
    name = strategy + ("_bf16" if extra and "bf16" in extra[0] else "") + ("_async" if extra and "async" in extra[0] else "")
    _, full_params = run(f"{name}_full", ranks, sets)
    _, resumed_params = run(f"{name}_resumed", ranks, sets + [f"checkpoint.resume={ckpt(f'{name}_full', 4)}",
                                                              f"checkpoint.dir={work}/{name}_resumed/ckpt"])
    full, resumed = losses(os.path.join(work, f"{name}_full")), losses(os.path.join(work, f"{name}_resumed"))
    h.check(sorted(resumed) == [5, 6, 7, 8], f"{name}: the resumed run continues at step 5")
    h.check(all(resumed[s] == full[s] for s in resumed), f"{name}: resumed losses equal the uninterrupted run's exactly")
    with open(full_params, "rb") as a, open(resumed_params, "rb") as b:
        h.check(a.read() == b.read(), f"{name}: final parameters equal bit for bit after resume")

# An asynchronous checkpoint's copy of the state is counted in the memory lines: on one rank,
# which writes everything, 12 bytes (parameters, m, v in fp32) per parameter; none when sync.
for label, asynchronous in (("copy_async", True), ("copy_sync", False)):
    run(label, 1, ["parallel.strategy=ddp", f"checkpoint.async={'true' if asynchronous else 'false'}"])
    rows = h.metrics(os.path.join(work, label))
    psi = next(r for r in rows if r["kind"] == "run")["parameters"]
    last = [r for r in rows if r["kind"] == "memory"][-1]
    expected = 12 * psi if asynchronous else 0
    h.check(last["checkpoint_copy"] == expected and last["total"] == last["params"] + last["grads"] + last["optimizer"]
            + last["workspace"] + last["activations"] + expected,
            f"{label}: the memory line counts the checkpoint copy ({last['checkpoint_copy']} B, expected {expected})")

# ---- keep, and where each write's time went ----
# A checkpoint every step, keep = 2: after the run only the newest two are left (old ones are
# deleted in the background, done before the next write and at the end), nothing half-written.
# Every write's phases are in metrics.jsonl, each named, and they add up to the write's time;
# SHARDTRAIN_CKPT_TIMING=1 prints them.
PHASE_NAMES = ["layout", "checksums", "open", "write", "file_sync", "close", "fsync", "rename", "latest", "keep",
               "commit_agree"]
for label, asynchronous in (("keep_sync", False), ("keep_async", True)):
    keep_dir = f"{work}/{label}/ckpt"
    deck = h.small_deck(work, label, corpus, checkpoint={"dir": keep_dir, "every": 1, "keep": 2,
                                                          "async": asynchronous})
    os.environ["SHARDTRAIN_CKPT_TIMING"] = "1"
    proc = h.mpirun(args, 2, ["run", deck, "--set", "parallel.strategy=zero3"])
    del os.environ["SHARDTRAIN_CKPT_TIMING"]
    h.check(proc.returncode == 0, f"{label}: exits 0\n{proc.stderr[-1500:]}")
    h.check(sorted(os.listdir(keep_dir)) == ["ckpt_00000007.h5", "ckpt_00000008.h5", "latest"],
            f"{label}: keep = 2 leaves the newest two and latest ({sorted(os.listdir(keep_dir))})")
    rows = [r for r in h.metrics(os.path.join(work, label)) if r["kind"] == "checkpoint"]
    h.check([r["step"] for r in rows] == list(range(1, 9)), f"{label}: one checkpoint row per step")
    for r in rows:
        names, total = list(r["phases"]), sum(r["phases"].values())
        h.check(names == PHASE_NAMES and all(v >= 0 for v in r["phases"].values()),
                f"{label}: step {r['step']}: the phases, in order ({names})")
        # The write's clock starts before the state is viewed or copied and stops after the last
        # phase: the phases are all of it but for that and the bookkeeping around them.
        h.check(total <= r["seconds"] + 1e-5 and total >= r["seconds"] - r["copy_seconds"] - 0.02,
                f"{label}: step {r['step']}: phases add up to {total:.4f} s of the {r['seconds']:.4f} s write")
    printed = [line for line in proc.stdout.splitlines() if line.startswith("checkpoint phases (rank 0): ")]
    h.check(len(printed) == 8 and all(f" {n} " in line for line in printed for n in PHASE_NAMES),
            f"{label}: SHARDTRAIN_CKPT_TIMING=1 prints every write's phases ({len(printed)} lines)")

# ---- resharding: other world sizes and strategies ----
_, reference_params = run("reference", 1, ["parallel.strategy=ddp"])
reference = losses(os.path.join(work, "reference"))
reference_params = read_params(reference_params)
writers = {}
for label, ranks, strategy, extra in (("w4_zero3", 4, "zero3", []), ("w2_ddp", 2, "ddp", []),
                                      ("w3_zero2", 3, "zero2", []),
                                      ("w4_hsdp", 4, "hsdp", ["parallel.ranks_per_node=2"])):
    run(label, ranks, [f"parallel.strategy={strategy}"] + extra)
    writers[label] = ckpt(label, 4)
for source, ranks, strategy in (("w4_zero3", 2, "ddp"), ("w2_ddp", 3, "zero3"), ("w3_zero2", 1, "zero1"),
                                ("w4_zero3", 3, "zero1"), ("w2_ddp", 2, "zero3"), ("w4_hsdp", 2, "zero1")):
    label = f"{source}_to_{ranks}_{strategy}"
    _, params = run(label, ranks, [f"parallel.strategy={strategy}", f"checkpoint.resume={writers[source]}",
                                   f"checkpoint.dir={work}/{label}/ckpt"])
    got = losses(os.path.join(work, label))
    h.check(all(abs(got[s] - reference[s]) <= 1e-5 * abs(reference[s]) for s in (5, 6, 7, 8)),
            f"{label}: losses of steps 5-8 within 1e-5 of the uninterrupted run")
    worst = worst_relative(read_params(params), reference_params)
    h.check(worst <= 1e-5, f"{label}: final parameters within 1e-5 ({worst:.1e})")

# A checkpoint with one state dataset rewritten by another tool (h5repack, gzip instead of
# Fletcher32) is read through HDF5's own filters and resumes exactly as the original.
repacked = os.path.join(work, "repacked.h5")
proc = subprocess.run(["h5repack", "-f", "adam_v:GZIP=1", writers["w2_ddp"], repacked], capture_output=True, text=True)
h.check(proc.returncode == 0, f"h5repack rewrites the checkpoint\n{proc.stderr}")
_, _ = run("from_repacked", 2, ["parallel.strategy=ddp", f"checkpoint.resume={repacked}",
                                f"checkpoint.dir={work}/from_repacked/ckpt"])
got, own = losses(os.path.join(work, "from_repacked")), losses(os.path.join(work, "w2_ddp"))
h.check(sorted(got) == [5, 6, 7, 8] and all(got[s] == own[s] for s in got),
        "resumed from the repacked file: the writer's own losses exactly")

# ---- inspect and export ----
source = writers["w4_zero3"]
proc = h.mpirun(args, 1, ["ckpt", "inspect", source])
h.check(proc.returncode == 0 and proc.stdout.count("Fletcher32 verified") == 3 and "step 4" in proc.stdout
        and "written by 4 rank(s) with strategy zero3" in proc.stdout, f"ckpt inspect reports and verifies\n{proc.stdout}")
exported = os.path.join(work, "export.h5")
proc = h.mpirun(args, 1, ["ckpt", "export", source, exported])
h.check(proc.returncode == 0, f"ckpt export exits 0\n{proc.stderr}")
shape = h5py(f"f = h5py.File({exported!r}, 'r'); print(f['block1.mlp.fc.w'].shape, f['wte'].shape, f.attrs['step'])")
h.check(shape.strip() == "(128, 32) (256, 32) 4", f"exported tensors have their shapes ({shape.strip()})")

# ---- bad files ----
bad = os.path.join(work, "bad")
os.makedirs(bad)


def damaged(name, how):
    path = os.path.join(bad, name)
    shutil.copy(source, path)
    how(path)
    return path


def truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def flip_byte(path, dataset="adam_m"):
    h.flip_checkpoint_byte(path, dataset)


def drop_dataset(path):
    h5py(f"f = h5py.File({path!r}, 'a'); del f['adam_v']")


def newer_format(path):
    h5py(f"f = h5py.File({path!r}, 'a'); f.attrs.modify('format_version', 99)")


cases = [("truncated", damaged("truncated.h5", truncate), [], "not a readable HDF5 file (truncated or damaged?)"),
         ("flipped byte", damaged("flipped.h5", flip_byte), [], "Fletcher32 checksum mismatch"),
         ("missing dataset", damaged("missing.h5", drop_dataset), [], "dataset '/adam_v' is missing"),
         ("newer format", damaged("newer.h5", newer_format), [], "checkpoint format 99, newer than the 1"),
         ("other model", source, ["model.d_model=64"], "model.d_model = 32 in the checkpoint, 64 in the deck")]
for name, path, extra, expected in cases:
    label = "bad_" + name.replace(" ", "_")
    proc, _ = run(label, 2, [f"checkpoint.resume={path}"] + extra, expect=2)
    h.check(expected in proc.stderr and path in proc.stderr, f"{name}: the error names the file and says "
                                                             f"'{expected}'\n{proc.stderr[-600:]}")

# resume = "latest" falls back past a damaged newest checkpoint
fallback_dir = os.path.join(work, "fallback")
shutil.copytree(os.path.join(work, "w2_ddp", "ckpt"), fallback_dir)
os.remove(os.path.join(fallback_dir, "ckpt_00000008.h5"))  # the writer's last; step 4 is then the newest good one
good = os.path.join(fallback_dir, "ckpt_00000004.h5")
newest = os.path.join(fallback_dir, "ckpt_00000006.h5")
shutil.copy(good, newest)
truncate(newest)
with open(os.path.join(fallback_dir, "latest"), "w") as f:
    f.write("ckpt_00000006.h5\n")
proc, _ = run("fallback", 2, ["checkpoint.resume=latest", f"checkpoint.dir={fallback_dir}", "checkpoint.every=0"])
h.check("skipping a checkpoint that cannot be resumed" in proc.stdout and newest in proc.stdout
        and f"resumed from {good}" in proc.stdout, f"latest falls back to the newest valid checkpoint and says so\n"
                                                   f"{proc.stdout[-1500:]}")
got = losses(os.path.join(work, "fallback"))
h.check(abs(got[5] - reference[5]) <= 1e-5 * reference[5], "and continues the same run")

# A checkpoint found bad part-way through reading (its last dataset damaged, after the parameters
# were read into place) leaves nothing behind: the run resumes from the older good checkpoint and
# continues exactly as the writer's own run did.
partial_dir = os.path.join(work, "partial_ckpt")
os.makedirs(partial_dir)
older, newest = os.path.join(partial_dir, "ckpt_00000004.h5"), os.path.join(partial_dir, "ckpt_00000008.h5")
shutil.copy(ckpt("w2_ddp", 4), older)
shutil.copy(ckpt("w2_ddp", 8), newest)
flip_byte(newest, "adam_v")
with open(os.path.join(partial_dir, "latest"), "w") as f:
    f.write("ckpt_00000008.h5\n")
proc, partial_params = run("partial", 2, ["parallel.strategy=ddp", "checkpoint.resume=latest",
                                          f"checkpoint.dir={partial_dir}", "checkpoint.every=0"])
h.check("Fletcher32 checksum mismatch" in proc.stdout and newest in proc.stdout and f"resumed from {older}" in proc.stdout,
        f"a checkpoint bad in its last dataset is skipped for the older one\n{proc.stdout[-1500:]}")
own = losses(os.path.join(work, "w2_ddp"))
got = losses(os.path.join(work, "partial"))
h.check(sorted(got) == [5, 6, 7, 8] and all(got[s] == own[s] for s in got),
        "the run continues with the writer's own losses exactly")
with open(partial_params, "rb") as a, open(os.path.join(work, "w2_ddp.f32"), "rb") as b:
    h.check(a.read() == b.read(), "and ends with its final parameters, bit for bit")
print("passed")
