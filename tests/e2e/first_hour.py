"""A new user's first hour, as the README tells it: its quick-start command (tools/launch.sh -n 2
run inputs/default.toml) on the default deck cut to 40 steps, then every command the README
shows, on what that run wrote.

- The run writes what the README lists: train.log, metrics.jsonl, resolved.toml, and the trained
  model: a checkpoint after the last step (checkpoint.at_end, on by default, with
  checkpoint.every = 0 as the deck has it) that `latest` names, and with run.export_at_end the
  model in Hugging Face's layout under model/.
- Its output shows the settings table, step lines, the validation loss and a sample.
- `eval RUN` gives the logged validation loss (1e-6); `generate RUN` with the README's options
  prints the samples it asks for; `ckpt inspect RUN` shows the last step and the tokens seen;
  `check` with checkpoint.resume = "latest" says the run has finished; tools/plot_metrics.py
  draws a PNG.
- `eval RUN --data FILE` predicts every token of the file once, in order: its loss equals
  PyTorch's on the exported model.safetensors over the same windows (1e-5; skipped where
  Debian's python3-torch is missing).
- A run whose last checkpoint is not its last step (stopped early): eval says which step it read.
"""
import json
import os
import struct
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
h.corpus(args)  # the deck's data/fortunes.txt, relative to the source tree
run_dir = os.path.join(work, "default")
env = dict(os.environ, SHARDTRAIN=args.exe)


def shardtrain(ranks, argv, timeout=300):
    proc = h.mpirun(args, ranks, argv, timeout=timeout, cwd=args.source)
    h.check(proc.returncode == 0, f"shardtrain {' '.join(argv[:2])} exits 0\n{proc.stdout[-600:]}{proc.stderr[-800:]}")
    return proc


STEPS = 40
cut = ["--set", f"run.steps={STEPS}", "--set", "run.eval_every=20", "--set", f'run.out_dir="{run_dir}"',
       "--set", 'run.export_at_end="safetensors"']
proc = subprocess.run([os.path.join(args.source, "tools", "launch.sh"), "-n", "2", "run", "inputs/default.toml"] + cut,
                      cwd=args.source, env=env, capture_output=True, text=True, timeout=600)
h.check(proc.returncode == 0, f"the quick start's command exits 0\n{proc.stdout[-800:]}\n{proc.stderr[-800:]}")
out = proc.stdout
h.check("| setting" in out and "| model.d_model" in out, "it prints the settings table")
h.check(f"step {STEPS}/{STEPS} | loss " in out and f"val loss " in out and f"at step {STEPS}" in out,
        "it prints step lines and the validation loss")
h.check(f"---- sample after step {STEPS} ----" in out, "it ends with a sample")
step_lines = [line for line in out.splitlines() if line.startswith("step ")]
h.check(all(len(line) < 160 for line in step_lines), f"step lines fit in 160 columns ({max(map(len, step_lines))})")

for name in ("train.log", "metrics.jsonl", "resolved.toml", "model/model.safetensors", "model/config.json"):
    h.check(os.path.getsize(os.path.join(run_dir, name)) > 0, f"the run wrote {name}")
final = os.path.join(run_dir, "checkpoints", f"ckpt_{STEPS:08d}.h5")
with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
    latest = f.read().strip()
h.check(os.path.exists(final) and latest == os.path.basename(final),
        f"the trained model is kept: a checkpoint after the last step, named by `latest` ({latest})")
rows = h.metrics(run_dir)
logged = [r["val_loss"] for r in rows if r["kind"] == "val" and r["step"] == STEPS][0]
train_rows = [r for r in rows if r["kind"] == "train"]
h.check(train_rows[-1]["tokens"] == STEPS * 16 * 128, f"metrics count the tokens seen ({train_rows[-1]['tokens']})")

# The README's commands on the run directory.
got = json.loads(shardtrain(1, ["eval", run_dir, "--json"]).stdout)
h.check(got["step"] == STEPS and abs(got["loss"] - logged) <= 1e-6 * logged,
        f"eval RUN: the final checkpoint's loss {got['loss']!r} = the logged {logged!r}")
proc = shardtrain(2, ["generate", run_dir, "--prompt", "The ", "--tokens", "60", "--samples", "3",
                      "--temperature", "0.8", "--top-k", "40", "--seed", "1"])
samples = [line for line in proc.stdout.splitlines() if line.startswith("---- sample ")]
h.check(len(samples) == 3 and "note:" not in proc.stderr, f"generate RUN prints 3 samples\n{proc.stdout[-600:]}")
proc = shardtrain(1, ["ckpt", "inspect", run_dir])
h.check(f"step {STEPS}, tokens seen {STEPS * 16 * 128}" in proc.stdout, f"ckpt inspect RUN\n{proc.stdout[:600]}")
proc = shardtrain(1, ["check", "inputs/default.toml"] + cut + ["--set", 'checkpoint.resume="latest"'])
h.check("the run has finished" in proc.stdout, f"check with resume = latest says the run has finished\n"
                                               f"{[line for line in proc.stdout.splitlines() if 'resume' in line]}")
png = os.path.join(work, "loss.png")
proc = subprocess.run(["/usr/bin/python3", os.path.join(args.source, "tools", "plot_metrics.py"), run_dir, "-o", png],
                      capture_output=True, text=True, timeout=120)
h.check(proc.returncode == 0 and os.path.getsize(png) > 10000, f"plot_metrics.py draws the run\n{proc.stderr[-400:]}")

# eval --data: every token once, in order, against PyTorch on the exported weights.
text = os.path.join(work, "text.txt")
with open(os.path.join(args.source, "data", "fortunes.txt"), "rb") as f:
    data = f.read()[100000:100000 + 1000]
with open(text, "wb") as f:
    f.write(data)
whole = json.loads(shardtrain(2, ["eval", run_dir, "--data", text, "--json"]).stdout)
h.check(whole["tokens"] == len(data) - 1 and whole["windows"] == 7 and whole["last_window"] == (len(data) - 1) % 128,
        f"eval --data predicts all {len(data) - 1} tokens after the first, in windows of 128 ({whole})")
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP (part): PyTorch is not importable ({e}); eval --data is not compared with it")
else:
    blob = open(os.path.join(run_dir, "model", "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    w = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        w[name.removeprefix("transformer.")] = torch.from_numpy(
            np.frombuffer(blob[8 + n + a:8 + n + b], dtype=np.float32).reshape(t["shape"]).copy()).double()
    config = json.load(open(os.path.join(run_dir, "model", "config.json")))
    C, H, L = config["n_embd"], config["n_head"], config["n_layer"]

    def logits(tokens):  # GPT-2 in Hugging Face's layout (Conv1D: x @ W + b), in double
        T = len(tokens)
        x = w["wte.weight"][tokens] + w["wpe.weight"][:T]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        for layer in range(L):
            p = f"h.{layer}."
            y = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps=1e-5)
            q, k, v = (y @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(C, dim=1)
            q, k, v = (z.view(T, H, C // H).transpose(0, 1) for z in (q, k, v))
            att = ((q @ k.transpose(-2, -1)) / (C // H) ** 0.5).masked_fill(mask, float("-inf")).softmax(-1)
            x = x + (att @ v).transpose(0, 1).reshape(T, C) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            y = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps=1e-5)
            y = F.gelu(y @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
            x = x + y @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps=1e-5)
        return x @ w["wte.weight"].T

    ids = torch.tensor(list(data))
    total = 0.0
    for start in range(0, len(data) - 1, 128):
        window = ids[start:min(start + 129, len(data))]
        total += F.cross_entropy(logits(window[:-1]), window[1:], reduction="sum").item()
    reference = total / (len(data) - 1)
    h.check(abs(whole["loss"] - reference) <= 1e-5 * reference,
            f"eval --data {whole['loss']!r} = PyTorch's {reference!r} on the exported weights, window by window")

# A run whose last checkpoint is not its last step: eval of its directory says which step it read.
early = os.path.join(work, "early")
shardtrain(2, ["run", "inputs/default.toml", "--set", "run.steps=25", "--set", "checkpoint.every=10", "--set",
               "checkpoint.at_end=false", "--set", f'run.out_dir="{early}"', "--set", "run.eval_every=0",
               "--set", "run.sample_tokens=0"])
proc = shardtrain(1, ["eval", early])
h.check("is at step 20 of the 25 its run was set to train" in proc.stderr,
        f"eval of a run that kept no checkpoint of its last step names the step it read\n{proc.stderr[-400:]}")
print("passed")
