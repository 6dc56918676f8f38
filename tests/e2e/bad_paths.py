"""Every path the program reads (deck, data.path, checkpoint.resume, a checkpoint given to `ckpt
inspect` or `ckpt export`, --topology) and the checkpoint directory it writes, each given as
something it cannot use: missing, a directory, unreadable, empty, of the wrong format, and the
look-alikes a user has at hand (the `latest` pointer, an exported parameters file, a run
directory). Each case must exit with code 2 within a minute, print one message that names the path
and the problem (and what to pass instead where there is an obvious answer), and nothing that
looks like a crash; a good checkpoint next to the bad paths must come out of all of it unchanged.

Unreadable files: root reads a file whatever its mode, so when this test runs as root those cases
run the executable as the user nobody (setpriv), on one rank, where chmod 000 does stop a read.
The table of cases, messages and exit codes is printed at the end (docs/reliability.md)."""
import hashlib
import os
import shutil
import subprocess
import time

import harness as h

args = h.parse_args()
work = h.tmpdir()
os.chmod(work, 0o755)  # the unreadable cases run as nobody, who must reach the other files
corpus = h.corpus(args)
as_root = os.geteuid() == 0
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
if as_root:
    h.check(shutil.which("setpriv") is not None, "setpriv is there to run the unreadable cases as nobody "
                                                 "(root reads any file whatever its mode)")
    print("note: running as root: the unreadable-file cases run as the user nobody, on one rank")

deck = h.small_deck(work, "base", corpus, run={"steps": 2}, checkpoint={"every": 2, "dir": f"{work}/good_ckpt"})
proc = h.mpirun(args, args.ranks, ["run", deck])
h.check(proc.returncode == 0, f"the base deck trains and checkpoints\n{proc.stderr[-800:]}")
good_dir = os.path.join(work, "good_ckpt")
good = os.path.join(good_dir, "ckpt_00000002.h5")
exported = os.path.join(work, "exported.h5")
proc = h.mpirun(args, 1, ["ckpt", "export", good, exported])
h.check(proc.returncode == 0, "a checkpoint is exported (the look-alike of a checkpoint)")


def digest_of(directory):
    return {name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(directory))}


good_digest = digest_of(good_dir)


def make(name, content=None, mode=None):
    path = os.path.join(work, name)
    if content is None:
        os.makedirs(path, exist_ok=True)
    else:
        with open(path, "wb") as f:
            f.write(content)
    if mode is not None:
        os.chmod(path, mode)
    return path


missing = os.path.join(work, "no_such_file")
directory = make("a_directory")
empty = make("empty", b"")
unreadable = make("unreadable", b"[run]\nsteps = 1\n", 0o000)
text = make("text.txt", b"Just some text, not what was asked for.\n" * 40)
junk = make("junk.bin", bytes(range(256)) * 8)
truncated_tokens = make("truncated.bin", (20240520).to_bytes(4, "little") + (1).to_bytes(4, "little") +
                        (1000).to_bytes(4, "little") + bytes(1012) + bytes(500))
run_dir = os.path.join(work, "base")  # the base run's directory: its checkpoints are elsewhere
full_run_dir = os.path.join(work, "full_run")  # a run directory with the default checkpoints/ inside
shutil.copytree(good_dir, os.path.join(full_run_dir, "checkpoints"))
latest = os.path.join(good_dir, "latest")
file_as_dir = make("not_a_dir", b"x")
read_only_dir = make("read_only_dir", None, 0o555)
out = os.path.join(work, "out.h5")


def run_with(key, value):
    return ["run", deck, "--set", f"{key}={value}"]


# (path kind, problem, command line, the path the message must name, what it must also say)
cases = [
    ("deck", "missing", ["run", missing], missing, "No such file or directory"),
    ("deck", "directory", ["run", directory], directory, "is a directory, not a file"),
    ("deck", "unreadable", ["run", unreadable], unreadable, "Permission denied"),
    ("deck", "empty", ["run", empty], empty, "is empty"),
    ("deck", "wrong format", ["run", junk], junk, "malformed TOML"),
    ("data.path", "missing", run_with("data.path", missing), missing, "No such file or directory"),
    ("data.path", "directory", run_with("data.path", directory), directory, "is a directory, not a file"),
    ("data.path", "unreadable", run_with("data.path", unreadable), unreadable, "Permission denied"),
    ("data.path", "empty", run_with("data.path", empty), empty, "is empty"),
    ("data.path", "not a regular file", run_with("data.path", "/dev/null"), "/dev/null",
     "is not a regular file (a character device)"),
    ("data.path", "wrong format", run_with("data.path", text) + ["--set", "data.format=tokens"], text,
     "is not a token file"),
    ("data.path", "wrong format", run_with("data.path", truncated_tokens), truncated_tokens,
     "declares 1000 tokens"),
    ("checkpoint.resume", "missing", run_with("checkpoint.resume", missing), missing, "no such file"),
    ("checkpoint.resume", "directory", run_with("checkpoint.resume", directory), directory,
     "is a directory, not a checkpoint file: it holds no checkpoint"),
    ("checkpoint.resume", "unreadable", run_with("checkpoint.resume", unreadable), unreadable, "Permission denied"),
    ("checkpoint.resume", "empty", run_with("checkpoint.resume", empty), empty, "is empty, not a checkpoint"),
    ("checkpoint.resume", "wrong format", run_with("checkpoint.resume", text), text, "is not an HDF5 file"),
    ("checkpoint.resume", "checkpoint directory", run_with("checkpoint.resume", good_dir), good_dir,
     f"pass one of its checkpoints, e.g. {good} (the newest), or set checkpoint.resume = \"latest\" with "
     f"checkpoint.dir = \"{good_dir}\""),
    ("checkpoint.resume", "the latest pointer", run_with("checkpoint.resume", latest), latest,
     f"is the pointer to the newest checkpoint, not a checkpoint: it names ckpt_00000002.h5; pass {good}"),
    ("checkpoint.resume", "an exported file", run_with("checkpoint.resume", exported), exported,
     f"written by `shardtrain ckpt export` (step 2), not a checkpoint"),
    ("ckpt inspect", "missing", ["ckpt", "inspect", missing], missing, "no such file"),
    ("ckpt inspect", "directory", ["ckpt", "inspect", directory], directory, "a directory without checkpoints"),
    ("ckpt inspect", "unreadable", ["ckpt", "inspect", unreadable], unreadable, "Permission denied"),
    ("ckpt inspect", "empty", ["ckpt", "inspect", empty], empty, "is empty, not a checkpoint"),
    ("ckpt inspect", "wrong format", ["ckpt", "inspect", junk], junk, "is not an HDF5 file"),
    ("ckpt inspect", "an exported file", ["ckpt", "inspect", exported], exported,
     f"pass the checkpoint it was exported from, {good}"),
    ("ckpt export", "wrong format", ["ckpt", "export", text, out], text, "is not an HDF5 file"),
    ("--topology", "missing", ["topo", "--topology", missing], missing, "No such file or directory"),
    ("--topology", "directory", ["topo", "--topology", directory], directory, "is a directory, not a file"),
    ("--topology", "unreadable", ["topo", "--topology", unreadable], unreadable, "Permission denied"),
    ("--topology", "empty", ["topo", "--topology", empty], empty, "is empty"),
    ("--topology", "wrong format", ["plan", deck, "--topology", text], text,
     "no header row with GPU columns (GPU0 ...): expected the output of `nvidia-smi topo -m`"),
    ("checkpoint.dir", "a file", run_with("checkpoint.dir", file_as_dir), file_as_dir, "Not a directory"),
    ("checkpoint.dir", "under a file", run_with("checkpoint.dir", file_as_dir + "/ckpt"), file_as_dir + "/ckpt",
     "Not a directory"),
    ("checkpoint.dir", "unwritable", run_with("checkpoint.dir", read_only_dir), read_only_dir,
     "cannot write in checkpoint directory"),
]

CRASH = ("Segmentation", "core dumped", "terminate called", "Aborted", "Traceback", "MPI_ABORT", "signal ")
rows = []
for kind, problem, argv, path, says in cases:
    label = f"{kind}, {problem}"
    as_nobody = as_root and (problem == "unreadable" or path == read_only_dir)
    started = time.time()
    if as_nobody:  # one rank, without mpirun: nobody cannot reach root's mpirun session
        try:
            proc = subprocess.run(NOBODY + [args.exe] + argv, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            h.fail(f"{label}: no answer within 60 s (a hang?)")
    else:
        proc = h.mpirun(args, args.ranks, argv, timeout=60)
    seconds = time.time() - started
    lines = proc.stderr.splitlines()
    errors = [i for i, line in enumerate(lines) if "error:" in line]
    message = ""
    if errors:  # the message's lines, up to mpirun's own report
        first = lines[errors[0]].split("error: ", 1)[1]
        rest = [line for line in lines[errors[0] + 1:]]
        rest = rest[:next((i for i, line in enumerate(rest) if line.startswith("-----")), len(rest))]
        message = "\n".join([first] + rest).strip()
    h.check(proc.returncode == 2, f"{label}: exit code 2 (got {proc.returncode})" +
            ("" if proc.returncode == 2 else "\n" + proc.stderr[-1200:]))
    h.check(len(errors) == 1, f"{label}: one message, not one per rank ({len(errors)})")
    named = path in message and says in message
    h.check(named, f"{label}: the message names the path and says {says!r}" + ("" if named else "\n" + message))
    h.check(not any(c in proc.stderr + proc.stdout for c in CRASH), f"{label}: nothing that looks like a crash")
    rows.append((kind, problem, 1 if as_nobody else args.ranks, proc.returncode, seconds,
                 message.split("\n")[0].replace(work, "DIR") + (" ..." if "\n" in message else "")))

h.check(digest_of(good_dir) == good_digest, f"the good checkpoint and `latest` are unchanged after {len(cases)} cases")
proc = h.mpirun(args, 1, ["ckpt", "inspect", good])
h.check(proc.returncode == 0 and proc.stdout.count("Fletcher32 verified") == 3, "and it still verifies")
h.check(not os.path.exists(out), "no export file was written from a bad input")

# What a user passes for "this checkpoint" is taken and said: a checkpoint directory, a run
# directory (its checkpoints/, or the checkpoint.dir its resolved.toml names), the `latest` pointer.
for given in (good_dir, run_dir, full_run_dir, latest):
    proc = h.mpirun(args, 1, ["ckpt", "inspect", given])
    h.check(proc.returncode == 0 and "step 2" in proc.stdout and proc.stdout.count("Fletcher32 verified") == 3,
            f"ckpt inspect {given}: the newest checkpoint it stands for, verified\n{proc.stdout[-600:]}{proc.stderr[-600:]}")

kinds = sorted({r[0] for r in rows})
print(f"\n{len(rows)} cases over {len(kinds)} kinds of path ({', '.join(kinds)}); ranks: {args.ranks} "
      f"(1 for the cases run as nobody); slowest {max(r[4] for r in rows):.1f} s")
print("| path | given | exit | message (DIR = the test's directory) |\n|---|---|---|---|")
for kind, problem, ranks, code, seconds, message in rows:
    print(f"| {kind} | {problem} | {code} | {message.replace('|', '/')} |")
print("passed")
