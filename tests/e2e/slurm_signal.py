"""Under Slurm (a one-machine cluster that tools/setup.sh starts as root): jobscripts/train.sbatch
runs the ranks with srun; a SIGUSR1 to the job's tasks (what --signal=USR1@120 sends before the
time limit) makes them write a checkpoint and exit with code 4, upon which the job script
requeues the job; resuming with srun continues the same run as an uninterrupted one.
With --two-hosts the same on a Slurm cluster of two real hosts (tools/two_hosts.sh slurm up:
a slurmd per host), 2 tasks on each."""
import atexit
import contextlib
import os
import subprocess
import time

import harness as h
from two_hosts import TwoHosts

args = h.parse_args({"--two-hosts": {"action": "store_true"}})
work = h.tmpdir()
corpus = h.corpus(args)
stack = contextlib.ExitStack()
atexit.register(stack.close)  # the hosts go down however the test ends
if args.two_hosts:
    hosts = stack.enter_context(TwoHosts(args.source))
    hosts.slurm_up()
    PREFIX, TASKS, NODES = [hosts.script, "slurm"], 4, ["--nodes=2"]
else:
    h.require_slurm("sbatch")
    PREFIX, TASKS, NODES = [], 2, []


def slurm(argv, **kw):
    """A Slurm command against the cluster under test."""
    env = dict(hosts.env if args.two_hosts else os.environ, **kw.pop("env", {}))
    return subprocess.run(PREFIX + argv, capture_output=True, text=True, env=env, **kw)


def deck(label):
    return h.small_deck(work, label, corpus, run={"steps": 40, "log_every": 1}, model={"d_model": 64, "seq_len": 64},
                        data={"global_batch": 8}, optimizer={"lr": 2e-3}, parallel={"strategy": "zero3"},
                        checkpoint={"dir": f"{work}/{label}/ckpt"})


def losses(label):
    return {r["step"]: r["loss"] for r in h.metrics(os.path.join(work, label)) if r["kind"] == "train"}


def job_state(job):
    out = slurm(["scontrol", "show", "job", job]).stdout
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return fields.get("JobState", "GONE"), int(fields.get("Restarts", "0"))


proc = hosts.mpirun(TASKS, [args.exe, "run", deck("reference")]) if args.two_hosts else \
    h.mpirun(args, TASKS, ["run", deck("reference")])
h.check(proc.returncode == 0, f"the uninterrupted reference run exits 0\n{proc.stderr[-800:]}")
reference = losses("reference")

script = os.path.join(args.source, "jobscripts", "train.sbatch")
submit = slurm(["sbatch", "--parsable", f"--ntasks={TASKS}"] + NODES + ["--time=10", f"--output={work}/job.out", script],
               env={"DECK": deck("slurm"), "SHARDTRAIN": args.exe}, cwd=args.source)
h.check(submit.returncode == 0, f"sbatch accepts the job script\n{submit.stderr}")
job = submit.stdout.strip().split(";")[0]
try:
    deadline = time.time() + 180
    while time.time() < deadline:
        path = os.path.join(work, "slurm", "metrics.jsonl")
        if os.path.exists(path) and sum(1 for line in open(path) if '"train"' in line) >= 4:
            break
        time.sleep(0.05)
    h.check(time.time() < deadline, "the job trains under srun")
    signal = slurm(["scancel", "--signal=USR1", job])
    h.check(signal.returncode == 0, f"scancel --signal=USR1 delivers the signal\n{signal.stderr}")
    deadline = time.time() + 120
    restarts = 0
    while time.time() < deadline:
        state, restarts = job_state(job)
        if restarts >= 1:
            break
        time.sleep(0.5)
    output = open(os.path.join(work, "job.out")).read()
    h.check("stopped by SIGUSR1 after step" in output, f"the ranks stopped with a checkpoint\n{output[-2000:]}")
    h.check("requeueing job " + job in output and restarts >= 1, f"the job script requeued the job ({state}, "
                                                                   f"restarts {restarts})")
finally:
    slurm(["scancel", job])

stopped_at = max(losses("slurm"))
h.check(stopped_at < 40, f"it stopped before the end (step {stopped_at})")
resume = slurm(["srun", "--mpi=pmix", "-n", str(TASKS)] + NODES + [args.exe, "run", os.path.join(work, "slurm.toml"),
                                                                  "--set", "checkpoint.resume=latest"],
               cwd=args.source, timeout=300)
h.check(resume.returncode == 0 and f"resumed from {work}/slurm/ckpt/ckpt_{stopped_at:08d}.h5" in resume.stdout,
        f"srun resumes from the checkpoint\n{resume.stdout[-1500:]}\n{resume.stderr[-1500:]}")
got = losses("slurm")
differ = [(s, got.get(s), reference[s]) for s in range(1, 41) if got.get(s) != reference[s]]
h.check(not differ, f"the interrupted and resumed run's losses equal the uninterrupted run's exactly "
                    f"(differ: step, got, reference: {differ[:3]})")
if args.two_hosts:
    h.check("2 node(s) x 2 ranks (host-a, host-b)" in resume.stdout, "the resumed run spans both hosts")
    output = open(os.path.join(work, "job.out")).read()
    h.check("2 node(s) x 2 ranks (host-a, host-b)" in output, "the job ran on both hosts")
print("passed")
