"""Under Slurm (a one-machine cluster that tools/setup.sh starts as root): jobscripts/train.sbatch
runs the ranks with srun; a SIGUSR1 to the job's tasks (what --signal=USR1@120 sends before the
time limit) makes them write a checkpoint and exit with code 4, upon which the job script
requeues the job; resuming with srun continues the same run as an uninterrupted one."""
import os
import subprocess
import time

import harness as h

args = h.parse_args()
h.require_slurm("sbatch")

work = h.tmpdir()
corpus = h.corpus(args)


def deck(label):
    return h.small_deck(work, label, corpus, run={"steps": 40, "log_every": 1}, model={"d_model": 64, "seq_len": 64},
                        data={"global_batch": 8}, optimizer={"lr": 2e-3}, parallel={"strategy": "zero3"},
                        checkpoint={"dir": f"{work}/{label}/ckpt"})


def losses(label):
    return {r["step"]: r["loss"] for r in h.metrics(os.path.join(work, label)) if r["kind"] == "train"}


def job_state(job):
    out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return fields.get("JobState", "GONE"), int(fields.get("Restarts", "0"))


proc = h.mpirun(args, 2, ["run", deck("reference")])
h.check(proc.returncode == 0, f"the uninterrupted reference run exits 0\n{proc.stderr[-800:]}")
reference = losses("reference")

script = os.path.join(args.source, "jobscripts", "train.sbatch")
env = dict(os.environ, DECK=deck("slurm"), SHARDTRAIN=args.exe)
submit = subprocess.run(["sbatch", "--parsable", "--ntasks=2", "--time=10", f"--output={work}/job.out", script],
                        capture_output=True, text=True, env=env, cwd=args.source)
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
    signal = subprocess.run(["scancel", "--signal=USR1", job], capture_output=True, text=True)
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
    subprocess.run(["scancel", job], capture_output=True)

stopped_at = max(losses("slurm"))
h.check(stopped_at < 40, f"it stopped before the end (step {stopped_at})")
resume = subprocess.run(["srun", "--mpi=pmix", "-n", "2", args.exe, "run", os.path.join(work, "slurm.toml"),
                         "--set", "checkpoint.resume=latest"], capture_output=True, text=True, cwd=args.source,
                        timeout=300)
h.check(resume.returncode == 0 and f"resumed from {work}/slurm/ckpt/ckpt_{stopped_at:08d}.h5" in resume.stdout,
        f"srun resumes from the checkpoint\n{resume.stdout[-1500:]}\n{resume.stderr[-1500:]}")
got = losses("slurm")
h.check(all(got[s] == reference[s] for s in range(stopped_at + 1, 41)),
        "the resumed run's losses equal the uninterrupted run's exactly")
print("passed")
