"""The numbers do not depend on the threads per rank: the same deck trained with run.threads = 1,
2 and 3 gives the same losses, gradient norms and validation losses bit for bit, and the same
final parameters byte for byte; so does a run resumed with another thread count than it was
checkpointed with (as a run resumed under another launcher or on another node's cores is).
GPT-2 on 1 rank and 2 ranks (zero2), and Llama (grouped-query attention, untied head) on 1 rank."""
import os

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)

CASES = [("gpt2", 1, {}, {}), ("gpt2_zero2", 2, {}, {"strategy": "zero2"}),
         ("llama", 1, {"arch": "llama", "n_kv_head": 2, "tie_embeddings": False}, {})]
for name, ranks, model, parallel in CASES:
    runs = {}
    for threads in (1, 2, 3):
        label = f"{name}_threads{threads}"
        deck = h.small_deck(work, label, corpus, run={"steps": 12, "threads": threads, "eval_every": 6},
                            model=dict({"d_model": 48, "n_head": 4}, **model), data={"global_batch": 16},
                            parallel=parallel, checkpoint={"every": 6})
        runs[threads] = h.train(args, ranks, deck, os.path.join(work, label), label)
    one = runs[1]
    for threads in (2, 3):
        got = runs[threads]
        h.check(got["loss"] == one["loss"] and got["norm"] == one["norm"] and got["val"] == one["val"],
                f"{name}: {threads} threads per rank give one thread's losses, gradient norms and validation losses bit "
                f"for bit\n{got['loss']}\n{one['loss']}")
        h.check(got["params"].tobytes() == one["params"].tobytes(),
                f"{name}: {threads} threads per rank give one thread's final parameters byte for byte")
    # Checkpointed at step 6 with 3 threads, resumed with 1: the one-thread run's last 6 steps.
    label = f"{name}_threads3"
    deck = os.path.join(work, f"{label}.toml")
    resumed = h.train(args, ranks, deck, os.path.join(work, label), f"{name} resumed with 1 thread",
                      ["--set", "run.threads=1", "--set", 'checkpoint.resume="' + os.path.join(
                          work, label, "checkpoints", "ckpt_00000006.h5") + '"'])
    h.check(resumed["loss"][-6:] == one["loss"][-6:] and resumed["params"].tobytes() == one["params"].tobytes(),
            f"{name}: a run checkpointed with 3 threads and resumed with 1 continues bit for bit")
print("passed")
