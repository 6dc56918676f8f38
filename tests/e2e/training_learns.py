"""A few hundred steps on real text: the loss starts at ln(vocab) and validation loss ends
clearly below the unigram entropy of the text, i.e. the model uses context."""
import datetime
import math
import os
import re
from collections import Counter

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
deck = h.write_deck(work, "learn.toml", f"""
[run]
steps = 300
log_every = 50
eval_every = 100
eval_batches = 4
sample_tokens = 80
out_dir = "{work}/run"
[model]
n_layer = 2
d_model = 64
n_head = 4
seq_len = 64
[data]
path = "{corpus}"
global_batch = 16
val_fraction = 0.05
[optimizer]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 20
""")
proc = h.mpirun(args, 2, ["run", deck], timeout=500)
h.check(proc.returncode == 0, f"training exits 0 (rc {proc.returncode})\n{proc.stderr[-2000:]}")

# The unigram entropy of the validation part, computed here independently of the trainer.
data = open(corpus, "rb").read()
val = data[len(data) - int(len(data) * 0.05):]
counts = Counter(val)
entropy = -sum(c / len(val) * math.log(c / len(val)) for c in counts.values())

rows = h.metrics(os.path.join(work, "run"))
train = [r for r in rows if r["kind"] == "train"]
vals = [r for r in rows if r["kind"] == "val"]
samples = [r for r in rows if r["kind"] == "sample"]
h.check(len(train) == 300 and [r["step"] for r in train] == list(range(1, 301)), "one metrics row per step")
h.check(abs(train[0]["loss"] - math.log(256)) < 0.1,
        f"initial loss {train[0]['loss']:.4f} is close to ln(256) = {math.log(256):.4f}")
h.check([r["step"] for r in vals] == [100, 200, 300], "validation every 100 steps")
h.check(vals[-1]["val_loss"] < entropy - 0.6,
        f"final validation loss {vals[-1]['val_loss']:.4f} is well below the unigram entropy {entropy:.4f}")
h.check(vals[0]["val_loss"] > vals[-1]["val_loss"], "validation loss falls")
for key in ("lr", "grad_norm", "ms", "tokens_per_s", "mfu", "memory_bytes", "comm_bytes"):
    h.check(all(key in r for r in train), f"metrics have {key}")
h.check(all(r["comm_bytes"] > 0 for r in train), "two ranks exchange gradients every step")
# Progress: elapsed time grows, the ETA reaches 0 at the last step, every line has a UTC time.
elapsed = [r["elapsed_s"] for r in train]
h.check(all(b >= a for a, b in zip(elapsed, elapsed[1:])) and elapsed[-1] > elapsed[0], "elapsed time grows")
h.check(train[-1]["eta_s"] == 0 and train[0]["eta_s"] > 0, "the ETA counts down to 0")
middle = train[149]
h.check(abs(middle["eta_s"] - middle["elapsed_s"] * 150 / 150) <= 1e-6 * middle["elapsed_s"] + 1e-9,
        "the ETA is the steps left at the pace so far")
stamps = [datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ") for r in rows]
h.check(all(b >= a for a, b in zip(stamps, stamps[1:])), "every metrics line has a wall-clock time, in order")
line50 = next(line for line in proc.stdout.splitlines() if line.startswith("step 50/300 |"))
h.check(re.search(r"\| ETA \d+(s|m \d\ds)$", line50) is not None and len(line50) < 160,
        f"the step line ends with the ETA and fits in 160 columns ({len(line50)})")
h.check(re.search(r"\| mem [\d.]+ MiB \d+% \|", line50) is not None and 0 < train[49]["peak_bytes"],
        "the step line gives the measured peak memory and its share; metrics have it")
h.check(0 < train[-1]["mfu"] < 1.5, f"MFU is a plausible fraction ({train[-1]['mfu']:.3f})")
h.check(len(samples) == 1 and len(samples[0]["text"]) >= 80, "a text sample is written at the end")
h.check("---- sample after step 300 ----" in proc.stdout, "the sample is printed")
h.check(proc.stdout.count("| run.steps ") == 1, "rank 0 alone prints the settings table")
for name in ("deck.toml", "resolved.toml", "train.log", "metrics.jsonl"):
    h.check(os.path.exists(os.path.join(work, "run", name)), f"run directory holds {name}")
print("passed")
