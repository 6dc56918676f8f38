"""Hugging Face Llama weights in and out, from the command line:
- small LlamaForCausalLM directories written here (numpy: config.json, safetensors, an index for
  shards), bf16 and fp32, one file and two shards: `weights convert --format safetensors` gives
  every input tensor back byte for byte, one file or sharded (--max-shard-size), with a
  config.json transformers reads (LlamaForCausalLM, the same keys);
- a Llama trained by shardtrain, exported with `ckpt export --format safetensors` (one file and
  shards): eval of the export (model.init_from with model.from_file) equals eval of the
  checkpoint, and a run started from it with model.init_from logs the same first loss; with
  PyTorch importable, an independent Llama on the exported tensors gives shardtrain's logits
  within 1e-5 relative;
- rope_scaling "llama3" (Llama 3.1's): a config.json with it is read and written back with the
  same rope_scaling; a Llama trained here with model.rope_scaling = "llama3" records it in its
  checkpoint (ckpt inspect), exports it (read back with the same scaling), and eval of the export
  equals eval of the checkpoint (tests/e2e/torch_llama.py checks the scaled model's logits);
- refused with the file and the key named: attention_bias, rope_scaling "yarn", a "llama3" scaling
  without low_freq_factor, a head_dim that is not hidden_size / num_attention_heads, a bias tensor
  in the file; llm.c export of a Llama."""
import json
import os
import struct

import numpy as np

import harness as h

args = h.parse_args({"--logits": {"required": True}})
work = h.tmpdir()
corpus = h.corpus(args)
rng = np.random.default_rng(5)

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 48,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "rms_norm_eps": 1e-5,
          "rope_theta": 500000.0, "vocab_size": 256, "tie_word_embeddings": False, "torch_dtype": "float32",
          "max_position_embeddings": 64, "hidden_act": "silu", "rope_scaling": None}


def hf_shapes(c):
    C, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * C // c["num_attention_heads"]
    out = [("model.embed_tokens.weight", [V, C])]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "self_attn.q_proj.weight", [C, C]), (p + "self_attn.k_proj.weight", [kv, C]),
                (p + "self_attn.v_proj.weight", [kv, C]), (p + "self_attn.o_proj.weight", [C, C]),
                (p + "mlp.gate_proj.weight", [F, C]), (p + "mlp.up_proj.weight", [F, C]),
                (p + "mlp.down_proj.weight", [C, F]), (p + "input_layernorm.weight", [C]),
                (p + "post_attention_layernorm.weight", [C])]
    out.append(("model.norm.weight", [C]))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, C]))
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype "F32"/"BF16", shape, raw bytes)."""
    header, offset = {}, 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, raw in tensors.values()))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def read_hf(directory):
    """Every tensor of a Hugging Face directory, one file or shards (and the file names)."""
    single = os.path.join(directory, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single), ["model.safetensors"]
    index = json.load(open(os.path.join(directory, "model.safetensors.index.json")))
    files = sorted(set(index["weight_map"].values()))
    out = {}
    for f in files:
        part = read_safetensors(os.path.join(directory, f))
        misplaced = [name for name in part if index["weight_map"].get(name) != f]
        if misplaced:
            h.fail(f"{directory}: {f} holds {misplaced[:3]}, which the index puts elsewhere")
        out.update(part)
    return out, files


def make_hf_dir(label, dtype, shards, config=None, extra_tensors=()):
    c = dict(CONFIG, **(config or {}))
    c["torch_dtype"] = "bfloat16" if dtype == "BF16" else "float32"
    d = os.path.join(work, label)
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for name, shape in list(hf_shapes(c)) + list(extra_tensors):
        values = (rng.standard_normal(shape) * (0.02 if len(shape) == 2 else 0.1) + (1.0 if len(shape) == 1 else 0))
        values = values.astype(np.float32)
        raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes() if dtype == "BF16" else values.tobytes()
        tensors[name] = (dtype, shape, raw)
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    else:
        names = list(tensors)
        half = len(names) // 2
        weight_map = {}
        for k, part in enumerate((names[:half], names[half:])):
            f = f"model-{k + 1:05d}-of-00002.safetensors"
            write_safetensors(os.path.join(d, f), {n: tensors[n] for n in part})
            weight_map.update({n: f for n in part})
        json.dump({"metadata": {"total_size": sum(len(t[2]) for t in tensors.values())}, "weight_map": weight_map},
                  open(os.path.join(d, "model.safetensors.index.json"), "w"))
    return d, tensors


def run(argv, ranks=1):
    return h.mpirun(args, ranks, argv)


# 1. Import then export: the input tensors byte for byte.
for dtype in ("BF16", "F32"):
    for shards in (1, 2):
        label = f"hf_{dtype.lower()}_{shards}"
        src, tensors = make_hf_dir(label, dtype, shards)
        proc = run(["weights", "inspect", src])
        h.check(proc.returncode == 0 and "Hugging Face Llama safetensors" in proc.stdout and
                "llama, n_layer 2, d_model 32, n_head 4, n_kv_head 2, ffn_dim 48, untied LM head" in proc.stdout,
                f"weights inspect {label} names a Llama\n{proc.stdout}{proc.stderr[-800:]}")
        for out_shards in ("one", "sharded"):
            out_dir = os.path.join(work, f"{label}_out_{out_shards}")
            cmd = ["weights", "convert", src, os.path.join(out_dir, "model.safetensors"), "--format", "safetensors",
                   "--dtype", "bf16" if dtype == "BF16" else "fp32"]
            if out_shards == "sharded":
                cmd += ["--max-shard-size", "8KB"]
            proc = run(cmd)
            h.check(proc.returncode == 0, f"convert {label} ({out_shards}) exits 0\n{proc.stderr[-800:]}")
            got, files = read_hf(out_dir)
            h.check((len(files) == 1) == (out_shards == "one") and (out_shards == "one" or len(files) > 2),
                    f"convert {label} ({out_shards}): files {files}")
            same = set(got) == set(tensors) and all(got[n] == tensors[n] for n in tensors)
            bad = [n for n in tensors if n not in got or got[n] != tensors[n]][:3]
            h.check(same, f"convert {label} ({out_shards}): every input tensor back byte for byte (differ: {bad})")
            config = json.load(open(os.path.join(out_dir, "config.json")))
            keys = ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                    "num_hidden_layers", "rms_norm_eps", "rope_theta", "vocab_size", "tie_word_embeddings",
                    "max_position_embeddings", "torch_dtype"]
            src_config = json.load(open(os.path.join(src, "config.json")))
            h.check(config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama" and
                    all(config[k] == src_config[k] for k in keys) and config["rope_scaling"] is None and
                    config["head_dim"] == 8,
                    f"convert {label} ({out_shards}): config.json has the input's keys\n{config}")

# 1b. Llama 3.1's rope_scaling in and out.
LLAMA31_SCALING = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}
src, tensors = make_hf_dir("hf_llama31", "BF16", 1, {"rope_scaling": LLAMA31_SCALING})
proc = run(["weights", "inspect", src])
h.check(proc.returncode == 0 and "rope_scaling llama3 (factor 8, original context 8192)" in proc.stdout,
        f"weights inspect names Llama 3.1's rope scaling\n{proc.stdout}{proc.stderr[-800:]}")
out_dir = os.path.join(work, "hf_llama31_out")
proc = run(["weights", "convert", src, os.path.join(out_dir, "model.safetensors"), "--format", "safetensors",
            "--dtype", "bf16"])
got, _ = read_hf(out_dir) if proc.returncode == 0 else ({}, [])
h.check(proc.returncode == 0 and got == tensors and
        json.load(open(os.path.join(out_dir, "config.json")))["rope_scaling"] == LLAMA31_SCALING,
        f"convert keeps the tensors and rope_scaling {LLAMA31_SCALING}\n{proc.stderr[-800:]}")

# 2. A Llama trained here, exported, read back.
LLAMA = {"arch": "llama", "n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "ffn_dim": 48,
         "tie_embeddings": False, "rope_theta": 500000.0}
deck = h.small_deck(work, "train", corpus, model=dict(LLAMA), parallel={"device": "cpu"},
                    run={"steps": 6}, checkpoint={"every": 6})
trained = h.train(args, 1, deck, os.path.join(work, "train"), "llama on 1 rank")
ckpt = os.path.join(work, "train", "checkpoints", "latest")
exports = {}
for label, extra in (("one", []), ("sharded", ["--max-shard-size", "20KB"])):
    out = os.path.join(work, f"export_{label}", "model.safetensors")
    proc = run(["ckpt", "export", ckpt, out, "--format", "safetensors"] + extra)
    h.check(proc.returncode == 0 and "Hugging Face Llama safetensors, F32" in proc.stdout,
            f"ckpt export --format safetensors ({label}) exits 0\n{proc.stdout}{proc.stderr[-800:]}")
    exports[label] = os.path.dirname(out)
tensors_one, _ = read_hf(exports["one"])
tensors_sharded, files = read_hf(exports["sharded"])
h.check(len(files) > 1 and tensors_one == tensors_sharded,
        f"the sharded export ({len(files)} files) holds the one-file export's tensors byte for byte")
# Refuse to rewrite without --force, and leave no stale single file beside shards.
proc = run(["ckpt", "export", ckpt, os.path.join(exports["one"], "model.safetensors"), "--format", "safetensors",
            "--max-shard-size", "20KB", "--force"])
h.check(proc.returncode == 0 and not os.path.exists(os.path.join(exports["one"], "model.safetensors")) and
        read_hf(exports["one"])[0] == tensors_one,
        f"re-exported as shards over a one-file export: the single file is replaced\n{proc.stderr[-800:]}")

# eval --data reads every token of a file: a slice of the text keeps it short.
text_slice = os.path.join(work, "slice.txt")
with open(corpus, "rb") as f_in, open(text_slice, "wb") as f_out:
    f_out.write(f_in.read(5000))
reference = run(["eval", os.path.join(work, "train"), "--data", text_slice, "--json"])
h.check(reference.returncode == 0, f"eval of the checkpoint exits 0\n{reference.stderr[-800:]}")
ref_loss = json.loads(reference.stdout)["loss"]
for label, d in exports.items():
    for target in (d, os.path.join(d, "model.safetensors.index.json") if label == "sharded" else d):
        proc = run(["eval", target, "--data", text_slice, "--json",
                    "--set", 'parallel.device="cpu"', "--set", "data.global_batch=12"])
        got = json.loads(proc.stdout)["loss"] if proc.returncode == 0 else None
        h.check(got is not None and abs(got - ref_loss) <= 1e-6 * abs(ref_loss),
                f"eval of the {label} export ({target}): {got} = the checkpoint's {ref_loss}\n{proc.stderr[-800:]}")
# A run started from the export with model.init_from (the shape from the file) starts where the
# checkpoint ended: its first loss equals one resumed-from-weights run of the checkpoint's export.
for label, d in exports.items():
    init_deck = h.small_deck(work, f"init_{label}", corpus, model={"init_from": d, "from_file": True},
                             parallel={"device": "cpu"}, run={"steps": 2})
    res = h.train(args, 1, init_deck, os.path.join(work, f"init_{label}"), f"init_from the {label} export")
    exports[label] = (d, res["loss"])
h.check(exports["one"][1] == exports["sharded"][1],
        f"init_from one file and shards: the same losses {exports['one'][1]} {exports['sharded'][1]}")

# shardtrain's logits on the export (the import model.init_from runs), and PyTorch's.
B, T = 2, 16
tokens = rng.integers(0, 256, size=(B, T)).astype(np.int32)
tokens_path = os.path.join(work, "tokens.i32")
tokens.tofile(tokens_path)
logits_path = os.path.join(work, "logits.f32")
proc = h.subprocess.run([args.logits, exports["sharded"][0], tokens_path, str(B), str(T), logits_path],
                        capture_output=True, text=True)
h.check(proc.returncode == 0, f"gpt2_logits reads the sharded export\n{proc.stdout}{proc.stderr}")
ours = np.fromfile(logits_path, dtype=np.float32).reshape(B, T, 256).astype(np.float64)
try:
    import torch
except ImportError:
    torch = None
if torch is None:
    print("note: PyTorch is not importable: the independent logits check is skipped")
else:
    torch.set_default_dtype(torch.float64)
    w = {n: torch.from_numpy(np.frombuffer(raw, dtype=np.float32).astype(np.float64).reshape(shape))
         for n, (_, shape, raw) in tensors_one.items()}
    C, NH, NKV, F, eps, theta = 32, 4, 2, 48, 1e-5, 500000.0
    hd = C // NH
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def rot(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    x = w["model.embed_tokens.weight"][torch.from_numpy(tokens.astype(np.int64))]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(2):
        p = f"model.layers.{l}."
        a = rms(x, w[p + "input_layernorm.weight"])
        q = (a @ w[p + "self_attn.q_proj.weight"].T).view(B, T, NH, hd).transpose(1, 2)
        k = (a @ w[p + "self_attn.k_proj.weight"].T).view(B, T, NKV, hd).transpose(1, 2)
        v = (a @ w[p + "self_attn.v_proj.weight"].T).view(B, T, NKV, hd).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, dim=-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        x = x + (torch.nn.functional.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
    theirs = (rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T).numpy()
    err = np.abs(theirs - ours).max() / np.abs(theirs).max()
    h.check(err < 1e-5, f"PyTorch's Llama on the exported tensors: shardtrain's logits within 1e-5 ({err:.2e})")

# 2b. Trained with rope_scaling llama3 (an original context of 8 under the deck's 32, so that the
# 8-wide heads have kept, blended and stretched frequencies), exported, read back.
SCALED = dict(LLAMA, rope_scaling="llama3", rope_factor=4.0, rope_original_positions=8)
deck = h.small_deck(work, "scaled", corpus, model=SCALED, parallel={"device": "cpu"}, run={"steps": 6},
                    checkpoint={"every": 6})
h.train(args, 2, deck, os.path.join(work, "scaled"), "llama with rope_scaling llama3 on 2 ranks")
scaled_ckpt = os.path.join(work, "scaled", "checkpoints", "latest")
proc = run(["ckpt", "inspect", scaled_ckpt])
h.check(proc.returncode == 0 and "rope_scaling llama3 (factor 4, original context 8)" in proc.stdout,
        f"ckpt inspect shows the checkpoint's rope scaling\n{proc.stdout}{proc.stderr[-800:]}")
scaled_export = os.path.join(work, "scaled_export")
proc = run(["ckpt", "export", scaled_ckpt, os.path.join(scaled_export, "model.safetensors"), "--format",
            "safetensors"])
config = json.load(open(os.path.join(scaled_export, "config.json"))) if proc.returncode == 0 else {}
h.check(config.get("rope_scaling") == {"factor": 4.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8, "rope_type": "llama3"},
        f"the export's config.json has the run's rope_scaling: {config.get('rope_scaling')}\n{proc.stderr[-800:]}")


def eval_loss(target, *extra):
    proc = run(["eval", target, "--data", text_slice, "--json", "--set", 'parallel.device="cpu"',
                "--set", "data.global_batch=12", *extra])
    h.check(proc.returncode == 0, f"eval {target} exits 0\n{proc.stderr[-800:]}")
    return json.loads(proc.stdout)["loss"]


ckpt_loss, export_loss = eval_loss(os.path.join(work, "scaled")), eval_loss(scaled_export)
h.check(abs(export_loss - ckpt_loss) <= 1e-6 * abs(ckpt_loss),
        f"eval of the scaled export {export_loss} = the checkpoint's {ckpt_loss}")
proc = run(["weights", "inspect", scaled_export])
h.check(proc.returncode == 0 and "rope_scaling llama3 (factor 4, original context 8)" in proc.stdout,
        f"weights inspect reads the export's rope scaling back\n{proc.stdout}{proc.stderr[-800:]}")

# 3. Refusals, the file and the key named.
CASES = [
    ("attention biases", {"attention_bias": True}, (), 'config.json: "attention_bias" is true'),
    ("yarn rope scaling", {"rope_scaling": {"rope_type": "yarn", "factor": 8.0}}, (),
     'config.json: "rope_scaling" has type "yarn"'),
    ("llama3 rope scaling without low_freq_factor",
     {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}}, (),
     'config.json: "rope_scaling"."low_freq_factor" is missing'),
    ("a head_dim of its own", {"head_dim": 16}, (), 'config.json: "head_dim" is 16'),
    ("a bias tensor", {}, [("model.layers.0.self_attn.q_proj.bias", [32])],
     "model.safetensors: tensor model.layers.0.self_attn.q_proj.bias is a bias"),
]
for what, config, extra, message in CASES:
    d, _ = make_hf_dir("bad_" + what.replace(" ", "_"), "F32", 1, config, extra)
    proc = run(["weights", "inspect", d])
    h.check(proc.returncode != 0 and message in proc.stderr and d in proc.stderr,
            f"{what}: refused naming {d} and the key\n{proc.stderr[-800:]}")
proc = run(["ckpt", "export", ckpt, os.path.join(work, "llmc", "m.bin"), "--format", "llmc"])
h.check(proc.returncode != 0 and 'model.arch = "llama" (export it with --format safetensors or hdf5)' in proc.stderr
        and not os.path.exists(os.path.join(work, "llmc", "m.bin")),
        f"an llm.c export of a Llama is refused, nothing written\n{proc.stderr[-800:]}")
print("passed")
