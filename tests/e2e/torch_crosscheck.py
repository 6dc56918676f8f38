"""Cross-check against PyTorch: the same weights in an independent GPT-2 written with torch.nn
give the same loss and every gradient to 1e-4 relative. Skipped (exit 77) without torch."""
import argparse
import json
import subprocess
import sys
import tempfile

import os

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: PyTorch is not importable by {sys.executable} ({e}); tools/setup.sh installs python3-torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_gpt2 import gpt2_loss  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--dump", required=True)
args = p.parse_args()
work = tempfile.mkdtemp(prefix="st_torch_")
subprocess.run([args.dump, work], check=True)
meta = json.load(open(f"{work}/meta.json"))
params = np.fromfile(f"{work}/params.f32", dtype=np.float32).astype(np.float64)
ours = np.fromfile(f"{work}/grads.f32", dtype=np.float32).astype(np.float64)
B, T = meta["B"], meta["T"]
tokens = torch.from_numpy(np.fromfile(f"{work}/tokens.i32", dtype=np.int32).astype(np.int64).reshape(B, T))
targets = torch.from_numpy(np.fromfile(f"{work}/targets.i32", dtype=np.int32).astype(np.int64).reshape(B, T))
L, C, NH, V = meta["n_layer"], meta["d_model"], meta["n_head"], meta["vocab_size"]

torch.set_default_dtype(torch.float64)
w = {}
for t in meta["tensors"]:
    n = int(np.prod(t["shape"]))
    w[t["name"]] = torch.tensor(params[t["offset"]:t["offset"] + n].reshape(t["shape"]), requires_grad=True)


loss = gpt2_loss(w, tokens, targets, L, C, NH, V)
loss.backward()

failures = 0
rel = abs(loss.item() - meta["loss"]) / abs(loss.item())
print(f"loss: torch {loss.item():.8f} shardtrain {meta['loss']:.8f} relative difference {rel:.2e}")
failures += rel > 1e-4
for t in meta["tensors"]:
    g = w[t["name"]].grad.numpy().ravel()
    mine = ours[t["offset"]:t["offset"] + g.size]
    scale = np.abs(g).max()
    err = np.abs(g - mine).max() / scale
    status = "ok" if err < 1e-4 else "MISMATCH"
    failures += err >= 1e-4
    print(f"{status:8s} {t['name']:24s} max |grad| {scale:.3e} max relative difference {err:.2e}")
print("passed" if failures == 0 else f"{failures} mismatches")
sys.exit(1 if failures else 0)
