"""parallel.strategy = "auto": at start-up the planner probes this node (sgemm and memory copy
rates), logs its table, the choice and the reason, and the run uses the chosen strategy; the
choice is recorded in the run directory (plan.txt, resolved.toml) and in the checkpoint. `check`
shows the same table; `plan` prints it for any deck; `topo` reads a saved topology."""
import os
import re
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
deck = h.small_deck(work, "auto", corpus, run={"steps": 3}, model={"d_model": 64}, data={"global_batch": 4},
                    parallel={"strategy": "auto"}, checkpoint={"every": 3})
run_dir = os.path.join(work, "auto")

proc = h.mpirun(args, 2, ["run", deck], timeout=300)
h.check(proc.returncode == 0, f"run with auto on 2 ranks exits 0\n{proc.stderr[-1500:]}")
out = proc.stdout
h.check('parallel.strategy = "auto": the planner\'s table' in out, "the table is logged before training")
for name in ("ddp", "zero1", "zero2", "zero3"):
    # rank, strategy, tensor (1: whole layers), pipe (1: no pipeline), group (the 2 ranks)
    h.check(re.search(rf"^\S+\s+{name}\s+1\s+1\s+2\s", out, re.M) is not None,
            f"the table has a row for {name} with whole layers on 2 ranks")
m = re.search(r"^recommendation: (\w+)(?: with groups of \d+)?: (.+)$", out, re.M)
h.check(m is not None and len(m.group(2)) > 40, f"the choice comes with its reason ({m and m.group(0)[:120]})")
chosen = m.group(1)
h.check(re.search(rf"^\S+\s+{chosen}\s.*<- chosen$", out, re.M) is not None, f"the table marks {chosen} as chosen")

rows = h.metrics(run_dir)
run_row = next(r for r in rows if r["kind"] == "run")
h.check(run_row["strategy"] == chosen, f"the run used the chosen strategy ({run_row['strategy']})")
with open(os.path.join(run_dir, "resolved.toml")) as f:
    resolved = f.read()
h.check(f'strategy = "{chosen}"   # auto: chosen by the planner' in resolved, "resolved.toml records the choice")
with open(os.path.join(run_dir, "plan.txt")) as f:
    h.check(f"recommendation: {chosen}" in f.read(), "plan.txt keeps the table and the reason")
ckpt = os.path.join(run_dir, "checkpoints", "ckpt_00000003.h5")
inspect = subprocess.run([args.exe, "ckpt", "inspect", ckpt], capture_output=True, text=True, timeout=120)
h.check(f"with strategy {chosen} " in inspect.stdout, f"the checkpoint records {chosen}\n{inspect.stdout[:300]}")

# check shows the same kind of table; plan prints one without training.
proc = h.mpirun(args, 1, ["check", deck, "--ranks", "2"])
h.check(proc.returncode == 0 and "recommendation:" in proc.stdout and "deck OK" in proc.stdout,
        "check resolves auto and shows the table")
proc = h.mpirun(args, 1, ["plan", deck, "--ranks", "4"])
h.check(proc.returncode == 0 and "recommendation:" in proc.stdout and "CPU only" in proc.stdout,
        f"plan --ranks 4 prints the table for this CPU node\n{proc.stdout[-600:]}{proc.stderr[-600:]}")
# A saved topology: NVLink pairs joined by SYS, the model sharded in the pairs.
topo = os.path.join(args.source, "tests", "data", "topo", "06_rtx-a6000-8gpu_nvlink-bridge-pairs-nv4_dual-socket_2nic.txt")
proc = h.mpirun(args, 1, ["plan", deck, "--topology", topo, "--gpu-mem", "48", "--set", "data.global_batch=8"])
h.check(proc.returncode == 0 and "fast groups of 2 (NV4, 100 GB/s), between groups SYS (16 GB/s)" in proc.stdout,
        f"plan --topology reads the pairs and their links\n{proc.stdout[-800:]}{proc.stderr[-600:]}")
# topo: the matrix, the groups and the advice in words; a truncated file names its line.
proc = h.mpirun(args, 1, ["topo", "--topology", topo])
h.check(proc.returncode == 0 and "fast groups: {GPU0, GPU1} {GPU2, GPU3} {GPU4, GPU5} {GPU6, GPU7}" in proc.stdout
        and "hsdp with groups of 2" in proc.stdout, f"topo reads the pairs and advises hsdp\n{proc.stdout[-800:]}")
with open(topo) as f:
    lines = f.read().splitlines()
cut = os.path.join(work, "cut.txt")
with open(cut, "w") as f:
    f.write("\n".join(lines[:5]) + "\n")
proc = h.mpirun(args, 1, ["topo", "--topology", cut])
h.check(proc.returncode == 2 and f"{cut}:6: the matrix ends after 4 of its 10 rows" in proc.stderr,
        f"topo on a truncated file names the line\n{proc.stderr[-600:]}")
print("passed")
