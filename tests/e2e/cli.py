"""The command line: help, version, the default deck's check, the deck reference."""
import os
import subprocess

import harness as h

args = h.parse_args()
h.corpus(args)


def run(argv):
    return subprocess.run([args.exe] + argv, capture_output=True, text=True, timeout=60, cwd=args.source)


p = run(["--help"])
h.check(p.returncode == 0 and "run" in p.stdout and "check" in p.stdout and "deck-doc" in p.stdout,
        "--help lists the subcommands")
p = run(["--version"])
h.check(p.returncode == 0 and p.stdout.startswith("shardtrain 0.") and "(commit " in p.stdout,
        f"--version prints the version and the commit: {p.stdout!r}")
for line in ("compiler: ", "MPI: Open MPI", "HDF5 1.", "BLAS: OpenBLAS", "GPU: "):
    h.check(line in p.stdout, f"--version names the build's {line.strip(': ')}")
p = run([])
h.check(p.returncode == 2, f"no subcommand is a usage error: exit 2 (got {p.returncode})")
p = run(["frobnicate"])
h.check(p.returncode == 2 and "unknown subcommand 'frobnicate'; the subcommands are run, check" in p.stderr,
        f"an unknown subcommand is named, with the list, exit 2 (got {p.returncode}: {p.stderr.strip()!r})")
p = run(["run", "--no-such-option", "x"])
h.check(p.returncode == 2, f"an unknown option is a usage error: exit 2 (got {p.returncode})")

p = run(["check", "inputs/default.toml"])
h.check(p.returncode == 0 and "deck OK" in p.stdout, "the default deck checks out")
for key in ("run.steps", "model.n_layer", "data.path", "optimizer.lr", "parallel.strategy", "checkpoint.every"):
    h.check(f"| {key} " in p.stdout, f"the settings table shows {key}")
import re  # noqa: E402
steps_line = next(i for i, line in enumerate(open(os.path.join(args.source, "inputs/default.toml")), 1)
                  if line.startswith("steps"))
h.check(re.search(r"\| run\.steps +\| 900 +\| inputs/default\.toml:%d\n" % steps_line, p.stdout) is not None,
        "the table says a deck value came from its file and line")
h.check(re.search(r"\| run\.threads +\| 0 +\| default\n", p.stdout) is not None,
        "the table says an unset key took its default")
p2 = run(["check", "inputs/default.toml", "--set", "run.seed=7"])
h.check(re.search(r"\| run\.seed +\| 7 +\| --set\n", p2.stdout) is not None, "the table says a value came from --set")

p = run(["check", "inputs/default.toml", "--ranks", "5"])
h.check(p.returncode != 0 and "cannot be split over 5 ranks" in p.stderr,
        "check --ranks plans for another world size and refuses a batch that does not split")

p = run(["deck-doc"])
with open(os.path.join(args.source, "docs", "deck.md")) as f:
    h.check(p.stdout == f.read(), "deck-doc prints docs/deck.md")
print("passed")
