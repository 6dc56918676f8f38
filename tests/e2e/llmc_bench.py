"""tools/llmc_bench.py (gpu_check.sh's phase llm.c beside shardtrain), what of it runs without a GPU:
- the token file it trains both on: written by the real `shardtrain tokenize`, it is llm.c's format
  (256 x int32 header, magic 20240520, version 1, the count; uint16 tokens: "Hello world" is GPT-2's
  15496 995), and the check rejects a wrong magic, version or length;
- the parser, on train_gpt2cu output made here from the printf format strings of llm.c's
  train_gpt2.cu (not a captured run: no GPU has run it): every step's ms, loss and MFU, the
  parameter count and shape, so llm.c's FLOPs a token are its 6 N + 6 L C T = 803,478,528;
- the table: medians over the steps after the first two of every round, tokens/s from the ms, MFU by
  that count against a given peak, shardtrain / llm.c, a failed program marked failed;
- the whole tool with a stand-in train_gpt2cu (a script that checks the command line the tool gives
  llm.c and prints that output) and the real shardtrain, whose GPU run fails on a machine without
  one: llm.c's row has its figures, shardtrain's says failed, exit code 1."""
import importlib.util
import json
import os
import stat
import subprocess
import sys

import harness as h

args = h.parse_args()
tool_path = os.path.join(args.source, "tools", "llmc_bench.py")
spec = importlib.util.spec_from_file_location("llmc_bench", tool_path)
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
work = h.tmpdir()


# ---- llm.c's output, from train_gpt2.cu's format strings ----
def llmc_output(steps, batch, ms_of_step, device="NVIDIA H100 80GB HBM3", peak_tflops=989.4):
    """What train_gpt2cu prints for `-e d12 -b batch -t 1024 -x steps`: the printf0 format strings of
    train_gpt2.cu (its settings table, allocation lines and step line), filled in with Python's %,
    which formats these conversions as C's printf does (%+.2f of NaN included: +nan)."""
    lines = ["Multi-GPU support is disabled. Using a single GPU.",
             "+-----------------------+----------------------------------------------------+",
             "| Parameter             | Value                                              |",
             "+-----------------------+----------------------------------------------------+",
             "| micro batch size B    | %-50d |" % batch,
             "| sequence length T     | %-50d |" % 1024,
             "| total batch size      | %-50d |" % (batch * 1024),
             "| learning rate (LR)    | %-50e |" % 6e-4,
             "| max_steps             | %-50d |" % steps,
             "| recompute             | %-50d |" % 0,
             "| device                | %-50s |" % device,
             "| peak TFlops           | %-50.1f |" % peak_tflops,
             "| precision             | %-50s |" % "BF16",
             "| weight init method    | %-50s |" % "d12",
             "| max_sequence_length T | %-50d |" % 1024,
             "| vocab_size V          | %-50d |" % 50257,
             "| padded_vocab_size Vp  | %-50d |" % 50304,
             "| num_layers L          | %-50d |" % 12,
             "| num_heads NH          | %-50d |" % 12,
             "| channels C            | %-50d |" % 768,
             "| num_parameters        | %-50d |" % 124475904,
             "+-----------------------+----------------------------------------------------+",
             "num_parameters: %d => bytes: %d" % (124475904, 248951808),
             "allocated %d MiB for model parameters" % 237,
             "batch_size B=%d * seq_len T=%d * num_processes=%d and total_batch_size=%d" % (batch, 1024, 1, batch * 1024),
             "=> setting grad_accum_steps=%d" % 1,
             "allocating %d MiB for activations" % 9000,
             "device memory usage: %d MiB / %d MiB" % (12345, 81559),
             "val loss %f" % 11.01]
    ema = 0.0
    for step in range(steps):
        ms = ms_of_step(step)
        tps = batch * 1024 / ms * 1000
        ema = tps if step == 0 else 0.95 * ema + 0.05 * tps
        shown = tps if step == 0 else ema / (1 - 0.95 ** step)
        mfu = 803478528 * batch * 1024 / (ms / 1000) / (peak_tflops * 1e12) if peak_tflops > 0 else -1.0
        z = float("nan") if step < 2 else 0.5
        lines.append("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | "
                     "%.0f tok/s" % (step + 1, steps, 11.0 - 0.1 * step, z, 3.5, z, 6e-4, ms, 100 * mfu, shown))
    lines += ["val loss %f" % 10.2, "total average iteration time: %f ms" % 170.0]
    return "\n".join(lines) + "\n"


step_ms = [900.0, 400.0, 170.0, 171.5, 169.25, 172.0]  # two warm-up steps, then four
text = llmc_output(6, 16, lambda s: step_ms[s])
parsed = tool.parse_llmc(text)
h.check([s["ms"] for s in parsed["steps"]] == step_ms and [s["step"] for s in parsed["steps"]] == [1, 2, 3, 4, 5, 6],
        f"every step line is read, with its ms ({[s['ms'] for s in parsed['steps']]})")
h.check(abs(parsed["steps"][0]["loss"] - 11.0) < 1e-9 and abs(parsed["steps"][5]["loss"] - 10.5) < 1e-9
        and parsed["steps"][2]["lr"] == 6e-4, "and its loss and learning rate (through the +nan z-scores)")
h.check(abs(parsed["steps"][2]["mfu"] - 0.078) < 1e-9, f"llm.c's own MFU, as a fraction ({parsed['steps'][2]['mfu']})")
h.check(parsed["num_parameters"] == 124475904 and parsed["settings"]["num_layers L"] == "12"
        and parsed["settings"]["channels C"] == "768" and parsed["settings"]["sequence length T"] == "1024"
        and parsed["settings"]["device"] == "NVIDIA H100 80GB HBM3" and parsed["device_memory_mib"] == 12345
        and parsed["grad_accum_steps"] == 1, "the parameter count, the shape, the device and its memory line")
flops = tool.llmc_flops_per_token(parsed)
h.check(flops == 6 * 124475904 + 6 * 12 * 768 * 1024 == 803478528,
        f"llm.c's FLOPs a token: 6 N + 6 L C T = 803,478,528 (got {flops})")
h.check(tool.datasheet_peak("989.0 TFLOP/s per GPU, the datasheet peak (H100 SXM, bf16 dense)") == (989e12, "H100 SXM, bf16 dense")
        and tool.datasheet_peak("the measured GEMM rate (no datasheet peak is known for this GPU)") is None,
        "the datasheet peak is read from shardtrain's 'MFU against' row, and only a datasheet peak")

# ---- the table ----
peak = (989e12, "H100 SXM, bf16 dense")
second = tool.parse_llmc(llmc_output(6, 16, lambda s: [800.0, 300.0, 168.0, 174.0, 170.5, 171.0][s]))
st_row = lambda ms, mfu: {"steps": [ms], "mfu": mfu, "peak_device_memory": "14.20 GiB", "loss_first": 10.9,
                          "loss_last": 10.4, "mfu_against": "989.0 TFLOP/s per GPU, the datasheet peak (H100 SXM, bf16 dense)"}
runs = [{"program": "llm.c", "round": 1, "parsed": parsed, "peak_mib": 13000, "before_mib": 0},
        {"program": "shardtrain", "round": 1, "row": st_row([200.0, 190.0, 210.0, 205.0], 0.4), "peak_mib": 15000,
         "before_mib": 0},
        {"program": "llm.c", "round": 2, "parsed": second, "peak_mib": 13100, "before_mib": 0},
        {"program": "shardtrain", "round": 2, "row": st_row([195.0, 200.0, 202.0, 198.0], 0.41), "peak_mib": 15100,
         "before_mib": 0}]
table, summary = tool.side_by_side(runs, 16, 6, flops, peak, "llm.c f1e2ace65149")
llmc_row, st = summary["programs"]
llmc_kept = [170.0, 171.5, 169.25, 172.0, 168.0, 174.0, 170.5, 171.0]
st_kept = [200.0, 190.0, 210.0, 205.0, 195.0, 200.0, 202.0, 198.0]
median = lambda v: sorted(v)[len(v) // 2 - 1: len(v) // 2 + 1]
h.check(llmc_row["ms"] == sum(median(llmc_kept)) / 2 == 170.75 and st["ms"] == 200.0,
        f"step ms: the median over steps 3-6 of both rounds (llm.c {llmc_row['ms']}, shardtrain {st['ms']})")
tps = lambda ms: 16 * 1024 * 1000 / ms
expected_llmc_tps = sum(sorted(tps(m) for m in llmc_kept)[3:5]) / 2
h.check(abs(llmc_row["tokens_per_s"] - expected_llmc_tps) < 1e-6 and abs(st["tokens_per_s"] - tps(200.0)) < 1e-6,
        f"tokens/s: the median of 16 x 1024 / each step's time ({llmc_row['tokens_per_s']:.1f}, {st['tokens_per_s']:.1f})")
h.check(abs(summary["ratio_tokens_per_s"] - tps(200.0) / expected_llmc_tps) < 1e-12,
        f"shardtrain / llm.c tokens/s ({summary['ratio_tokens_per_s']:.4f})")
h.check(abs(llmc_row["mfu"] - 803478528 * expected_llmc_tps / 989e12) < 1e-12
        and abs(st["mfu"] - 803478528 * tps(200.0) / 989e12) < 1e-12,
        f"MFU by llm.c's count against 989 TFLOP/s, the same for both ({100 * llmc_row['mfu']:.2f}%, {100 * st['mfu']:.2f}%)")
h.check(abs(st["own_mfu"] - 0.405) < 1e-12 and llmc_row["peak_mib"] == 13100 and st["peak_mib"] == 15100
        and llmc_row["own_memory"] == 12345, "each program's own MFU and memory figure, and nvidia-smi's peak")
md = "\n".join(table)
h.check(f"| llm.c train_gpt2cu | {expected_llmc_tps:.0f} | 170.8 | {100 * llmc_row['mfu']:.1f}% | " in md
        and "| shardtrain | 81920 | 200.0 | " in md and "shardtrain / llm.c tokens/s: " in md
        and "llm.c round 2 step ms: 168.00 174.00 170.50 171.00" in md and "medians of steps 3-6" in md,
        "the markdown table has both rows, the ratio and every kept step")
failed_runs = [runs[0], {"program": "shardtrain", "round": 1, "failed": "exit 1", "tail": ""}]
table, summary = tool.side_by_side(failed_runs, 16, 6, flops, peak)
md = "\n".join(table)
h.check("| shardtrain | failed |" in md and "shardtrain round 1: FAILED (exit 1)" in md
        and "shardtrain / llm.c tokens/s: none (a program failed)" in md
        and summary["ratio_tokens_per_s"] is None, "a program that failed is marked failed, with no ratio")
unknown = tool.parse_llmc(llmc_output(4, 16, lambda s: 170.0, device="NVIDIA H200", peak_tflops=-1.0))
table, summary = tool.side_by_side([{"program": "llm.c", "round": 1, "parsed": unknown, "peak_mib": None,
                                     "before_mib": None}], 16, 4, flops, peak)
h.check(summary["programs"][0]["own_mfu"] is None and "-100" not in "\n".join(table),
        "llm.c's -100% MFU (a GPU its table lacks) is no figure")

# ---- the token file ----
hello = os.path.join(work, "hello.txt")
with open(hello, "w") as f:
    f.write("Hello world")
tokens = os.path.join(work, "hello.bin")
proc = h.mpirun(args, 1, ["tokenize", hello, tokens])
h.check(proc.returncode == 0, f"shardtrain tokenize writes a token file\n{proc.stdout}{proc.stderr}")
info = tool.check_token_file(tokens)
with open(tokens, "rb") as f:
    raw = f.read()
h.check(info["magic"] == 20240520 and info["version"] == 1 and info["tokens"] == 2 and info["bytes"] == 1024 + 4
        and raw[1024:] == (15496).to_bytes(2, "little") + (995).to_bytes(2, "little")
        and raw[12:1024] == bytes(1012), f"llm.c's format: \"Hello world\" is 15496 995 after a 1024-byte header ({info})")
corpus = h.corpus(args)
piece = os.path.join(work, "piece.txt")
with open(corpus, "rb") as f, open(piece, "wb") as g:
    g.write(f.read(300000))
piece_bin = os.path.join(work, "piece.bin")
proc = h.mpirun(args, 1, ["tokenize", piece, piece_bin])
said = [l for l in proc.stdout.splitlines() if l.startswith("wrote ")]
info = tool.check_token_file(piece_bin)
h.check(proc.returncode == 0 and said == [f"wrote {piece_bin}: {info['tokens']} uint16 tokens"]
        and 50000 < info["tokens"] < 150000 and info["max_id"] < 50257,
        f"300 kB of the training text: {info['tokens']} tokens, the count tokenize printed, ids below 50257")


def corrupt(name, change):
    data = bytearray(raw)
    change(data)
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path


for name, change, expected in [
        ("magic.bin", lambda d: d.__setitem__(slice(0, 4), (20240801).to_bytes(4, "little")), "magic 20240801, not llm.c's 20240520"),
        ("version.bin", lambda d: d.__setitem__(slice(4, 8), (7).to_bytes(4, "little")), "version 7, not 1"),
        ("short.bin", lambda d: d.__delitem__(slice(-1, None)), "declares 2 tokens (1028 bytes with the header) but has 1027"),
        ("count.bin", lambda d: d.__setitem__(slice(8, 12), (0).to_bytes(4, "little")), "declares 0 tokens")]:
    path = corrupt(name, change)
    try:
        tool.check_token_file(path)
        h.fail(f"{name}: accepted")
    except ValueError as e:
        h.check(expected in str(e), f"{name} is rejected: {e}")
proc = subprocess.run([sys.executable, tool_path, "--check-data", os.path.join(work, "magic.bin")], capture_output=True,
                      text=True)
h.check(proc.returncode == 1 and "not llm.c's 20240520" in proc.stdout, f"--check-data exits 1 on it: {proc.stdout.strip()}")
proc = subprocess.run([sys.executable, tool_path, "--check-data", tokens], capture_output=True, text=True)
h.check(proc.returncode == 0 and "magic 20240520, version 1, 2 uint16 tokens (1028 bytes), largest id 15496" in proc.stdout,
        f"and 0 on a good one: {proc.stdout.strip()}")

# ---- the whole tool, with a stand-in train_gpt2cu ----
sample = os.path.join(work, "llmc_sample.txt")
fake = os.path.join(work, "train_gpt2cu")
with open(fake, "w") as f:
    f.write(f"""#!{sys.executable}
import sys
argv = sys.argv[1:]
opts = dict(zip(argv[0::2], argv[1::2]))
want = {{"-e": "d12", "-b": "4", "-t": "1024", "-d": "4096", "-x": "5", "-r": "0", "-s": "0", "-m": "1"}}
bad = {{k: opts.get(k) for k, v in want.items() if opts.get(k) != v}}
if bad or opts.get("-i") != opts.get("-j") or not opts.get("-i", "").endswith("tokens.bin"):
    print("unexpected command line:", argv, bad)
    sys.exit(3)
with open({sample!r}) as f:
    sys.stdout.write(f.read())
""")
os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
with open(sample, "w") as f:
    f.write(llmc_output(5, 4, lambda s: [500.0, 200.0, 50.0, 52.0, 51.0][s]))
out = os.path.join(work, "out")
os.makedirs(out)
proc = subprocess.run([sys.executable, tool_path, "--exe", args.exe, "--mpiexec", args.mpiexec, "--llmc", fake,
                       "--batch", "4", "--steps", "5", "--rounds", "1", "--text", piece, "--out", out,
                       "--llmc-source", os.path.join(work, "none")], capture_output=True, text=True, timeout=600)
md_path = os.path.join(out, "llmc_side_by_side_b4.md")
md = open(md_path).read() if os.path.exists(md_path) else ""
summary = json.load(open(os.path.join(out, "llmc_side_by_side_b4.json"))) if md else {}
h.check(proc.returncode == 1 and "| llm.c train_gpt2cu | 80314 | 51.0 | " in md and "| shardtrain | failed |" in md
        and "llm.c round 1 step ms: 50.00 52.00 51.00" in md and summary.get("data", {}).get("tokens") == info["tokens"],
        f"the tool end to end: llm.c's figures from the stand-in, shardtrain failed without a GPU, exit 1\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
print("passed")
