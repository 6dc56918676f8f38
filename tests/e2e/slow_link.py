"""Emulated nodes from the environment, and the slow-link emulation: on 2 x 2 emulated nodes
with a 0.01 GB/s inter-node link no step is shorter than its cross-node bytes need at that
rate, the losses are those of the run without it, and the settings say the link is emulated."""
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
deck = h.write_deck(work, "slow.toml", f"""
[run]
steps = 6
eval_every = 0
eval_batches = 1
sample_tokens = 0
out_dir = "{work}/OUT"
[model]
n_layer = 2
d_model = 64
n_head = 4
seq_len = 32
[data]
path = "{corpus}"
global_batch = 8
""")
os.environ["SHARDTRAIN_RANKS_PER_NODE"] = "2"


def run(label, extra):
    proc = h.mpirun(args, 4, ["run", deck, "--set", f"run.out_dir=\"{work}/{label}\""] + extra, timeout=300)
    h.check(proc.returncode == 0, f"{label}: exits 0\n{proc.stderr[-1500:]}")
    rows = [r for r in h.metrics(os.path.join(work, label)) if r["kind"] == "train"]
    return proc.stdout, rows


out, fast = run("fast", [])
h.check("2 node(s) x 2 ranks (emulated nodes)" in out, "SHARDTRAIN_RANKS_PER_NODE=2 makes 2 emulated nodes")
rate = 0.01e9
out, slow = run("slow", ["--set", "parallel.inter_node_gbps=0.01", "--set", "parallel.inter_node_latency_us=100"])
h.check("inter-node link emulated at 0.0100 GB/s" in out, "the settings report the emulated link")
h.check([r["loss"] for r in fast] == [r["loss"] for r in slow], "the slow link changes no number, only time")
# A lower bound, not a timing measurement: a step cannot finish before its cross-node bytes
# have passed the emulated link (plus 100 us per cross-node call, at least two per step).
for r in slow:
    floor = r["comm_inter_bytes"] / rate * 1e3 + 2 * 0.1
    if r["ms"] < floor:
        h.fail(f"step {r['step']} took {r['ms']:.1f} ms, less than the {floor:.1f} ms its "
               f"{r['comm_inter_bytes']} cross-node bytes need at 0.01 GB/s")
h.check(True, f"every step takes at least its cross-node bytes at 0.01 GB/s "
              f"(e.g. {slow[-1]['comm_inter_bytes']} bytes: {slow[-1]['ms']:.1f} ms)")
print("passed")
