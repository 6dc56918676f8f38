"""One deck, one training run: the same losses on 1, 2, 3 and 4 ranks, and with gradient
accumulation (k micro-batches of b equal one batch of k*b)."""
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
template = f"""
[run]
steps = 8
eval_every = 4
eval_batches = 2
sample_tokens = 0
out_dir = "{work}/OUT"
[model]
n_layer = 2
d_model = 32
n_head = 4
seq_len = 32
[data]
path = "{corpus}"
global_batch = 12
micro_batch = MICRO
[optimizer]
lr = 3e-3
warmup_steps = 2
"""


def run(ranks, micro, label):
    deck = h.write_deck(work, f"{label}.toml", template.replace("OUT", label).replace("MICRO", str(micro)))
    proc = h.mpirun(args, ranks, ["run", deck], timeout=300)
    h.check(proc.returncode == 0, f"{label}: exits 0\n{proc.stderr[-1500:]}")
    rows = h.metrics(os.path.join(work, label))
    return [r["loss"] for r in rows if r["kind"] == "train"], [r["val_loss"] for r in rows if r["kind"] == "val"], \
        [r["grad_norm"] for r in rows if r["kind"] == "train"]


def close(a, b, rel):
    return len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


ref_loss, ref_val, ref_norm = run(1, 0, "np1")
h.check(ref_loss[-1] < ref_loss[0], "the reference run learns")
for ranks, micro in ((2, 0), (3, 0), (4, 0), (1, 3), (2, 2), (3, 2)):
    label = f"np{ranks}_micro{micro}"
    loss, val, norm = run(ranks, micro, label)
    h.check(close(loss, ref_loss, 1e-5), f"{label}: losses equal the 1-rank run within 1e-5\n{loss}\n{ref_loss}")
    h.check(close(norm, ref_norm, 1e-5), f"{label}: gradient norms equal within 1e-5")
    h.check(close(val, ref_val, 1e-5), f"{label}: validation losses equal within 1e-5")
print("passed")
