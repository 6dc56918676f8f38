"""Ctrl-C (SIGINT) or SIGTERM to a run started with tools/launch.sh stops it the documented way:
every rank finishes its step, a complete checkpoint is written, and the exit code is 4.

mpirun itself does not allow this (Open MPI 4.1 kills the ranks within two seconds of a SIGINT or
SIGTERM and exits 1 whatever they did): tools/launch.sh keeps mpirun out of the terminal's
process group and passes both signals on to it as SIGUSR1, which mpirun forwards. SIGINT is sent
to the launch script's whole process group, as a terminal's Ctrl-C is; SIGTERM to the script
alone, as `kill` or a batch system sends it. A run started without a launcher (one rank, the
executable alone) takes SIGINT itself the same way.
"""
import os
import signal
import subprocess
import time

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
launch = os.path.join(args.source, "tools", "launch.sh")


def deck(label):
    return h.small_deck(work, label, corpus, run={"steps": 5000, "log_every": 1}, model={"d_model": 64, "seq_len": 64},
                        data={"global_batch": 8}, parallel={"strategy": "zero2"},
                        checkpoint={"dir": f"{work}/{label}/ckpt"})


def train_steps(label):
    path = os.path.join(work, label, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in f if '"kind":"train"' in line]


def stop_and_check(label, command, send, signal_name, says):
    """Starts `command` in a session of its own, waits for 5 steps, calls send(process), then
    checks the exit code, the message, `latest` and the checkpoint itself."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, SHARDTRAIN=args.exe))
    deadline = time.time() + 120
    while len(train_steps(label)) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    h.check(proc.poll() is None, f"{label}: the run is going when {signal_name} is sent")
    send(proc)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        h.fail(f"{label}: still running 120 s after {signal_name} (a hang?)")
    h.check(proc.returncode == 4, f"{label}: {signal_name} ends the run with exit code 4 (got {proc.returncode})\n"
                                  f"{out[-600:]}\n{err[-1200:]}")
    lines = [line for line in out.splitlines() if line.startswith("stopped by ")]
    h.check(len(lines) == 1 and says in lines[0] and "with a checkpoint" in lines[0],
            f"{label}: the log says it stopped by {says} with a checkpoint ({lines})")
    stopped_at = int(lines[0].split(" after step ")[1].split()[0])
    h.check(stopped_at == len(train_steps(label)) and stopped_at < 5000,
            f"{label}: it stopped after the last step it logged (step {stopped_at})")
    ckpt_dir = os.path.join(work, label, "ckpt")
    with open(os.path.join(ckpt_dir, "latest")) as f:
        name = f.read().strip()
    h.check(name == f"ckpt_{stopped_at:08d}.h5", f"{label}: latest names the checkpoint of step {stopped_at} ({name})")
    inspect = h.mpirun(args, 1, ["ckpt", "inspect", os.path.join(ckpt_dir, name)])
    h.check(inspect.returncode == 0 and f"step {stopped_at}," in inspect.stdout
            and inspect.stdout.count("Fletcher32 verified") == 3,
            f"{label}: that checkpoint is complete: every checksum verifies\n{inspect.stdout[-400:]}{inspect.stderr[-400:]}")
    h.check(not [n for n in os.listdir(ckpt_dir) if n.endswith(".tmp")], f"{label}: no half-written file is left")
    return err


err = stop_and_check("ctrl_c", [launch, "-n", "2", "run", deck("ctrl_c")],
                     lambda p: os.killpg(p.pid, signal.SIGINT), "SIGINT",
                     "SIGINT (passed on by tools/launch.sh as SIGUSR1)")
h.check("launch.sh: SIGINT: asking the ranks to checkpoint and stop" in err, "launch.sh says what it did with the Ctrl-C")
err = stop_and_check("sigterm", [launch, "-n", "2", "run", deck("sigterm")],
                     lambda p: p.send_signal(signal.SIGTERM), "SIGTERM",
                     "SIGTERM (passed on by tools/launch.sh as SIGUSR1)")
h.check("launch.sh: SIGTERM: asking the ranks to checkpoint and stop" in err, "launch.sh says what it did with SIGTERM")
stop_and_check("alone", [args.exe, "run", deck("alone")], lambda p: os.killpg(p.pid, signal.SIGINT), "SIGINT",
               "SIGINT")

# An error under tools/launch.sh is the program's one line, without Open MPI's abort banner.
bad = h.small_deck(work, "bad", corpus, run={"steps": 0})
proc = subprocess.run([launch, "-n", "2", "run", bad], capture_output=True, text=True, env=dict(os.environ, SHARDTRAIN=args.exe))
lines = [line for line in proc.stderr.splitlines() if line.strip()]
h.check(proc.returncode == 2 and lines[0].startswith("shardtrain: error: deck") and bad in lines[0]
        and len(lines) == 2 and "run.steps = 0: out of range" in lines[1],
        f"a deck error under launch.sh is the program's message alone, without Open MPI's banner ({lines})")
print("passed")
