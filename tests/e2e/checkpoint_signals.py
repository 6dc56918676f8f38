"""Checkpoints under the events of a batch system.

- SIGUSR1 (what `sbatch --signal` sends; SIGTERM is handled the same) delivered to the job in the
  middle of training: every rank finishes its step, a checkpoint is written, the job exits with
  code 4, and a run resumed from it (checkpoint.resume = "latest") continues the uninterrupted
  run bit for bit. SIGTERM sent to one rank alone stops every rank the same way, also when the
  rank is one stage of a pipeline.
- kill -9 of one rank while a checkpoint is being written: the previous checkpoint stays the
  one `latest` names, passes `ckpt inspect`, and the run resumes from it; the interrupted file is
  never taken for a checkpoint.
"""
import os
import signal
import subprocess
import time

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def deck(label, steps, every, d_model=64):
    # A constant learning rate, so that a run's losses do not depend on its total step count: the
    # signalled runs are given far more steps than they will take, so that they are certainly still
    # training when the signal arrives, however fast this machine is at the moment.
    return h.small_deck(work, label, corpus, run={"steps": steps}, model={"d_model": d_model, "seq_len": 64},
                        data={"global_batch": 8}, optimizer={"lr": 2e-3, "schedule": "constant"},
                        parallel={"strategy": "zero2"}, checkpoint={"dir": f"{work}/{label}/ckpt", "every": every})


def start(path, ranks=2, sets=()):
    cmd = [args.mpiexec, "-n", str(ranks), args.exe, "run", path]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def train_rows(label):
    path = os.path.join(work, label, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    try:
        return [r for r in h.metrics(os.path.join(work, label)) if r["kind"] == "train"]
    except ValueError:  # a line being written
        return []


def wait(proc, timeout=300):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        h.fail("timed out (a hang?)")
    return proc.returncode, out, err


# ---- SIGUSR1 -> checkpoint -> exit 4 -> resume continues the same run ----
UNENDING = 10_000_000  # steps no run here reaches: a signalled run is still training when signalled
MORE = 10              # steps the resumed run trains after the signalled one's checkpoint


def wait_for_rows(label, proc, count):
    deadline = time.time() + 120
    while len(train_rows(label)) < count and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)


signalled = deck("signalled", UNENDING, 0)
proc = start(signalled)
wait_for_rows("signalled", proc, 5)
h.check(proc.poll() is None, "the run is still going when the signal is sent")
proc.send_signal(signal.SIGUSR1)  # mpirun forwards SIGUSR1 to every rank
code, out, err = wait(proc)
h.check(code == 4, f"a SIGUSR1 stops the job with exit code 4 (got {code})\n{err[-800:]}")
stopped_at = max(r["step"] for r in train_rows("signalled"))
h.check(f"stopped by SIGUSR1 after step {stopped_at} with a checkpoint" in out, "the log says where it stopped")
ckpt_dir = os.path.join(work, "signalled", "ckpt")
with open(os.path.join(ckpt_dir, "latest")) as f:
    h.check(f.read().strip() == f"ckpt_{stopped_at:08d}.h5", f"latest names the checkpoint of step {stopped_at}")
before_signal = {r["step"]: r["loss"] for r in train_rows("signalled")}

steps = stopped_at + MORE
code, out, err = wait(start(signalled, sets=["checkpoint.resume=latest", f"run.steps={steps}"]))
h.check(code == 0, f"the resumed run exits 0\n{err[-800:]}")
resumed = {r["step"]: r["loss"] for r in train_rows("signalled") if r["step"] > stopped_at}
h.check(sorted(resumed) == list(range(stopped_at + 1, steps + 1)), "the resumed run continues after that step")

# The uninterrupted run of as many steps, afterwards: the signal and the resume changed nothing.
reference = deck("reference", steps, 0)
code, _, err = wait(start(reference))
h.check(code == 0, f"the uninterrupted run exits 0\n{err[-800:]}")
expected = {r["step"]: r["loss"] for r in train_rows("reference")}
h.check(all(before_signal[s] == expected[s] for s in before_signal), "the signalled run's losses are the reference's")
h.check(all(resumed[s] == expected[s] for s in resumed), "and so are the resumed run's, exactly")

# ---- SIGTERM to one rank only: the ranks agree after the step, all write and stop ----
def signal_one_rank(label, sets=(), what="every rank"):
    """Starts a 2-rank run, sends SIGTERM to one of its ranks: every rank stops after the same step
    with a complete checkpoint, exit code 4."""
    path = deck(label, UNENDING, 0)
    proc = start(path, sets=sets)
    wait_for_rows(label, proc, 3)
    ranks = sorted(int(p) for p in subprocess.run(["pgrep", "-f", path], capture_output=True, text=True).stdout.split()
                   if int(p) != proc.pid)
    h.check(len(ranks) == 2 and proc.poll() is None, f"{label}: both ranks are running (found {ranks})")
    os.kill(ranks[-1], signal.SIGTERM)
    code, out, err = wait(proc)
    stopped_at = max(r["step"] for r in train_rows(label))
    h.check(code == 4 and f"stopped by SIGTERM after step {stopped_at} with a checkpoint" in out,
            f"{label}: SIGTERM to one rank stops {what} after a checkpoint, exit code 4 (got {code})\n{err[-800:]}")
    inspect = h.mpirun(args, 1, ["ckpt", "inspect", os.path.join(work, label, "ckpt", f"ckpt_{stopped_at:08d}.h5")])
    h.check(inspect.returncode == 0 and f"step {stopped_at}," in inspect.stdout, f"{label}: that checkpoint is complete")


signal_one_rank("one_rank_signalled")
# A pipeline's stages agree on the stop over the whole job, not within their stage: a stage that
# went on alone would wait for its neighbour's messages until the collective timeout.
signal_one_rank("pipeline_signalled", ["parallel.pipeline=2", "data.micro_batch=2", "run.sample_every=0"],
                "both stages of a pipeline")

# ---- kill -9 of one rank while a checkpoint is being written ----
killed = deck("killed", 400, 1, d_model=256)  # ~10 MB checkpoints, one per step
proc = start(killed)
ckpt_dir = os.path.join(work, "killed", "ckpt")
victim = None
deadline = time.time() + 240
while time.time() < deadline and proc.poll() is None:
    names = os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []
    if "latest" in names and any(n.endswith(".h5.tmp") for n in names):
        ranks = subprocess.run(["pgrep", "-f", killed], capture_output=True, text=True).stdout.split()
        ranks = [int(p) for p in ranks if int(p) != proc.pid]
        if ranks:
            victim = ranks[-1]
            os.kill(victim, signal.SIGKILL)
            break
    time.sleep(0.001)
h.check(victim is not None, "a rank was killed while a checkpoint was being written")
code, _, _ = wait(proc)
h.check(code != 0, f"the job ends with a failure ({code})")
with open(os.path.join(ckpt_dir, "latest")) as f:
    latest = os.path.join(ckpt_dir, f.read().strip())
inspect = h.mpirun(args, 1, ["ckpt", "inspect", latest])
h.check(inspect.returncode == 0 and inspect.stdout.count("Fletcher32 verified") == 3,
        f"the checkpoint latest names is complete and verifies ({os.path.basename(latest)})")
leftovers = [n for n in os.listdir(ckpt_dir) if n.endswith(".tmp")]
latest_step = int(os.path.basename(latest)[5:13])
code, out, err = wait(start(killed, sets=["checkpoint.resume=latest", f"run.steps={latest_step + 2}"]), timeout=600)
h.check(code == 0 and f"resumed from {latest}" in out, f"the run resumes from it\n{err[-800:]}")
h.check(not [n for n in os.listdir(ckpt_dir) if n.endswith(".tmp")],
        f"the interrupted write ({leftovers}) was cleared by the next checkpoint")
print("passed")
