"""A host that fails: training on two real hosts (tools/two_hosts.sh) x 2 ranks, checkpointing
every 5 steps; `kill -9` of every process on host-b (its ranks and its Open MPI daemon).
- Under plain mpirun, the launcher sees host-b's daemon gone and ends the job at once (well
  within the collective timeout), naming host-b, exit code non-zero.
- Under mpirun --enable-recovery (the launcher leaves the survivors running), host-a's ranks stop
  by themselves within the collective timeout (+ the watchdog's 3 s for answers), or within the
  checkpoint timeout when the kill lands in a checkpoint's collective file I/O, naming the
  missing ranks and their host: "no answer from: rank 2 (host-b), rank 3 (host-b) (every rank on
  host-b ...)". (Open MPI
  4.1.4's mpirun then exits 0 despite the MPI_Abort, so this case checks the message, not the code.)
Either way the newest checkpoint named by `latest` is whole (every checksum verifies) and a run
on one host resumes from it."""
import os
import re
import subprocess
import time

import harness as h
from two_hosts import TwoHosts

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
TIMEOUT = 6  # parallel.collective_timeout_s


def wait_for_checkpoint(ckpt_dir, proc, at_least):
    """The step of the newest checkpoint once `latest` names one of step >= at_least."""
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            h.fail(f"the run ended before the host failure ({proc.returncode}):\n{proc.stderr.read()[-2000:]}")
        try:
            with open(os.path.join(ckpt_dir, "latest")) as f:
                name = f.read().strip()
            step = int(name[len("ckpt_"):-len(".h5")])
            if step >= at_least:
                return step
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    h.fail("no checkpoint within 120 s")


with TwoHosts(args.source) as hosts:
    for case, launcher in (("launcher", []), ("watchdog", ["--enable-recovery"])):
        label = f"fail_{case}"
        ckpt_dir = os.path.join(work, label, "ckpt")
        deck = h.small_deck(work, label, corpus, run={"steps": 1000000},
                            parallel={"strategy": "hsdp", "collective_timeout_s": TIMEOUT},
                            checkpoint={"dir": ckpt_dir, "every": 5, "keep": 2, "timeout_s": TIMEOUT})
        proc = hosts.popen(4, launcher + [args.exe, "run", deck])
        wait_for_checkpoint(ckpt_dir, proc, 10)
        hosts.kill("b")
        killed = time.time()
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            print(h.stacks(args.exe))
            proc.kill()
            h.fail(f"{case}: host-a's ranks still ran 60 s after host-b failed")
        elapsed = time.time() - killed
        print(f"--- {case}: ended {elapsed:.1f} s after the kill, exit code {proc.returncode}; stderr:\n{err[-3000:]}")
        if case == "launcher":
            h.check(elapsed < TIMEOUT, f"launcher: the job ends within the collective timeout ({elapsed:.1f} s)")
            h.check(proc.returncode != 0, f"launcher: exit code non-zero ({proc.returncode})")
            h.check("Remote daemon" in err and "on node host-b" in err, "launcher: names the lost host, host-b")
        else:
            # A checkpoint write's watchdog counts from the write's start, which may precede the kill.
            h.check(TIMEOUT - 1 <= elapsed < TIMEOUT + 3 + 5,
                    f"watchdog: host-a's ranks stop after the collective timeout ({elapsed:.1f} s, timeout {TIMEOUT} s)")
            # The first survivor to report aborts the job, which may kill the other before it reports.
            h.check(re.search(r"\[rank [01] on host-a\] shardtrain: (collective|checkpoint) timeout", err) is not None,
                    "watchdog: a rank on host-a reports")
            h.check("rank 2 (host-b): no answer within 3 s" in err and "rank 3 (host-b): no answer within 3 s" in err,
                    "watchdog: ranks 2 and 3 on host-b do not answer")
            # Which collective each survivor waits in depends on when the kill lands (one may
            # already be in the next step's), so "missing from ..." differs; the silent ranks do not.
            h.check(re.search(r"missing from [^\n]*: (rank [01] \(host-a\), )*rank 2 \(host-b\), rank 3 \(host-b\)\n",
                              err) is not None, "watchdog: names the missing ranks and their host")
            h.check("  no answer from: rank 2 (host-b), rank 3 (host-b) (every rank on host-b: host down or "
                    "unreachable?)\n" in err, "watchdog: names the silent host")
            h.check("aborting the job (exit code 3)" in err or "aborting the job (exit code 5)" in err,
                    "watchdog: aborts the job")

        with open(os.path.join(ckpt_dir, "latest")) as f:
            latest = os.path.join(ckpt_dir, f.read().strip())
        inspect = h.mpirun(args, 1, ["ckpt", "inspect", latest], timeout=120)
        h.check(inspect.returncode == 0 and inspect.stdout.count("Fletcher32 verified") == 3,
                f"{case}: the newest checkpoint ({os.path.basename(latest)}) verifies\n{inspect.stdout[-1500:]}"
                f"{inspect.stderr[-1500:]}")
        step = int(os.path.basename(latest)[len("ckpt_"):-len(".h5")])
        resume = h.mpirun(args, 2, ["run", deck, "--set", f"run.steps={step + 2}", "--set",
                                    f"checkpoint.resume=\"{latest}\"", "--set",
                                    f"checkpoint.dir=\"{work}/{label}_resumed\"", "--set",
                                    f"run.out_dir=\"{work}/{label}_resumed_out\""], timeout=120)
        h.check(resume.returncode == 0, f"{case}: one host resumes from it\n{resume.stderr[-1500:]}")
        steps = [r["step"] for r in h.metrics(f"{work}/{label}_resumed_out") if r["kind"] == "train"]
        h.check(steps == [step + 1, step + 2], f"{case}: ... at step {step + 1} ({steps})")
print("passed")
