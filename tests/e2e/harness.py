"""Shared helpers for the end-to-end tests: run the real executable under mpirun on decks."""
import argparse
import array
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def parse_args(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--exe", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--ranks", type=int, default=1)
    for name, kw in (extra or {}).items():
        p.add_argument(name, **kw)
    return p.parse_args()


def corpus(args):
    path = os.path.join(args.source, "data", "fortunes.txt")
    if not os.path.exists(path):
        fail(f"{path} is missing: run tools/setup.sh first (it prepares the training text)")
    return path


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def require_slurm(command="srun"):
    """Skips the test (exit 77, saying why) unless Slurm's `command` is installed and a node is idle."""
    if not shutil.which(command):
        print("SKIP: Slurm is not installed (tools/setup.sh installs it and, as root, starts a local cluster)")
        raise SystemExit(SKIP)
    if subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip() not in ("idle", "mixed"):
        print("SKIP: no idle Slurm node (start one with tools/slurm_local.sh as root)")
        raise SystemExit(SKIP)


def check(condition, message):
    if not condition:
        fail(message)
    print("ok:", message)


def mpirun(args, ranks, argv, timeout=300, cwd=None):
    cmd = [args.mpiexec, "-n", str(ranks)]
    if ranks > (os.cpu_count() or 1):
        cmd += ["--bind-to", "none"]
    cmd += [args.exe] + argv
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        fail(f"timed out after {timeout}s (a hang?): {' '.join(cmd)}")
    return proc


def mpirun_on_node(args, ranks, argv, node_mem_gb, timeout=300):
    """mpirun on a node of node_mem_gb GiB (SHARDTRAIN_NODE_MEM_GB: one node's memory, shared by
    its ranks), the environment restored after."""
    saved = os.environ.get("SHARDTRAIN_NODE_MEM_GB")
    os.environ["SHARDTRAIN_NODE_MEM_GB"] = str(node_mem_gb)
    try:
        return mpirun(args, ranks, argv, timeout=timeout)
    finally:
        if saved is None:
            del os.environ["SHARDTRAIN_NODE_MEM_GB"]
        else:
            os.environ["SHARDTRAIN_NODE_MEM_GB"] = saved


def write_deck(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def metrics(run_dir):
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rows.append(json.loads(line))
    return rows


def train(args, ranks, deck, run_dir, label, extra=(), timeout=300):
    """Runs `deck` on `ranks` ranks to completion (a failure fails the test), saving the final
    parameters; returns the training losses and gradient norms per step, the validation losses,
    the final fp32 parameters (array), every metrics row and the standard output."""
    params = run_dir + ".f32"
    proc = mpirun(args, ranks, ["run", deck, "--save-params", params] + list(extra), timeout=timeout)
    return train_result(proc, run_dir, params, label)


def train_result(proc, run_dir, params, label):
    """What train() returns, from a finished `shardtrain run ... --save-params params`."""
    check(proc.returncode == 0, f"{label}: exits 0\n{proc.stdout[-800:]}\n{proc.stderr[-1500:]}")
    rows = metrics(run_dir)
    train_rows = [r for r in rows if r["kind"] == "train"]
    final = array.array("f")
    with open(params, "rb") as f:
        final.frombytes(f.read())
    return {"loss": [r["loss"] for r in train_rows], "norm": [r["grad_norm"] for r in train_rows],
            "val": [r["val_loss"] for r in rows if r["kind"] == "val"], "params": final, "rows": rows,
            "stdout": proc.stdout}


def flip_checkpoint_byte(path, dataset):
    """Damages a checkpoint as a bad disk would: one bit of the first chunk of `dataset` flipped,
    found with Debian's h5py (the checkpoint's checksums then disagree with the data)."""
    code = f"import h5py; f = h5py.File({path!r}, 'r'); print(f[{dataset!r}].id.get_chunk_info(0).byte_offset)"
    proc = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"h5py could not find {dataset} in {path}: {proc.stderr}")
    offset = int(proc.stdout)
    with open(path, "r+b") as f:
        f.seek(offset + 100)
        byte = f.read(1)
        f.seek(offset + 100)
        f.write(bytes([byte[0] ^ 0x10]))


def tmpdir():
    return tempfile.mkdtemp(prefix="st_e2e_")


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


def small_deck(work, label, corpus, **sections):
    """Writes work/<label>.toml: the small GPT the end-to-end tests train (2 blocks of d_model
    32, sequences of 32 bytes, 12 per step, 8 steps), its run directory work/<label>. Each keyword
    is a deck section whose keys override or add to these; returns the deck's path."""
    deck = {
        "run": {"steps": 8, "eval_every": 0, "sample_tokens": 0, "out_dir": os.path.join(work, label)},
        "model": {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 32},
        "data": {"path": corpus, "global_batch": 12},
        "optimizer": {"lr": 3e-3, "warmup_steps": 2},
    }
    for section, keys in sections.items():
        deck.setdefault(section, {}).update(keys)
    text = "".join(f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())
                   for name, keys in deck.items())
    return write_deck(work, f"{label}.toml", text)


def stacks(exe):
    """Every thread's backtrace in each running process of `exe` (gdb), for the log of a test
    that caught a hang; "" where gdb is missing."""
    import shutil
    if not shutil.which("gdb"):
        return ""
    pids = subprocess.run(["pgrep", "-f", exe], capture_output=True, text=True).stdout.split()
    out = []
    for pid in pids:
        trace = subprocess.run(["gdb", "-p", pid, "-batch", "-ex", "thread apply all bt"], capture_output=True,
                               text=True, timeout=60)
        out.append(f"--- process {pid}:\n{trace.stdout[-6000:]}")
    return "\n".join(out)


def close(a, b, rel):
    """Two series of one length, each pair within rel of the larger."""
    return len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


def compare_runs(label, got, ref, rel=1e-5, params_rel=None, first_step=0, val=False):
    """A run (train()'s result) against the reference run from step first_step on: losses and
    gradient norms within rel, final parameters (the whole model) within params_rel (rel when not
    given) of the reference's largest; with val, the validation losses within rel too."""
    params_rel = rel if params_rel is None else params_rel
    check(close(got["loss"], ref["loss"][first_step:], rel),
          f"{label}: losses equal the one-rank run within {rel}\n{got['loss']}\n{ref['loss'][first_step:]}")
    check(close(got["norm"], ref["norm"][first_step:], rel), f"{label}: gradient norms equal within {rel}")
    if val:
        check(close(got["val"], ref["val"][len(ref["val"]) - len(got["val"]):], rel),
              f"{label}: validation losses equal within {rel}")
    scale = max(abs(x) for x in ref["params"])
    worst = max(abs(x - y) for x, y in zip(got["params"], ref["params"])) / scale
    check(len(got["params"]) == len(ref["params"]) and worst <= params_rel,
          f"{label}: final parameters (the whole model) equal within {params_rel} (worst {worst:.2e})")
