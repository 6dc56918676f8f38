"""GPT-2 weights in and out, end to end.

- Import: random GPT-2 weights (2 layers, d_model 64, 4 heads, 32 positions, 300 tokens) written
  here in llm.c's model file (version 3 fp32, version 5 bf16, vocabulary padded to 384) and as
  Hugging Face safetensors (F32, BF16, and F16 with GPT2Model's names and the attention-mask
  buffers old files carry); after shardtrain's import the logits on a fixed batch equal those of
  a GPT-2 written here with torch in the Hugging Face layout (Conv1D: x @ W + b) to 1e-5 of the
  largest logit. A mapping that is off (a Conv1D weight not transposed) must fail that bound.
- Export: a run that starts from each file (model.init_from, on 1, 2 and 3 ranks with ddp,
  zero3, zero2 in bf16 and hsdp) and takes one step at learning rate 0 writes a checkpoint whose
  `ckpt export --format llmc` and `--format safetensors` are the input files byte for byte.
- A trained checkpoint exported in both formats and imported again gives its parameters exactly.
- A checkpoint found by checkpoint.resume takes precedence over model.init_from.
- model.from_file takes the model from the file; a file of another shape, a truncated file, a bad
  header and a missing tensor each stop `shardtrain check` with a message naming the file and the
  problem.
Skipped (exit 77) without numpy and torch (Debian's python3-torch).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import harness as h

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP: numpy and PyTorch are not importable by {sys.executable} ({e}); tools/setup.sh installs python3-torch")
    sys.exit(h.SKIP)

args = h.parse_args({"--logits": {"required": True}})
work = h.tmpdir()
corpus = h.corpus(args)
L, C, NH, T, V, VP = 2, 64, 4, 32, 300, 384  # llm.c pads 300 to a multiple of 128
B = 3
KINDS = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
         "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
         "mlp.c_proj.weight", "mlp.c_proj.bias"]
CONV1D = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}

# ---- random weights, Hugging Face layout (Conv1D weights [in, out]) ----
rng = np.random.default_rng(2026)


def normal(shape, std, mean=0.0):
    return (mean + std * rng.standard_normal(shape)).astype(np.float32)


hf = {"wte.weight": normal((V, C), 0.5), "wpe.weight": normal((T, C), 0.3)}
for layer in range(L):
    p = f"h.{layer}."
    hf.update({p + "ln_1.weight": normal(C, 0.2, 1.0), p + "ln_1.bias": normal(C, 0.2),
               p + "attn.c_attn.weight": normal((C, 3 * C), 0.15), p + "attn.c_attn.bias": normal(3 * C, 0.1),
               p + "attn.c_proj.weight": normal((C, C), 0.15), p + "attn.c_proj.bias": normal(C, 0.1),
               p + "ln_2.weight": normal(C, 0.2, 1.0), p + "ln_2.bias": normal(C, 0.2),
               p + "mlp.c_fc.weight": normal((C, 4 * C), 0.15), p + "mlp.c_fc.bias": normal(4 * C, 0.1),
               p + "mlp.c_proj.weight": normal((4 * C, C), 0.08), p + "mlp.c_proj.bias": normal(C, 0.1)})
hf.update({"ln_f.weight": normal(C, 0.2, 1.0), "ln_f.bias": normal(C, 0.2)})


def rounded(weights, dtype):
    """The weights as a file of `dtype` holds them (torch rounds to nearest even), back in fp32."""
    return {k: torch.from_numpy(v).to(dtype).to(torch.float32).numpy() for k, v in weights.items()}


def raw(array, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(array, dtype="<f4").tobytes()
    t = torch.from_numpy(np.ascontiguousarray(array)).to(torch.bfloat16 if dtype == "BF16" else torch.float16)
    return t.view(torch.int16).numpy().astype("<i2").tobytes()


# ---- writers, from the formats' descriptions ----
def write_safetensors(path, tensors, dtype, config=None):
    """As the safetensors library lays out one dtype: names sorted, __metadata__ first, compact JSON
    padded with spaces to 8 bytes, then the tensors back to back."""
    header, data, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        b = raw(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape), "data_offsets": [at, at + len(b)]}
        data.append(b)
        at += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(data))
    with open(os.path.join(os.path.dirname(path), "config.json"), "w") as f:
        json.dump(config or {"model_type": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "n_positions": T,
                             "vocab_size": V, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}, f)


def write_llmc(path, weights, version):
    """llm.c's train_gpt2.py layout: header, wte padded with zero rows, one kind of tensor for all
    layers together, Linear weights [out, in] (the Conv1D weights transposed)."""
    dtype = "F32" if version == 3 else "BF16"
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, version, T, V, L, NH, C, VP]
    parts = [header.tobytes(), raw(np.concatenate([weights["wte.weight"], np.zeros((VP - V, C), np.float32)]), dtype),
             raw(weights["wpe.weight"], dtype)]
    for kind in KINDS:
        for layer in range(L):
            w = weights[f"h.{layer}.{kind}"]
            parts.append(raw(w.T if kind in CONV1D else w, dtype))
    parts += [raw(weights["ln_f.weight"], dtype), raw(weights["ln_f.bias"], dtype)]
    with open(path, "wb") as f:
        f.write(b"".join(parts))


# ---- GPT-2 by hand in the Hugging Face layout ----
def torch_logits(weights, tokens, transpose_c_proj=False):
    w = {k: torch.from_numpy(v).double() for k, v in weights.items()}
    x = w["wte.weight"][tokens] + w["wpe.weight"][:tokens.shape[1]]
    mask = torch.triu(torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool), 1)
    for layer in range(L):
        p = f"h.{layer}."
        hs = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps=1e-5)
        q, k, v = (hs @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (z.view(B, -1, NH, C // NH).transpose(1, 2) for z in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / (C // NH) ** 0.5).masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, -1, C)
        proj = w[p + "attn.c_proj.weight"]
        x = x + y @ (proj.T if transpose_c_proj else proj) + w[p + "attn.c_proj.bias"]
        hs = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps=1e-5)
        hs = F.gelu(hs @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + hs @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps=1e-5)
    return (x @ w["wte.weight"].T).numpy()  # the tied head


tokens = rng.integers(0, V, size=(B, T)).astype(np.int32)
tokens_path = os.path.join(work, "tokens.i32")
tokens.tofile(tokens_path)


def shardtrain_logits(path):
    out = os.path.join(work, "logits.f32")
    proc = subprocess.run([args.logits, path, tokens_path, str(B), str(T), out], capture_output=True, text=True)
    h.check(proc.returncode == 0, f"gpt2_logits reads {path}\n{proc.stdout}{proc.stderr}")
    return np.fromfile(out, dtype=np.float32).reshape(B, T, V).astype(np.float64)


def relative(ours, reference):
    return np.abs(ours - reference).max() / np.abs(reference).max()


files = {}
os.makedirs(f"{work}/hf32")
os.makedirs(f"{work}/hf16")
os.makedirs(f"{work}/hf_f16")
files["llmc_fp32"] = (f"{work}/gpt2_fp32.bin", hf)
write_llmc(files["llmc_fp32"][0], hf, 3)
files["llmc_bf16"] = (f"{work}/gpt2_bf16.bin", rounded(hf, torch.bfloat16))
write_llmc(files["llmc_bf16"][0], hf, 5)
files["safetensors_f32"] = (f"{work}/hf32/model.safetensors", hf)
write_safetensors(files["safetensors_f32"][0], {"transformer." + k: v for k, v in hf.items()}, "F32")
files["safetensors_bf16"] = (f"{work}/hf16/model.safetensors", rounded(hf, torch.bfloat16))
write_safetensors(files["safetensors_bf16"][0], {"transformer." + k: v for k, v in hf.items()}, "BF16")
# GPT2Model's names (no "transformer."), F16, with the attention-mask buffers older files saved.
buffers = {f"h.{layer}.attn.bias": np.tril(np.ones((1, 1, T, T), np.float32)) for layer in range(L)}
buffers.update({f"h.{layer}.attn.masked_bias": np.array(-1e4, np.float32) for layer in range(L)})
files["safetensors_f16"] = (f"{work}/hf_f16/model.safetensors", rounded(hf, torch.float16))
write_safetensors(files["safetensors_f16"][0], {**hf, **buffers}, "F16")

# ---- logits against PyTorch ----
for label, (path, weights) in files.items():
    reference = torch_logits(weights, torch.from_numpy(tokens).long())
    err = relative(shardtrain_logits(path), reference)
    h.check(err < 1e-5, f"{label}: logits equal PyTorch's GPT-2 (largest |logit| {np.abs(reference).max():.2f}, "
                        f"max difference {err:.2e} of it)")
wrong = relative(shardtrain_logits(files["llmc_fp32"][0]),
                 torch_logits(hf, torch.from_numpy(tokens).long(), transpose_c_proj=True))
h.check(wrong > 1e-3, f"the comparison tells a wrong mapping (c_proj not transposed: difference {wrong:.2e})")


# ---- import through the executable, export byte for byte ----
def deck(label, init_from, model=None, steps=1, lr=0.0, **sections):
    text = {"run": {"steps": steps, "eval_every": 0, "sample_tokens": 0, "out_dir": f"{work}/{label}"},
            "model": dict(model or {}, init_from=init_from) if init_from else dict(model),
            "data": {"path": corpus, "global_batch": 6},
            "optimizer": {"lr": lr, "min_lr": 0.0, "warmup_steps": 0},
            "checkpoint": {"dir": f"{work}/{label}/ckpt", "every": steps}}
    for section, keys in sections.items():
        text.setdefault(section, {}).update(keys)
    return h.write_deck(work, f"{label}.toml", "".join(
        f"[{name}]\n" + "".join(f"{k} = {h.toml_value(v)}\n" for k, v in keys.items()) for name, keys in text.items()))


SHAPE = {"n_layer": L, "d_model": C, "n_head": NH, "seq_len": T, "vocab_size": V}


def run(label, ranks, deck_path, extra=()):
    proc = h.mpirun(args, ranks, ["run", deck_path, *extra])
    h.check(proc.returncode == 0, f"{label}: the run on {ranks} rank(s) exits 0\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return proc


def export(checkpoint, fmt, out, dtype="fp32"):
    proc = h.mpirun(args, 1, ["ckpt", "export", "--format", fmt, "--dtype", dtype, checkpoint, out])
    h.check(proc.returncode == 0, f"ckpt export --format {fmt} --dtype {dtype} exits 0\n{proc.stdout}{proc.stderr}")
    return out


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


imports = [
    # label, input, ranks, deck model keys (None: model.from_file), parallel settings, export dtype
    ("llmc_fp32", files["llmc_fp32"][0], 1, None, {"strategy": "ddp"}, "fp32"),
    ("safetensors_f32", files["safetensors_f32"][0], 2, dict(SHAPE, vocab_pad_to=128), {"strategy": "zero3"}, "fp32"),
    ("llmc_bf16", files["llmc_bf16"][0], 3, None, {"strategy": "zero2", "precision": "bf16"}, "bf16"),
    ("safetensors_bf16", os.path.dirname(files["safetensors_bf16"][0]), 2, dict(SHAPE, vocab_pad_to=128),
     {"strategy": "hsdp", "ranks_per_node": 1}, "bf16"),
]
for label, source, ranks, model, parallel, dtype in imports:
    model_keys = {"from_file": True} if model is None else model
    proc = run(f"import {label}", ranks, deck(f"import_{label}", source, model_keys, parallel=parallel))
    h.check("initialised from " in proc.stdout and "fresh optimizer state" in proc.stdout,
            f"import {label}: the run says where its weights came from")
    checkpoint = f"{work}/import_{label}/ckpt/ckpt_00000001.h5"
    llmc_twin = files["llmc_bf16" if dtype == "bf16" else "llmc_fp32"][0]
    st_twin = files["safetensors_bf16" if dtype == "bf16" else "safetensors_f32"][0]
    out = export(checkpoint, "llmc", f"{work}/export_{label}.bin", dtype)
    h.check(same_bytes(out, llmc_twin), f"{label} ({parallel['strategy']}, {ranks} rank(s)): export --format llmc "
                                        f"--dtype {dtype} is {os.path.basename(llmc_twin)} byte for byte")
    os.makedirs(f"{work}/export_{label}")
    out = export(checkpoint, "safetensors", f"{work}/export_{label}/model.safetensors", dtype)
    h.check(same_bytes(out, st_twin), f"{label}: export --format safetensors --dtype {dtype} is the Hugging Face "
                                      f"file byte for byte")
    config = json.load(open(f"{work}/export_{label}/config.json"))
    h.check((config["n_layer"], config["n_head"], config["n_embd"], config["n_positions"], config["vocab_size"],
             config["architectures"]) == (L, NH, C, T, V, ["GPT2LMHeadModel"]),
            f"{label}: config.json beside the export describes the model for transformers")

# weights convert and inspect, without a run.
os.makedirs(f"{work}/converted")
proc = h.mpirun(args, 1, ["weights", "convert", "--format", "safetensors", files["llmc_fp32"][0],
                          f"{work}/converted/model.safetensors"])
h.check(proc.returncode == 0 and same_bytes(f"{work}/converted/model.safetensors", files["safetensors_f32"][0]),
        f"weights convert llm.c -> safetensors gives the Hugging Face file byte for byte\n{proc.stderr}")
proc = h.mpirun(args, 1, ["weights", "convert", "--format", "llmc", "--dtype", "bf16", "--vocab-pad-to", "128",
                          f"{work}/converted", f"{work}/converted.bin"])
h.check(proc.returncode == 0 and same_bytes(f"{work}/converted.bin", files["llmc_bf16"][0]),
        f"weights convert safetensors -> llm.c bf16 padded to 128 gives llm.c's file byte for byte\n{proc.stderr}")
proc = h.mpirun(args, 1, ["weights", "inspect", files["safetensors_bf16"][0]])
norm = float(np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in files["safetensors_bf16"][1].values())))
shown = float(proc.stdout.split("L2 norm ")[1].split()[0]) if "L2 norm " in proc.stdout else -1.0
h.check(proc.returncode == 0 and "model: n_layer 2, d_model 64, n_head 4, seq_len 32, vocab 300 (padded 300)" in proc.stdout
        and abs(shown - norm) < 1e-5 * norm,
        f"weights inspect shows the model and the parameters' L2 norm ({shown} against {norm:.6g})\n{proc.stdout}")

# A checkpoint to resume takes precedence over model.init_from (a requeued job goes on).
proc = run("resume over init_from", 1, f"{work}/import_llmc_fp32.toml",
           ["--set", "checkpoint.resume=latest", "--set", "run.steps=2"])
h.check("resumed from " in proc.stdout and "is not read: the run goes on from the checkpoint" in proc.stdout
        and "initialised from" not in proc.stdout, "checkpoint.resume = \"latest\" resumes instead of importing again")

# model.from_file filled the deck's model keys from the file, padding included.
check = h.mpirun(args, 1, ["check", f"{work}/import_llmc_fp32.toml"])
h.check(check.returncode == 0 and "| model.n_layer                    | 2 " in check.stdout
        and f"model.from_file ({files['llmc_fp32'][0]})" in check.stdout
        and "| model.vocab_pad_to               | 128 " in check.stdout,
        f"model.from_file: the settings table shows the file's model and where it came from\n{check.stdout[-800:]}")

# ---- a trained checkpoint, exported and imported again: its parameters exactly ----
trained = deck("trained", None, dict(SHAPE, vocab_pad_to=128), steps=4, lr=1e-2, parallel={"strategy": "zero1"})
run("training", 2, trained, ["--save-params", f"{work}/trained.f32"])
checkpoint = f"{work}/trained/ckpt/ckpt_00000004.h5"
os.makedirs(f"{work}/trained_hf")
for fmt, out in (("llmc", f"{work}/trained.bin"), ("safetensors", f"{work}/trained_hf/model.safetensors")):
    export(checkpoint, fmt, out)
    again = deck(f"again_{fmt}", out, dict(SHAPE, vocab_pad_to=128))
    run(f"init_from the {fmt} export", 1, again, ["--save-params", f"{work}/again_{fmt}.f32"])
    h.check(same_bytes(f"{work}/again_{fmt}.f32", f"{work}/trained.f32"),
            f"init_from the {fmt} export of a trained checkpoint: its parameters bit for bit")


# ---- bad files: `check` names the file and the problem, on every rank count ----
def refused(label, init_from, model, expected, ranks=2):
    proc = h.mpirun(args, ranks, ["check", deck(label, init_from, model)])
    h.check(proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("error:") == 1,
            f"{label}: refused with one message containing {expected!r}\n{proc.stderr[-600:]}")


refused("other_shape", files["llmc_fp32"][0], dict(SHAPE, n_layer=3),
        f"model.init_from: model.n_layer = 2 in {files['llmc_fp32'][0]}, 3 in the deck (set model.from_file = true")
refused("from_file_disagrees", files["llmc_fp32"][0], {"from_file": True, "n_head": 8},
        f"model.init_from: model.n_head = 4 in {files['llmc_fp32'][0]}, 8 in the deck")
truncated = f"{work}/truncated.bin"
with open(files["llmc_fp32"][0], "rb") as f:
    open(truncated, "wb").write(f.read()[:-1000])
refused("truncated", truncated, {"from_file": True}, f"{truncated}: truncated")
bad_header = f"{work}/bad_header.bin"
with open(files["llmc_fp32"][0], "rb") as f:
    data = bytearray(f.read())
data[4:8] = struct.pack("<i", 2)
open(bad_header, "wb").write(bytes(data))
refused("bad_header", bad_header, {"from_file": True}, f"{bad_header}: bad header: llm.c model file version 2")
os.makedirs(f"{work}/missing")
write_safetensors(f"{work}/missing/model.safetensors",
                  {"transformer." + k: v for k, v in hf.items() if k != "h.1.attn.c_proj.bias"}, "F32")
refused("missing_tensor", f"{work}/missing", {"from_file": True},
        f"{work}/missing/model.safetensors: missing tensor transformer.h.1.attn.c_proj.bias")
refused("no_file", f"{work}/nowhere.bin", {"from_file": True}, f"{work}/nowhere.bin: no such file", ranks=1)
shutil.rmtree(work)
print("passed")
