"""Byte-level samples are valid UTF-8 on the terminal and in train.log: an untrained model
sampled at a high temperature writes bytes of every kind (stray continuation bytes, controls,
escape characters); they must come out as \\xNN, valid UTF-8 sequences as themselves, and the
metrics file's sample must hold the same text."""
import json
import os
import re
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
deck = h.small_deck(work, "sample", h.corpus(args), run={"steps": 2, "sample_tokens": 2000, "sample_temperature": 4.0})
proc = subprocess.run([args.mpiexec, "-n", "2", args.exe, "run", deck], capture_output=True, timeout=300)
h.check(proc.returncode == 0, "the run exits 0\n" + proc.stderr[-800:].decode("utf-8", "replace"))


def strict(name, data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        h.fail(f"{name} is not valid UTF-8: {e}")


stdout = strict("the standard output", proc.stdout)
with open(os.path.join(work, "sample", "train.log"), "rb") as f:
    log = strict("train.log", f.read())
h.check(True, "the standard output and train.log are valid UTF-8")
printed = stdout.split("---- sample after step 2 ----\n")[1].split("\n----\n")[0]
controls = [c for c in printed if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f]
h.check(not controls, f"no control character but newline and tab reaches the terminal ({controls[:5]})")
escapes = re.findall(r"\\x([0-9a-f]{2})", printed)
h.check(len(escapes) > 50, f"the untrained model's stray bytes are shown as \\xNN ({len(escapes)} of them)")
# What the escapes stand for, put back, with the text between them, are the sampled bytes: the
# count of bytes equals the prompt (one newline) plus the tokens sampled.
raw = bytearray()
for piece in re.split(r"(\\x[0-9a-f]{2})", printed):
    raw += bytes([int(piece[2:], 16)]) if re.fullmatch(r"\\x[0-9a-f]{2}", piece) else piece.encode("utf-8")
h.check(len(raw) == 2001, f"nothing is lost: {len(raw)} bytes = the prompt's 1 + 2000 sampled")
h.check(printed in log, "train.log holds the same sample")
samples = [r for r in h.metrics(os.path.join(work, "sample")) if r["kind"] == "sample"]
h.check(len(samples) == 1 and samples[0]["text"] == printed, "metrics.jsonl's sample is the same text")
print("passed")
