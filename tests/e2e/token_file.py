"""Training from a pre-tokenized file (llm.c format) with a vocabulary wider than bytes and a
padded embedding table."""
import os
import struct

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
# Map each byte b to token 1000 + b: ids up to 1255, vocabulary 1256 padded to 1280.
data = open(corpus, "rb").read()[:400000]
tokens_path = os.path.join(work, "tokens.bin")
with open(tokens_path, "wb") as f:
    header = [20240520, 1, len(data)] + [0] * 253
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack(f"<{len(data)}H", *[1000 + b for b in data]))
deck = h.write_deck(work, "tok.toml", f"""
[run]
steps = 60
eval_every = 30
eval_batches = 2
sample_tokens = 10
out_dir = "{work}/run"
[model]
n_layer = 1
d_model = 32
n_head = 2
seq_len = 32
vocab_size = 1256
vocab_pad_to = 64
[data]
path = "{tokens_path}"
global_batch = 8
[optimizer]
lr = 1e-2
""")
proc = h.mpirun(args, 2, ["run", deck], timeout=300)
h.check(proc.returncode == 0, f"exits 0\n{proc.stderr[-1500:]}")
h.check("| padded vocabulary" in proc.stdout and "1280" in proc.stdout, "the vocabulary is padded to 1280")
h.check(f"{tokens_path}: {len(data)} tokens" in proc.stdout, "the token file is read as tokens")
rows = h.metrics(os.path.join(work, "run"))
train = [r["loss"] for r in rows if r["kind"] == "train"]
h.check(abs(train[0] - 7.1357) < 0.1, f"initial loss {train[0]:.3f} is close to ln(1256) = 7.136")
h.check(train[-1] < train[0] - 2.0, f"the loss falls ({train[0]:.3f} -> {train[-1]:.3f})")
sample = [r for r in rows if r["kind"] == "sample"][0]["text"].split()
h.check(len(sample) == 11 and all(0 <= int(t) < 1256 for t in sample), "samples are token ids of the vocabulary")

# A vocabulary too small for the file is refused with the numbers.
proc = h.mpirun(args, 2, ["run", deck, "--set", "model.vocab_size=1000"], timeout=60)
h.check(proc.returncode != 0 and f"holds token id {1000 + max(data)} but model.vocab_size = 1000" in proc.stderr,
        "a token id beyond the vocabulary is refused")
print("passed")
