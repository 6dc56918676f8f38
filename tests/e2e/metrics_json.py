"""Every JSON file a run writes is strict JSON, in ASCII, whatever text it holds. The deck's file
name holds a quote, a backslash, a space and a byte that is no UTF-8, and run.out_dir = "{deck}"
names the run directory, and so the checkpoints, after it; the samples hold bytes of every kind.
Each line of metrics.jsonl and each rank's timeline parse with a strict parser (no NaN, no
Infinity), "time" first on every line, and hold what was written: the checkpoint's real path with
U+FFFD for the byte that is no UTF-8, the sample as printed, a finite loss for every step."""
import array
import json
import math
import os
import shutil
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
NAME = b'we"ird\\ na\xffme'  # the deck's file name without ".toml"
STEPS = 4


def strict(data, what):
    """Parses `data` (bytes) as JSON, refusing what a strict parser refuses."""
    if any(b >= 0x80 for b in data):
        h.fail(f"{what} is not ASCII: {data[:300]!r}")

    def refuse(constant):
        h.fail(f"{what}: {constant} is no JSON")
    try:
        return json.loads(data.decode("ascii"), parse_constant=refuse)
    except ValueError as e:
        h.fail(f"{what} is not JSON ({e}): {data[:300]!r}")


written = h.small_deck(work, "plain", h.corpus(args),
                       run={"steps": STEPS, "eval_every": 2, "sample_every": STEPS, "sample_tokens": 300,
                            "sample_temperature": 4.0, "trace_steps": 2, "out_dir": os.path.join(work, "{deck}")},
                       checkpoint={"every": 2})
deck = os.fsdecode(os.path.join(os.fsencode(work), NAME + b".toml"))  # undecodable bytes survive as themselves
shutil.move(written, deck)
# The log names paths as their bytes are: read it as bytes.
proc = subprocess.run([args.mpiexec, "-n", "2", args.exe, "run", deck], capture_output=True, timeout=300)
stdout = proc.stdout.decode("utf-8", "surrogateescape")
h.check(proc.returncode == 0, f"the run exits 0\n{stdout[-800:]}\n{proc.stderr[-1500:].decode('utf-8', 'replace')}")

run_dir = os.path.join(os.fsencode(work), NAME)
with open(os.path.join(run_dir, b"metrics.jsonl"), "rb") as f:
    lines = f.read().splitlines()
rows = [strict(line, f"metrics.jsonl line {n}") for n, line in enumerate(lines, 1)]
h.check(all(isinstance(r, dict) and list(r)[:2] == ["time", "kind"] for r in rows),
        f"each of the {len(rows)} lines is strict JSON in ASCII, an object, \"time\" first, \"kind\" next")
kinds = [r["kind"] for r in rows]
h.check(kinds.count("train") == STEPS and kinds.count("val") == 2 and kinds.count("checkpoint") == 2 and
        kinds.count("sample") == 1 and kinds.count("run") == 1 and "memory" in kinds,
        f"a line for each step, evaluation, checkpoint, sample and the run ({kinds})")

train = [r for r in rows if r["kind"] == "train"]
h.check([r["step"] for r in train] == list(range(1, STEPS + 1)) and
        all(isinstance(r["loss"], float) and math.isfinite(r["loss"]) and r["memory_bytes"] > 0 for r in train),
        "each step's number, a finite loss and its memory")

shown_dir = os.path.join(work, NAME.decode("utf-8", "replace"))  # 0xff as U+FFFD
for r in (r for r in rows if r["kind"] == "checkpoint"):
    name = f"ckpt_{r['step']:08d}.h5"
    h.check(r["path"] == os.path.join(shown_dir, "checkpoints", name), f"step {r['step']}: the checkpoint's path, "
                                                                     f"its byte that is no UTF-8 as U+FFFD ({r['path']!r})")
    h.check(os.path.isfile(os.path.join(run_dir, b"checkpoints", name.encode())), f"{name} is where the path says")

sample = next(r for r in rows if r["kind"] == "sample")
printed = stdout.split(f"---- sample after step {STEPS} ----\n")[1].split("\n----\n")[0]
h.check(sample["text"] == printed and sample["step"] == STEPS and "\\x" in printed,
        "the sample (stray bytes shown as \\xNN) is the text printed")

for rank in range(2):
    trace = strict(open(os.path.join(run_dir, f"trace.rank{rank}.json".encode()), "rb").read(), f"rank {rank}'s timeline")
    events = trace["traceEvents"]
    h.check(list(trace) == ["displayTimeUnit", "traceEvents"] and trace["displayTimeUnit"] == "ms" and
            events[0] == {"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}},
            f"rank {rank}'s timeline names its process")
    spans = [e for e in events if e["ph"] == "X"]
    h.check(spans and all(e["pid"] == rank and e["ts"] >= 0 and e["dur"] >= 0 for e in spans) and
            any(e.get("args", {}).get("bytes", 0) > 0 for e in spans),
            f"rank {rank}: {len(spans)} spans with times, collectives with their bytes")

# A run that diverges: its model starts from these weights with a NaN in the final layer norm,
# so every logit, the loss and the gradient norm are NaN at the first step. The run stops there
# (exit code 6, the update skipped); its lines are JSON all the same, with null for each number
# JSON cannot hold.
weights = os.path.join(work, "nan_init.bin")
export = subprocess.run([args.exe, "ckpt", "export", os.path.join(run_dir, b"checkpoints", b"ckpt_00000004.h5"),
                         weights, "--format", "llmc"], capture_output=True, timeout=120)
h.check(export.returncode == 0, f"the checkpoint exports to an llm.c file\n{export.stderr[-800:]!r}")
values = array.array("f")
with open(weights, "rb") as f:
    header = f.read(1024)
    values.frombytes(f.read())
d_model = 32  # the small deck's; the file ends with the final layer norm's weight and bias
values[len(values) - 2 * d_model] = math.nan
with open(weights, "wb") as f:
    f.write(header + values.tobytes())
deck = h.small_deck(work, "diverged", h.corpus(args), run={"steps": 3, "eval_every": 3}, model={"init_from": weights})
proc = h.mpirun(args, 2, ["run", deck], timeout=300)
h.check(proc.returncode == 6, f"the diverged run stops with exit code 6\n{proc.stdout[-800:]}\n{proc.stderr[-1500:]}")
with open(os.path.join(work, "diverged", "metrics.jsonl"), "rb") as f:
    rows = [strict(line, f"diverged metrics.jsonl line {n}") for n, line in enumerate(f.read().splitlines(), 1)]
train = [r for r in rows if r["kind"] == "train"]
h.check(len(train) == 1 and train[0]["loss"] is None and train[0]["grad_norm"] is None and train[0]["lr"] > 0 and
        train[0]["diverged"] is True,
        "NaN losses and gradient norms are null in strict JSON lines, the other numbers as they were")
print("passed")
