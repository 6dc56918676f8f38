"""Cross-check of model.arch = "llama" against a Llama written in PyTorch (tools/torch_llama.py,
float64), as transformers' LlamaForCausalLM computes it: RMSNorm, rotate-half rotary embeddings,
key/value heads repeated per query group, SwiGLU, no biases. From the same weights and tokens, for grouped-query
attention (untied, rope_theta 500000), multi-query and multi-head (tied), and with Llama 3.1's
rope_scaling "llama3" (rope_theta 500 and an original context of 32, so that the 8-wide heads have
a kept, a blended and two stretched frequencies): the logits within 1e-6 relative, the loss and
every parameter's gradient within 1e-4. Skipped (exit 77) without torch."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: PyTorch is not importable by {sys.executable} ({e}); tools/setup.sh installs python3-torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_llama import llama_logits  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--dump", required=True)
args = p.parse_args()
torch.set_default_dtype(torch.float64)


failures = 0
for n_kv_head, tied, theta, scaling in ((2, 0, 500000.0, None), (1, 1, 10000.0, None), (4, 1, 10000.0, None),
                                        (2, 0, 500.0, (4.0, 1.0, 4.0, 32))):
    work = tempfile.mkdtemp(prefix="st_torch_llama_")
    scaling_args = [str(x) for x in scaling] if scaling else []
    subprocess.run([args.dump, work, "llama", str(n_kv_head), str(tied), str(theta)] + scaling_args, check=True)
    meta = json.load(open(f"{work}/meta.json"))
    label = f"n_kv_head {n_kv_head}, {'tied' if tied else 'untied'}, rope_theta {theta:g}"
    if scaling:
        label += f", rope_scaling llama3 (factor {scaling[0]:g}, original {scaling[3]})"
    params = np.fromfile(f"{work}/params.f32", dtype=np.float32).astype(np.float64)
    ours = np.fromfile(f"{work}/grads.f32", dtype=np.float32).astype(np.float64)
    B, T, V = meta["B"], meta["T"], meta["vocab_size"]
    tokens = torch.from_numpy(np.fromfile(f"{work}/tokens.i32", dtype=np.int32).astype(np.int64).reshape(B, T))
    targets = torch.from_numpy(np.fromfile(f"{work}/targets.i32", dtype=np.int32).astype(np.int64).reshape(B, T))
    our_logits = np.fromfile(f"{work}/logits.f32", dtype=np.float32).astype(np.float64).reshape(B, T, V)
    w = {}
    for t in meta["tensors"]:
        n = int(np.prod(t["shape"]))
        w[t["name"]] = torch.tensor(params[t["offset"]:t["offset"] + n].reshape(t["shape"]), requires_grad=True)
    logits = llama_logits(w, tokens, meta)
    err = np.abs(logits.detach().numpy() - our_logits).max() / np.abs(logits.detach().numpy()).max()
    print(f"{'ok' if err < 1e-6 else 'MISMATCH':8s} {label}: logits max relative difference {err:.2e}")
    failures += err >= 1e-6
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    rel = abs(loss.item() - meta["loss"]) / abs(loss.item())
    print(f"{'ok' if rel < 1e-4 else 'MISMATCH':8s} {label}: loss torch {loss.item():.8f} shardtrain "
          f"{meta['loss']:.8f} relative difference {rel:.2e}")
    failures += rel >= 1e-4
    for t in meta["tensors"]:
        g = w[t["name"]].grad.numpy().ravel()
        mine = ours[t["offset"]:t["offset"] + g.size]
        scale = np.abs(g).max()
        e = np.abs(g - mine).max() / scale if scale > 0 else np.abs(mine).max()
        status = "ok" if e < 1e-4 and scale > 0 else "MISMATCH"
        failures += status != "ok"
        print(f"{status:8s} {label}: {t['name']:22s} max |grad| {scale:.3e} max relative difference {e:.2e}")
print("passed" if failures == 0 else f"{failures} mismatches")
sys.exit(1 if failures else 0)
