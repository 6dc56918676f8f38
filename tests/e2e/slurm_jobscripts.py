"""The job scripts under Slurm (a one-machine cluster that tools/setup.sh starts as root):

- jobscripts/sweep.sbatch as a job array over three strategies of one deck: every task completes,
  logs to <name>-<array id>_<task>.out and trains in a run directory of its own, with the strategy
  it was given, and the three runs' losses agree (the strategies compute the same run);
- jobscripts/train.sbatch given a missing deck, a deck with an error or a checkpoint directory it
  cannot write: each job fails within seconds with exit code 2 and the program's message in its
  log, and is not requeued (the script requeues on exit code 4 only);
- train.sbatch's extra arguments keep their spaces (EXTRA_ARGS with quotes, and arguments after
  the script's name);
- jobscripts/train_gpu.sbatch passes `sbatch --test-only` and trains on CPU nodes with zero GPUs
  requested, handing CUDA_DEVICE_ORDER and the NCCL_* variables to every rank;
- tools/launch.sh in a batch job (srun) turns a SIGTERM into a checkpoint and exit code 4;
- the ranks' threads do not share one CPU while another of the node idles: `shardtrain doctor`
  in place of the run under train.sbatch reports its CPU sets OK (on this cluster, which does not
  bind tasks, OpenMP is left unbound); each script's per-task rule binds OpenMP only in a task
  whose mask holds no more than its --cpus-per-task CPUs (run under taskset, without Slurm).
Accounting is off on the local cluster (no sacct): states and exit codes come from `scontrol show
job`, which keeps finished jobs for MinJobAge (300 s)."""
import atexit
import os
import re
import subprocess
import time

import harness as h

args = h.parse_args()
h.require_slurm("sbatch")
work = h.tmpdir()
os.chmod(work, 0o755)
corpus = os.path.abspath(h.corpus(args))  # the jobs run in another directory
scripts = os.path.join(os.path.abspath(args.source), "jobscripts")
deck = h.small_deck(work, "tiny", corpus, run={"steps": 6, "log_every": 1})


def submit(script, *options, env=None, script_args=()):
    cmd = ["sbatch", "--parsable", "--time=5", *options, os.path.join(scripts, script), *script_args]
    environment = dict(os.environ, SHARDTRAIN=os.path.abspath(args.exe))
    environment.update(env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=environment)
    h.check(proc.returncode == 0, f"sbatch accepts {script} {' '.join(options)}" +
            ("" if proc.returncode == 0 else "\n" + proc.stderr))
    return proc.stdout.strip().split(";")[0]


def records(job):
    """Every record `scontrol show job` has for the job (one per array task): field -> value."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if line.strip()]


def wait_all(jobs, timeout=150):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not subprocess.run(["squeue", "-h", "-j", ",".join(jobs)], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.5)
    subprocess.run(["scancel", *jobs], capture_output=True)
    h.fail(f"jobs {jobs} did not finish within {timeout} s")


def seconds(record):
    stamp = lambda s: time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))
    return stamp(record["EndTime"]) - stamp(record["StartTime"])


def log(name):
    with open(os.path.join(work, name), encoding="utf-8") as f:
        return f.read()


# ---- the submissions: all at once, Slurm runs them one after the other on this node ----
strategies = ["ddp", "zero2", "zero3"]
array = submit("sweep.sbatch", "--array=0-2", env={"DECK": deck, "SWEEP_VALUES": " ".join(strategies),
                                                     "RUNS_DIR": os.path.join(work, "runs")})
bad_deck = h.write_deck(work, "bad.toml", open(deck).read().replace("steps = 6", "setps = 6"))
# A checkpoint directory this job cannot write: chmod is enough for a user; root writes anywhere
# but in an immutable directory (chattr +i, ext4 and most local file systems).
read_only = os.path.join(work, "read_only")
os.makedirs(read_only)
os.chmod(read_only, 0o555)
immutable = os.geteuid() == 0 and subprocess.run(["chattr", "+i", read_only], capture_output=True).returncode == 0
if immutable:  # undone however the test ends, or the directory stays undeletable
    atexit.register(lambda: subprocess.run(["chattr", "-i", read_only], capture_output=True))
if os.geteuid() == 0 and not immutable:
    print(f"note: running as root and chattr +i failed on {work}: the unwritable checkpoint directory is a "
          f"path under a regular file instead")
    read_only = h.write_deck(work, "a_file", "x") + "/ckpt"
failures = {
    "missing deck": (submit("train.sbatch", env={"DECK": os.path.join(work, "no_such_deck.toml")}),
                     f"cannot open deck file '{work}/no_such_deck.toml': No such file or directory"),
    "deck with an error": (submit("train.sbatch", env={"DECK": bad_deck}),
                           f"{bad_deck}:2: unknown key 'setps'"),
    "unwritable checkpoint directory": (submit("train.sbatch", env={"DECK": deck,
                                                                    "EXTRA_ARGS": f"--set checkpoint.dir={read_only}"}),
                                        f"checkpoint directory '{read_only}' (checkpoint.dir)"),
}
spaced_dir = os.path.join(work, "run with spaces")
spaced = submit("train.sbatch", env={"DECK": deck, "EXTRA_ARGS": "--set 'run.sample_prompt=Once upon a time' "
                                                                 "--set run.sample_tokens=4"},
                script_args=["--set", f"run.out_dir={spaced_dir}"])
gpu_options = ["--nodes=1", "--gpus-per-node=0", "--ntasks-per-node=2"]
test_only = subprocess.run(["sbatch", "--test-only", *gpu_options, os.path.join(scripts, "train_gpu.sbatch")],
                           capture_output=True, text=True, cwd=work)
h.check(test_only.returncode == 0, f"train_gpu.sbatch passes sbatch --test-only on CPU nodes\n{test_only.stderr}")
# Each rank reports what reached it, then becomes the executable.
reporter = h.write_deck(work, "report_env.sh", "#!/bin/sh\necho \"rank $SLURM_PROCID sees NCCL_DEBUG=$NCCL_DEBUG "
                                               "CUDA_DEVICE_ORDER=$CUDA_DEVICE_ORDER\"\nexec \"$REAL_EXE\" \"$@\"\n")
os.chmod(reporter, 0o755)
gpu_dir = os.path.join(work, "gpu_run")
gpu = submit("train_gpu.sbatch", *gpu_options,
             env={"DECK": deck, "SHARDTRAIN": reporter, "REAL_EXE": os.path.abspath(args.exe), "NCCL_DEBUG": "WARN"},
             script_args=["--set", f"run.out_dir={gpu_dir}"])

# Where the ranks' threads run: doctor in place of `shardtrain run`, launched as the script launches.
instead = h.write_deck(work, "doctor_instead.sh", "#!/bin/sh\nexec \"$REAL_EXE\" doctor\n")
os.chmod(instead, 0o755)
placement = submit("train.sbatch", env={"DECK": deck, "SHARDTRAIN": instead, "REAL_EXE": os.path.abspath(args.exe)})

wait_all([array, spaced, gpu, placement] + [job for job, _ in failures.values()])

# ---- the array ----
tasks = {int(r["ArrayTaskId"]): r for r in records(array)}
h.check(sorted(tasks) == [0, 1, 2], f"the array has tasks 0, 1, 2 ({sorted(tasks)})")
losses = {}
for task, strategy in enumerate(strategies):
    r = tasks[task]
    h.check(r["JobState"] == "COMPLETED" and r["ExitCode"] == "0:0", f"task {task} completed ({r['JobState']}, "
                                                                      f"exit {r['ExitCode']})")
    text = log(f"sweep-{array}_{task}.out")  # %x-%A_%a
    run_dir = os.path.join(work, "runs", f"sweep-{array}", f"{task}-{strategy}")
    h.check(f"sweep task {task} (parallel.strategy = {strategy}" in text and run_dir in text,
            f"task {task} logs to sweep-{array}_{task}.out and names its run directory {run_dir}")
    with open(os.path.join(run_dir, "resolved.toml")) as f:
        resolved = f.read()
    h.check(f'strategy = "{strategy}"' in resolved and f'dir = "{run_dir}/checkpoints"' in resolved,
            f"task {task} trained with {strategy}, its checkpoints in its own directory")
    rows = [row for row in h.metrics(run_dir) if row["kind"] == "train"]
    h.check([row["step"] for row in rows] == list(range(1, 7)), f"task {task} ran its 6 steps")
    losses[strategy] = [row["loss"] for row in rows]
h.check(len({os.path.join("runs", f"sweep-{array}", f"{t}-{s}") for t, s in enumerate(strategies)}) == 3,
        "three distinct run directories")
h.check(all(abs(a - b) <= 1e-4 * abs(a) for s in strategies[1:] for a, b in zip(losses["ddp"], losses[s])),
        f"the three strategies' losses agree: {[round(x, 5) for x in losses['ddp']]}")

# ---- jobs that must fail fast and stay failed ----
for name, (job, message) in failures.items():
    r = records(job)[0]
    text = log(f"shardtrain-{job}.out")
    h.check(r["JobState"] == "FAILED" and r["ExitCode"] == "2:0", f"{name}: the job fails with exit code 2 "
                                                                  f"({r['JobState']}, {r['ExitCode']})")
    h.check(seconds(r) <= 20, f"{name}: within seconds ({seconds(r):.0f} s)")
    h.check(message in text, f"{name}: the log holds the program's message" + ("" if message in text else "\n" + text[-800:]))
    h.check(r["Restarts"] == "0" and "requeueing" not in text, f"{name}: nothing is requeued")

# ---- arguments with spaces ----
r = records(spaced)[0]
h.check(r["JobState"] == "COMPLETED", f"train.sbatch with spaced arguments completes ({r['JobState']})")
with open(os.path.join(spaced_dir, "resolved.toml")) as f:
    resolved = f.read()
h.check('sample_prompt = "Once upon a time"' in resolved, "EXTRA_ARGS's quoted value keeps its spaces")
samples = [row for row in h.metrics(spaced_dir) if row["kind"] == "sample"]
h.check(len(samples) == 1 and samples[0]["text"].startswith("Once upon a time"), "and the sample starts with it")
h.check(os.path.isdir(spaced_dir), "an argument after the script's name keeps its spaces (the run directory)")

# ---- the GPU script on CPU nodes ----
r = records(gpu)[0]
text = log(f"shardtrain-gpu-{gpu}.out")
completed = r["JobState"] == "COMPLETED" and r["ExitCode"] == "0:0"
h.check(completed, f"train_gpu.sbatch with zero GPUs completes ({r['JobState']}, {r['ExitCode']})" +
        ("" if completed else "\n" + text[-1000:]))
h.check("1 node(s) x 2 rank(s), 0 GPU(s) and 1 CPU(s) per rank" in text, "it shares the node's CPUs among the ranks")
for rank in (0, 1):
    h.check(f"rank {rank} sees NCCL_DEBUG=WARN CUDA_DEVICE_ORDER=PCI_BUS_ID" in text,
            f"rank {rank} gets NCCL_DEBUG and CUDA_DEVICE_ORDER")
h.check([row["step"] for row in h.metrics(gpu_dir) if row["kind"] == "train"] == list(range(1, 7)),
        "and trains its 6 steps on the CPUs")
# ---- where the ranks' threads run ----
r = records(placement)[0]
text = log(f"shardtrain-{placement}.out")
sets = next((l for l in text.splitlines() if l[6:].startswith("cpu sets")), "")
h.check(r["JobState"] == "COMPLETED" and sets.startswith("OK"),
        "train.sbatch: no two ranks' threads share a CPU while another CPU of the node idles" +
        ("" if sets.startswith("OK") else f" ({r['JobState']})\n{text[-1500:]}"))
task_plugin = re.search(r"^TaskPlugin\s*=\s*(\S+)", subprocess.run(["scontrol", "show", "config"], capture_output=True,
                                                                   text=True).stdout, re.M)
if task_plugin and task_plugin.group(1) == "task/none":
    h.check("(OpenMP does not bind threads)" in sets, "TaskPlugin=task/none: the script leaves OpenMP unbound" +
            ("" if "(OpenMP does not bind threads)" in sets else "\n" + sets))
# The rule each task applies, taken from each script: bind OpenMP only where the task's CPUs are its own.
cpus = sorted(os.sched_getaffinity(0))
for script in ("train.sbatch", "sweep.sbatch", "train_gpu.sbatch"):
    with open(os.path.join(scripts, script)) as f:
        source = f.read()
    rule = re.search(r"^bind_own_cores='(.*?)'$", source, re.M | re.S)
    h.check(rule is not None and 'bash -c "$bind_own_cores" task' in source,
            f"{script}: each task runs the binding rule before it becomes the executable")

    def bound(*prefix):
        return subprocess.run([*prefix, "bash", "-c", rule.group(1), "task", "sh", "-c", "echo \"$OMP_PROC_BIND\""],
                              capture_output=True, text=True, env=dict(os.environ, SLURM_CPUS_PER_TASK="1")
                              ).stdout.strip()
    h.check(bound("taskset", "-c", str(cpus[0])) == "close", f"{script}: a task given 1 CPU of its own binds OpenMP")
    if len(cpus) > 1:
        h.check(bound() == "", f"{script}: a task of 1 CPU that may run on {len(cpus)} leaves OpenMP unbound")

# ---- tools/launch.sh inside an allocation (srun): SIGTERM to it stops the run with a checkpoint ----
long_deck = h.small_deck(work, "long", corpus, run={"steps": 5000, "log_every": 1},
                         checkpoint={"dir": f"{work}/long/ckpt"})
launch = os.path.join(os.path.abspath(args.source), "tools", "launch.sh")
job = subprocess.run(["sbatch", "--parsable", "--ntasks=2", "--time=5", f"--output={work}/launch.out",
                      f"--wrap=exec {launch} -n 2 run {long_deck}"], capture_output=True, text=True, cwd=work,
                     env=dict(os.environ, SHARDTRAIN=os.path.abspath(args.exe))).stdout.strip()
metrics = os.path.join(work, "long", "metrics.jsonl")
deadline = time.time() + 120
while time.time() < deadline and not (os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 5):
    time.sleep(0.2)
h.check(time.time() < deadline, "a run started with tools/launch.sh in a batch job trains under srun")
subprocess.run(["scancel", "--batch", "--signal=TERM", job], capture_output=True)
wait_all([job], timeout=60)
r = records(job)[0]
text = log("launch.out")
stopped = re.search(r"stopped by SIGTERM \(passed on by tools/launch.sh as SIGUSR1\) after step (\d+) with a checkpoint", text)
h.check(r["ExitCode"] == "4:0" and stopped is not None, f"SIGTERM to tools/launch.sh under srun: the ranks "
                                                         f"checkpoint and the job's exit code is 4 ({r['ExitCode']})")
with open(os.path.join(work, "long", "ckpt", "latest")) as f:
    h.check(f.read().strip() == f"ckpt_{int(stopped.group(1)):08d}.h5", "latest names that checkpoint")
print("passed")
