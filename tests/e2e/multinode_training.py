"""Training on two real hosts (tools/two_hosts.sh), 2 ranks each, nodes found from the hosts:
- hsdp and zero3 equal one rank within 1e-5 (losses, gradient norms, validation losses, final
  parameters), and equal the same run on 2 x 2 emulated nodes on one host, inter-node bytes
  included (non-zero, the same on every step);
- a checkpoint written on the 2 hosts resumes on 1 host, and one written on 1 host resumes on the
  2 hosts, each within 1e-5 of the uninterrupted run."""
import os

import harness as h
from two_hosts import TwoHosts

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def deck(label, strategy, steps=12, **sections):
    return h.small_deck(work, label, corpus, run={"steps": steps, "eval_every": 6, "eval_batches": 2},
                        parallel={"strategy": strategy, "bucket_mb": 0.02}, **sections)


def close(a, b, rel):
    return len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


def compare(label, got, ref, rel=1e-5):
    h.check(close(got["loss"], ref["loss"], rel), f"{label}: losses within {rel}\n{got['loss']}\n{ref['loss']}")
    h.check(close(got["norm"], ref["norm"], rel), f"{label}: gradient norms within {rel}")
    h.check(close(got["val"], ref["val"], rel), f"{label}: validation losses within {rel}")
    scale = max(abs(x) for x in ref["params"])
    worst = max(abs(x - y) for x, y in zip(got["params"], ref["params"])) / scale
    h.check(len(got["params"]) == len(ref["params"]) and worst <= rel,
            f"{label}: final parameters within {rel} of the largest (worst {worst:.2e})")


def inter_bytes(result):
    return [r["comm_inter_bytes"] for r in result["rows"] if r["kind"] == "train"]


def local(ranks, label, strategy, extra=(), **sections):
    return h.train(args, ranks, deck(label, strategy, **sections), os.path.join(work, label), label, extra)


with TwoHosts(args.source) as hosts:
    def on_hosts(label, strategy, extra=(), **sections):
        return hosts.train(args.exe, 4, deck(label, strategy, **sections), os.path.join(work, label), label, extra)

    ref = local(1, "ref_np1", "ddp")
    h.check(ref["loss"][-1] < ref["loss"][0] - 0.3, "the reference run learns")
    for strategy in ("hsdp", "zero3"):
        real = on_hosts(f"{strategy}_hosts", strategy)
        h.check(f"2 node(s) x 2 ranks" in real["stdout"] and "emulated" not in real["stdout"],
                f"{strategy}: the run finds 2 real nodes of 2 ranks")
        compare(f"{strategy} on 2 hosts x 2 ranks vs 1 rank", real, ref)
        emulated = local(4, f"{strategy}_emulated", strategy, ["--set", "parallel.ranks_per_node=2"])
        compare(f"{strategy} on 2 hosts vs 2 x 2 emulated nodes", real, emulated)
        h.check(all(b > 0 for b in inter_bytes(real)) and inter_bytes(real) == inter_bytes(emulated),
                f"{strategy}: every step's inter-node bytes are non-zero and those of the emulated nodes "
                f"({inter_bytes(real)[:2]}...)")

    # Checkpoints across the change of machine: written every 6 steps of 12.
    def ckpt(label):
        return os.path.join(work, label, "ckpt", "ckpt_00000006.h5")

    for writer, reader in (("hosts", "host"), ("host", "hosts")):
        run_writer = on_hosts if writer == "hosts" else (lambda label, s, **k: local(2, label, s, **k))
        run_reader = on_hosts if reader == "hosts" else (lambda label, s, extra=(), **k: local(2, label, s, extra, **k))
        full = run_writer(f"write_{writer}", "hsdp", checkpoint={"dir": f"{work}/write_{writer}/ckpt", "every": 6})
        h.check(os.path.exists(ckpt(f"write_{writer}")), f"the run on {writer} wrote its step-6 checkpoint")
        resumed = run_reader(f"resume_{writer}_on_{reader}", "zero3",
                             ["--set", f"checkpoint.resume=\"{ckpt(f'write_{writer}')}\""])
        h.check(len(resumed["loss"]) == 6, f"resumed on {reader}: continues at step 7")
        for key in ("loss", "norm"):
            h.check(close(resumed[key], full[key][6:], 1e-5),
                    f"{writer} -> {reader}: resumed {key} equal the uninterrupted run's within 1e-5\n"
                    f"{resumed[key]}\n{full[key][6:]}")
        scale = max(abs(x) for x in full["params"])
        worst = max(abs(x - y) for x, y in zip(resumed["params"], full["params"])) / scale
        h.check(worst <= 1e-5, f"{writer} -> {reader}: final parameters within 1e-5 (worst {worst:.2e})")
print("passed")
