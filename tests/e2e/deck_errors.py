"""Every kind of deck mistake prints the expected message, exits non-zero, and never hangs,
on one rank and on several."""
import os

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
     ["cannot open data file '/nonexistent/corpus.txt': No such file or directory"]),
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
