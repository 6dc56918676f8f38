"""A run that diverges stops with the last finite weights kept, and says so.

A small Llama with an untied head starts from weights whose embedding row of one byte ('@') is
infinite: every batch without that byte trains normally, the first batch with it gives a NaN
loss and gradient norm. The run must:
- print the step line and an error naming the step and the values, skip that update, write a
  checkpoint of the step before (the weights before the NaN, none of them NaN) that `latest`
  names, with the position of the bad step's batch, and exit with code 6;
- mark the step in metrics.jsonl ("diverged": true, the loss null) after finite steps;
- on a resume from that checkpoint, take the same step again (and stop there again).
"""
import json
import math
import os
import struct

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
LLAMA = {"arch": "llama", "tie_embeddings": False, "n_kv_head": 2}

# Weights to start from: one step of the model, exported in Hugging Face's layout.
deck = h.small_deck(work, "start", corpus, model=LLAMA, run={"steps": 1, "export_at_end": "safetensors",
                                                             "out_dir": os.path.join(work, "start")})
proc = h.mpirun(args, 2, ["run", deck])
h.check(proc.returncode == 0, f"the starting weights are written\n{proc.stderr[-800:]}")
source = os.path.join(work, "start", "model", "model.safetensors")
blob = bytearray(open(source, "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
tensor = json.loads(blob[8:8 + n])["model.embed_tokens.weight"]
width = tensor["shape"][1]
row = 8 + n + tensor["data_offsets"][0] + ord("@") * width * 4
blob[row:row + width * 4] = struct.pack("<f", math.inf) * width
poisoned = os.path.join(work, "poisoned")
os.makedirs(poisoned)
open(os.path.join(poisoned, "model.safetensors"), "wb").write(blob)
open(os.path.join(poisoned, "config.json"), "w").write(open(os.path.join(work, "start", "model", "config.json")).read())

run_dir = os.path.join(work, "diverging")
deck = h.small_deck(work, "diverging", corpus, model=dict(LLAMA, init_from=poisoned),
                    run={"steps": 200, "log_every": 100, "out_dir": run_dir})
proc = h.mpirun(args, 2, ["run", deck])
h.check(proc.returncode == 6, f"a run that diverges exits with code 6 ({proc.returncode})\n{proc.stdout[-600:]}"
                              f"{proc.stderr[-600:]}")
rows = [r for r in h.metrics(run_dir) if r["kind"] == "train"]
bad = rows[-1]["step"]
h.check(bad > 1 and rows[-1].get("diverged") is True and rows[-1]["loss"] is None and
        all(r["loss"] is not None and "diverged" not in r for r in rows[:-1]),
        f"metrics mark step {bad} as diverged, after {bad - 1} finite steps")
h.check(f"error: step {bad}: loss nan, gradient norm nan: not finite; the update was skipped" in proc.stdout and
        f"step {bad}/200 | loss nan" in proc.stdout, f"the log names the step and the values\n{proc.stdout[-800:]}")
kept = os.path.join(run_dir, "checkpoints", f"ckpt_{bad - 1:08d}.h5")
h.check(os.path.exists(kept) and open(os.path.join(run_dir, "checkpoints", "latest")).read().strip() ==
        os.path.basename(kept), f"the checkpoint of step {bad - 1} is kept and `latest` names it")
h.check(f"the checkpoint of step {bad - 1} holds the last finite weights" in proc.stdout, "the log says what was kept")

# None of the kept weights is NaN (the poisoned row stays infinite: it is what the run started from).
exported = os.path.join(work, "kept", "model.safetensors")
proc = h.mpirun(args, 1, ["ckpt", "export", "--format", "safetensors", kept, exported])
h.check(proc.returncode == 0, f"the kept checkpoint exports\n{proc.stderr[-600:]}")
blob = open(exported, "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
values = struct.unpack(f"<{(len(blob) - 8 - n) // 4}f", blob[8 + n:])
h.check(not any(math.isnan(v) for v in values) and sum(math.isinf(v) for v in values) == width,
        f"no NaN among the kept checkpoint's {len(values)} values; the one infinite row it started with")

# A resume takes the bad step again: the checkpoint holds the position of its batch.
proc = h.mpirun(args, 2, ["run", deck, "--set", 'checkpoint.resume="latest"'])
again = [r for r in h.metrics(run_dir) if r["kind"] == "train"]
h.check(proc.returncode == 6 and again[-1]["step"] == bad and again[-1].get("diverged") is True and
        f"resumed from {kept}" in proc.stdout, f"the resumed run stops at step {bad} again ({proc.returncode})")
print("passed")
