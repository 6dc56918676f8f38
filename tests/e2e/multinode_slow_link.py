"""parallel.inter_node_gbps on top of a real TCP link: hsdp on two hosts (tools/two_hosts.sh) x 2
ranks, overlap off, with and without a 0.002 GB/s emulated link, alternating twice. Each
cross-node collective then lasts at least its bytes / rate, so a step is predicted to take the
fast run's time plus (inter-node bytes per step) / rate; the measured slowdown (medians of steps
3..12, mean of the two rounds) must be within 25% of that, and no number may change.
(tools/bench_two_hosts_slow_link.py prints every round; docs/benchmarks.md has its figures.)"""
import os
import statistics

import harness as h
from two_hosts import TwoHosts

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)
GBPS = 0.002

with TwoHosts(args.source) as hosts:
    ratios = []
    for i in (1, 2):
        runs = {}
        for label, gbps in (("fast", 0), ("slow", GBPS)):
            name = f"{label}{i}"
            deck = h.small_deck(work, name, corpus, run={"steps": 12},
                                model={"d_model": 64}, data={"global_batch": 8},
                                parallel={"strategy": "hsdp", "overlap": False, "inter_node_gbps": gbps})
            runs[label] = hosts.train(args.exe, 4, deck, os.path.join(work, name), name)
        fast, slow = runs["fast"], runs["slow"]
        h.check(fast["loss"] == slow["loss"] and fast["params"] == slow["params"],
                f"round {i}: the emulated link changes no number")
        h.check("inter-node link emulated at 0.0020 GB/s" in slow["stdout"], f"round {i}: the settings say so")

        def median_ms(result):
            return statistics.median(r["ms"] for r in result["rows"] if r["kind"] == "train" and r["step"] >= 3)

        inter = statistics.median(r["comm_inter_bytes"] for r in slow["rows"] if r["kind"] == "train" and r["step"] >= 3)
        predicted = inter / (GBPS * 1e9) * 1e3
        measured = median_ms(slow) - median_ms(fast)
        ratios.append(measured / predicted)
        print(f"round {i}: {median_ms(fast):.1f} ms/step on TCP, {median_ms(slow):.1f} ms/step emulated; "
              f"{inter:.0f} inter-node bytes per step: measured extra {measured:.1f} ms, predicted {predicted:.1f} ms")
    mean = sum(ratios) / len(ratios)
    h.check(abs(mean - 1) <= 0.25, f"the measured slowdown is within 25% of the predicted one "
                                   f"(measured / predicted {mean:.2f}; rounds {', '.join(f'{r:.2f}' for r in ratios)})")
print("passed")
