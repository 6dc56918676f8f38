#!/usr/bin/env python3
"""llm.c's train_gpt2cu beside shardtrain on one GPU, on the same shape and the same tokens: GPT-2
124M from random init, bf16, --batch sequences of 1024 tokens per step, no gradient accumulation,
no recomputation. Called by tools/gpu_check.sh (phase llmc); usable alone:

  llmc_bench.py --exe build-cuda/shardtrain --llmc build-cuda/llmc/train_gpt2cu --batch 16 --out DIR

1. Encodes --text (default data/fortunes.txt) with `shardtrain tokenize` (GPT-2's tokenizer) into
   one token file in llm.c's format (256 x int32 header: magic 20240520, version 1, the token
   count; then uint16 tokens) and checks it as llm.c's dataloader does (llmc/dataloader.h).
2. Runs the two in turn, --rounds times (llm.c, shardtrain, llm.c, shardtrain, ...: a drift of
   the card touches both alike), --steps steps each: llm.c as
   `train_gpt2cu -e d12 -b B -t 1024 -d B*1024 -r 0 -i DATA -j DATA ...` (one validation batch
   before step 1, no sampling), shardtrain through tools/gpu_bench.py --settings bf16/none
   --data DATA (its deck and shape, the same learning rate and warm-up).
3. Writes llmc_side_by_side_bB.md and .json to --out: every step's time, and per program the
   medians over the steps after the first two of each run (llm.c itself leaves out only its
   first step; both leave out two here, as gpu_bench.py does) of tokens/s (B x 1024 / step time:
   llm.c's printed tok/s is a moving average, so it is recomputed from each step's ms), step ms,
   MFU counted as llm.c counts it (6 N + 6 L C T FLOPs a token, N and L, C, T as llm.c prints them)
   against the datasheet peak shardtrain names for the GPU, each program's own MFU as it prints
   it, the device's memory in use at most while each runs (nvidia-smi every 100 ms, the same
   yardstick for both) and each program's own memory figure; then shardtrain / llm.c tokens/s.

--check-data FILE checks a token file as step 1 does; --parse-llmc FILE prints what the parser
reads from a saved train_gpt2cu output (JSON)."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

HEADER_INTS = 256
MAGIC, VERSION = 20240520, 1  # llm.c's uint16 token files (dev/data/data_common.py, llmc/dataloader.h)
SKIP_STEPS = 2  # the first two steps of each run are left out of the medians
SEQ_LEN = 1024
GPT2_VOCAB = 50257

# train_gpt2.cu's step line, from its format string
#   "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s\n"
# (the z-scores print as +nan for the first steps; MFU prints -100.0% for a GPU its table lacks).
STEP_LINE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \((\S+)z\)\| norm (\S+) \((\S+)z\)\| lr (\S+) \| "
                       r"(\S+) ms \| (\S+)% bf16 MFU \| (\S+) tok/s\s*$")
# Its settings table's rows, "| %-21s | %-50s |".
TABLE_ROW = re.compile(r"^\| (.{21}) \| (.*?)\s*\|\s*$")


def check_token_file(path):
    """The header and size of an llm.c token file (uint16 tokens), checked as llm.c's dataloader
    checks them, and the largest token id. Raises ValueError saying what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_INTS * 4:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the {HEADER_INTS * 4}-byte header")
    header = [int.from_bytes(data[4 * i:4 * i + 4], "little", signed=True) for i in range(3)]
    if header[0] != MAGIC:
        raise ValueError(f"{path}: magic {header[0]}, not llm.c's {MAGIC}")
    if header[1] != VERSION:
        raise ValueError(f"{path}: version {header[1]}, not {VERSION} (uint16 tokens)")
    count = header[2]
    if count <= 0:
        raise ValueError(f"{path}: declares {count} tokens")
    if len(data) != HEADER_INTS * 4 + 2 * count:
        raise ValueError(f"{path}: declares {count} tokens ({HEADER_INTS * 4 + 2 * count} bytes with the header) "
                         f"but has {len(data)} bytes")
    body = memoryview(data)[HEADER_INTS * 4:].cast("H")  # little-endian hosts, as llm.c reads it
    return {"path": path, "magic": header[0], "version": header[1], "tokens": count, "bytes": len(data),
            "max_id": max(body)}


def parse_llmc(text):
    """What train_gpt2cu printed: its settings (the table's rows, the parameter count, the device
    memory line, the accumulation steps) and every step line."""
    out = {"settings": {}, "steps": [], "num_parameters": None, "device_memory_mib": None, "grad_accum_steps": None}
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        if m:
            out["steps"].append({"step": int(m[1]), "of": int(m[2]), "loss": float(m[3]), "norm": float(m[5]),
                                 "lr": float(m[7]), "ms": float(m[8]), "mfu": float(m[9]) / 100,
                                 "ema_tokens_per_s": float(m[10])})
            continue
        m = TABLE_ROW.match(line)
        if m and m[1].strip() and m[1].strip() != "Parameter":
            out["settings"][m[1].strip()] = m[2]
            continue
        m = re.match(r"^num_parameters: (\d+) => bytes: (\d+)", line)
        if m:
            out["num_parameters"] = int(m[1])
        m = re.match(r"^device memory usage: (\d+) MiB / (\d+) MiB", line)
        if m:
            out["device_memory_mib"] = int(m[1])
        m = re.match(r"^=> setting grad_accum_steps=(\d+)", line)
        if m:
            out["grad_accum_steps"] = int(m[1])
    return out


def llmc_flops_per_token(parsed):
    """llm.c's count (gpt2_estimate_mfu): 6 N + 6 L C T, N every parameter, the padded vocabulary's
    rows included; L, C, T as its settings table prints them."""
    s = parsed["settings"]
    n, layers, channels, seq = (parsed["num_parameters"], int(s["num_layers L"]), int(s["channels C"]),
                                int(s["sequence length T"]))
    return 6 * n + 6 * layers * channels * seq


def datasheet_peak(mfu_against):
    """The TFLOP/s of shardtrain's 'MFU against' row ('989.0 TFLOP/s per GPU, the datasheet peak
    (H100 SXM, bf16 dense)'), or None where it names no datasheet peak."""
    m = re.match(r"^([\d.]+) TFLOP/s per GPU, the datasheet peak \((.*)\)$", mfu_against or "")
    return (float(m[1]) * 1e12, m[2]) if m else None


class DeviceMemory:
    """The device's memory in use at most while a program runs: nvidia-smi every 100 ms, and once
    before it starts (what others hold). None without nvidia-smi."""

    def __init__(self):
        self.samples, self.before, self.proc, self.thread = [], None, None, None

    @staticmethod
    def _query(extra=()):
        return ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0", *extra]

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            first = subprocess.run(self._query(), capture_output=True, text=True)
            self.before = int(first.stdout.split()[0]) if first.returncode == 0 and first.stdout.split() else None
            self.proc = subprocess.Popen(self._query(["-lms", "100"]), stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append(int(line.strip()))

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.thread.join(timeout=10)

    def peak_mib(self):
        return max(self.samples) if self.samples else None


def llmc_command(llmc, data, batch, steps):
    return [llmc, "-i", data, "-j", data, "-e", "d12", "-b", str(batch), "-t", str(SEQ_LEN),
            "-d", str(batch * SEQ_LEN), "-x", str(steps), "-r", "0", "-l", "6e-4", "-u", "2",
            "-v", "1000000", "-m", "1", "-s", "0", "-h", "0", "-n", "0"]


def run_llmc(args, data, work, round_index):
    with DeviceMemory() as memory:
        try:
            proc = subprocess.run(llmc_command(os.path.abspath(args.llmc), data, args.batch, args.steps),
                                  capture_output=True, text=True, timeout=300, cwd=work)
            text, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            text, rc = text + "\n(ran past 300 s)", 124
    with open(os.path.join(work, f"llmc_r{round_index + 1}.log"), "w") as f:
        f.write(text)
    parsed = parse_llmc(text)
    run = {"program": "llm.c", "round": round_index + 1, "exit": rc, "peak_mib": memory.peak_mib(),
           "before_mib": memory.before, "parsed": parsed}
    if rc != 0 or len(parsed["steps"]) != args.steps:
        run["failed"] = f"exit {rc}, {len(parsed['steps'])} of {args.steps} step lines"
        run["tail"] = text[-2000:]
    return run


def run_shardtrain(args, data, work, round_index):
    tag = f"_llmc_b{args.batch}_r{round_index + 1}"
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_bench.py"), "--exe", args.exe,
           "--mpiexec", args.mpiexec, "--steps", str(args.steps), "--batch", str(args.batch), "--settings", "bf16/none",
           "--data", data, "--out", work, "--tag", tag]
    with DeviceMemory() as memory:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=330)
            text, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            text, rc = "gpu_bench.py ran past 330 s", 124
    run = {"program": "shardtrain", "round": round_index + 1, "exit": rc, "peak_mib": memory.peak_mib(),
           "before_mib": memory.before}
    try:
        with open(os.path.join(work, f"gpu_bench{tag}.json")) as f:
            row = json.load(f)[0]
    except (OSError, ValueError, IndexError):
        row = {"failed": True}
    run["row"] = row
    if rc != 0 or row.get("failed"):
        run["failed"] = f"exit {rc}"
        run["tail"] = text[-2000:]
    return run


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def side_by_side(runs, batch, steps, flops_per_token=None, peak=None, llmc_source=""):
    """The table (markdown lines) and the summary (JSON) from each run's record: llm.c's with its
    parsed output, shardtrain's with gpu_bench.py's row (steps: the step ms after the first two)."""
    tokens = batch * SEQ_LEN
    programs = {}
    for run in runs:
        entry = programs.setdefault(run["program"], {"program": run["program"], "rounds": [], "failed_rounds": []})
        if run.get("failed"):
            entry["failed_rounds"].append({"round": run["round"], "why": run["failed"]})
            continue
        if run["program"] == "llm.c":
            kept = run["parsed"]["steps"][SKIP_STEPS:]
            ms = [s["ms"] for s in kept]
            own_mfu = [s["mfu"] if s["mfu"] >= 0 else None for s in kept]  # -1: llm.c's table lacks the GPU
            own_memory = run["parsed"]["device_memory_mib"]
            loss = (kept[0]["loss"], kept[-1]["loss"]) if kept else (None, None)
        else:
            row = run["row"]
            ms = row["steps"][0]
            own_mfu = [row.get("mfu")]
            own_memory = row.get("peak_device_memory")
            loss = (row.get("loss_first"), row.get("loss_last"))
        entry["rounds"].append({"round": run["round"], "ms": ms, "own_mfu": own_mfu, "own_memory": own_memory,
                                "peak_mib": run["peak_mib"], "before_mib": run["before_mib"], "loss": loss})
    rows = []
    for name in ("llm.c", "shardtrain"):
        entry = programs.get(name, {"program": name, "rounds": [], "failed_rounds": []})
        ms = [m for r in entry["rounds"] for m in r["ms"]]
        row = {"program": name, "rounds": entry["rounds"], "failed_rounds": entry["failed_rounds"]}
        if ms:
            tps = [tokens * 1000.0 / m for m in ms]
            row.update({"tokens_per_s": statistics.median(tps), "ms": statistics.median(ms),
                        "mfu": statistics.median(flops_per_token * t / peak[0] for t in tps)
                        if flops_per_token and peak else None,
                        "own_mfu": median_or_none(v for r in entry["rounds"] for v in r["own_mfu"]),
                        "peak_mib": max((r["peak_mib"] for r in entry["rounds"] if r["peak_mib"] is not None),
                                        default=None),
                        "own_memory": entry["rounds"][-1]["own_memory"],
                        "loss": entry["rounds"][0]["loss"]})
        rows.append(row)
    llmc_row, st_row = rows
    ratio = (st_row["tokens_per_s"] / llmc_row["tokens_per_s"]
             if "tokens_per_s" in st_row and "tokens_per_s" in llmc_row else None)
    rounds = max((run["round"] for run in runs), default=0)
    count = (f"llm.c's count, {flops_per_token / 1e6:.1f} MFLOP a token, against {peak[0] / 1e12:.1f} TFLOP/s "
             f"({peak[1]})" if flops_per_token and peak else "llm.c's count; no datasheet peak known")
    table = [f"GPT-2 124M from random init, bf16, {batch} x {SEQ_LEN} tokens per step, no gradient accumulation, one GPU;"
             f" llm.c's train_gpt2cu{' (' + llmc_source + ')' if llmc_source else ''} and shardtrain in turn, "
             f"{rounds} round(s) of {steps} steps; medians of steps {SKIP_STEPS + 1}-{steps} of each run; MFU by {count}",
             "",
             "| program | tokens/s | step ms | MFU (llm.c's count) | MFU as it prints it | device memory at most "
             "(nvidia-smi) | its own memory figure | loss (first kept step, last) |",
             "|---|---|---|---|---|---|---|---|"]

    def cell(value, fmt):
        return "" if value is None else fmt.format(value)

    def percent(value):
        return "" if value is None else f"{100 * value:.1f}%"

    for r in rows:
        label = "llm.c train_gpt2cu" if r["program"] == "llm.c" else "shardtrain"
        if "tokens_per_s" not in r:
            table.append(f"| {label} | failed | | | | | | |")
            continue
        own_memory = r["own_memory"]
        own_memory = (f"{own_memory} MiB in use after allocating" if r["program"] == "llm.c" and own_memory is not None
                      else cell(own_memory, "{} at most"))
        loss = r["loss"]
        table.append(f"| {label} | {r['tokens_per_s']:.0f} | {r['ms']:.1f} | {percent(r['mfu'])} | "
                     f"{percent(r['own_mfu'])} | {cell(r['peak_mib'], '{} MiB')} | "
                     f"{own_memory} | {cell(loss[0], '{:.3f}')}, {cell(loss[1], '{:.3f}')} |")
    table += ["", f"shardtrain / llm.c tokens/s: {cell(ratio, '{:.3f}') or 'none (a program failed)'}", ""]
    for r in rows:
        for rd in r["rounds"]:
            table.append(f"{r['program']} round {rd['round']} step ms: " + " ".join(f"{m:.2f}" for m in rd["ms"]))
        for fr in r["failed_rounds"]:
            table.append(f"{r['program']} round {fr['round']}: FAILED ({fr['why']})")
    summary = {"batch": batch, "seq_len": SEQ_LEN, "steps": steps, "skipped_steps": SKIP_STEPS,
               "flops_per_token": flops_per_token, "peak_flops": peak[0] if peak else None,
               "peak": peak[1] if peak else None, "llmc_source": llmc_source, "ratio_tokens_per_s": ratio,
               "programs": rows}
    return table, summary


def prepare_data(args, work):
    data = os.path.join(work, "tokens.bin")
    proc = subprocess.run([args.mpiexec, "-n", "1", args.exe, "tokenize", args.text, data], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise ValueError(f"shardtrain tokenize failed (exit {proc.returncode}):\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    info = check_token_file(data)
    if info["tokens"] < args.batch * SEQ_LEN + 1:
        raise ValueError(f"{data}: {info['tokens']} tokens; llm.c needs at least B T + 1 = {args.batch * SEQ_LEN + 1}")
    if info["max_id"] >= GPT2_VOCAB:
        raise ValueError(f"{data}: token id {info['max_id']} is outside GPT-2's vocabulary of {GPT2_VOCAB}")
    return data, info


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exe", help="shardtrain (a CUDA build)")
    p.add_argument("--llmc", help="llm.c's train_gpt2cu")
    p.add_argument("--llmc-source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".gpudeps",
                                                         "llm.c"), help="the staged copy (its SNAPSHOT names it)")
    p.add_argument("--mpiexec", default="mpirun")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--text", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                  "fortunes.txt"))
    p.add_argument("--out", default=".")
    p.add_argument("--check-data", metavar="FILE", help="check an llm.c token file and stop")
    p.add_argument("--parse-llmc", metavar="FILE", help="print what a saved train_gpt2cu output parses to and stop")
    args = p.parse_args()
    if args.check_data:
        try:
            info = check_token_file(args.check_data)
        except (OSError, ValueError) as e:
            print(f"llmc_bench: {e}")
            return 1
        print(f"{info['path']}: magic {info['magic']}, version {info['version']}, {info['tokens']} uint16 tokens "
              f"({info['bytes']} bytes), largest id {info['max_id']}")
        return 0
    if args.parse_llmc:
        with open(args.parse_llmc) as f:
            print(json.dumps(parse_llmc(f.read()), indent=1))
        return 0
    if not args.exe or not args.llmc:
        p.error("--exe and --llmc are needed to run")
    if args.steps < SKIP_STEPS + 1:
        p.error(f"--steps must be at least {SKIP_STEPS + 1} (the first {SKIP_STEPS} are left out)")
    work = tempfile.mkdtemp(prefix="st_llmc_bench_")
    try:
        data, info = prepare_data(args, work)
    except (OSError, ValueError) as e:
        print(f"llmc_bench: {e}", flush=True)
        return 1
    print(f"data: {info['tokens']} tokens of {args.text} in llm.c's format (magic {info['magic']}, version "
          f"{info['version']}), largest id {info['max_id']}", flush=True)
    runs = []
    for round_index in range(args.rounds):
        for runner in (run_llmc, run_shardtrain):
            run = runner(args, data, work, round_index)
            runs.append(run)
            label = f"{run['program']} round {run['round']}"
            if run.get("failed"):
                print(f"{label}: FAILED ({run['failed']})\n{run['tail']}", flush=True)
            else:
                ms = ([s["ms"] for s in run["parsed"]["steps"]] if run["program"] == "llm.c"
                      else run["row"]["steps"][0])
                print(f"{label}: ms " + " ".join(f"{m:.1f}" for m in ms) + f" | device memory at most "
                      f"{run['peak_mib']} MiB", flush=True)
    flops, peak = None, None
    parsed = next((r["parsed"] for r in runs if r["program"] == "llm.c" and not r.get("failed")), None)
    if parsed:
        flops = llmc_flops_per_token(parsed)
    st = next((r["row"] for r in runs if r["program"] == "shardtrain" and not r.get("failed")), None)
    if st:
        peak = datasheet_peak(st.get("mfu_against"))
    if peak is None and parsed and float(parsed["settings"].get("peak TFlops", "-1")) > 0:
        peak = (float(parsed["settings"]["peak TFlops"]) * 1e12, "llm.c's table for " +
                parsed["settings"].get("device", "this GPU"))
    source = ""
    snapshot = os.path.join(args.llmc_source, "SNAPSHOT")
    if os.path.exists(snapshot):
        m = re.search(r" at ([0-9a-f]{40})", open(snapshot).read())
        source = f"llm.c {m[1][:12]}" if m else "llm.c, a plain copy"
    table, summary = side_by_side(runs, args.batch, args.steps, flops, peak, source)
    summary["data"] = info
    summary["device"] = parsed["settings"].get("device") if parsed else None
    print("\n" + "\n".join(table), flush=True)
    with open(os.path.join(args.out, f"llmc_side_by_side_b{args.batch}.md"), "w") as f:
        f.write("\n".join(table) + "\n")
    with open(os.path.join(args.out, f"llmc_side_by_side_b{args.batch}.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 1 if any(r.get("failed") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
