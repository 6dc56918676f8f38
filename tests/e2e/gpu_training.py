"""Training on GPUs (CUDA builds), against the CPU path of the same executable:

- Without a usable GPU: parallel.device = "cuda" is refused on every rank with the driver's
  reason and what to change; "auto" trains on the CPU and says why. Then the GPU checks skip,
  printing the driver's message.
- With GPUs: 50 steps of a small GPT on one GPU in fp32 match the CPU run's losses within bf16
  tolerance (1e-2; the first step's within 1e-4: other summation orders, same maths) and its
  final parameters; in bf16 the losses stay within bf16 tolerance of the CPU's bf16 run. Every strategy on as many GPUs as the
  machine has (one rank per GPU) matches the one-GPU run, and so does every strategy on 2 and 4
  ranks sharing one GPU, each its own emulated node, and a pipeline of 2 stages on it (GPT-2 and
  the Llama; 1f1b, interleaved, and with zero1 over 2 ranks a stage). A checkpoint written on the GPU
  resumes on the CPU and the reverse, continuing the same run. With two GPUs or more, each layer
  split over 2 GPUs (parallel.tensor = 2, with and without sequence parallelism, GPT-2 and the
  small Llama) matches one GPU within 1e-4. A small Llama (grouped-query
  attention, untied head) trains on one GPU as on the CPU: 30 steps in fp32, losses within 1e-2
  (the first within 1e-4), final parameters within 1e-2.
- Flash attention (bf16, heads 32 wide; the settings table says it runs): 50 GPT-2 steps and 30
  steps of a multi-query Llama within 2e-2 of the CPU's bf16 runs, and the GPT-2 run within 2e-2
  of the GPU's exact path (parallel.attention = "exact"). The bound is bf16 matmuls' own: flash
  attention rounds the probabilities and their gradient to bf16 as the matmuls round their
  operands (one rounding of 2^-9 more on attention's products), and on its own it is within
  1.4e-3 (output) and 3.3e-3 (gradients) of exact attention on the same bf16 inputs
  (gpu.cuda_kernels' FlashAttention.*), an order under the 2e-2 that bf16 runs already drift
  apart by over 50 steps.
- bf16 activations (parallel.activations = "bf16", the CUDA kernels with bf16 storage): 50 GPT-2
  and 30 Llama steps within 2e-2 of the CPU's host reference with bf16 storage (the same bound and
  reason as flash attention's), and of the GPU's fp32 activations; zero1 and zero3 on 2 ranks of
  one GPU within 2e-3 of one rank; a checkpoint resumes on the CPU; heads 48 wide are refused,
  naming the keys."""
import array
import os
import re
import subprocess

import harness as h

args = h.parse_args()
work = h.tmpdir()
corpus = h.corpus(args)


def run(label, ranks, device, sets=(), steps=50, expect=0, **sections):
    parallel = {"device": device}
    parallel.update(sections.pop("parallel", {}))
    deck = h.small_deck(work, label, corpus, run={"steps": steps, "eval_every": 0}, parallel=parallel, **sections)
    params = os.path.join(work, f"{label}.f32")
    argv = ["run", deck, "--save-params", params]
    for s in sets:
        argv += ["--set", s]
    proc = h.mpirun(args, ranks, argv, timeout=240)
    h.check(proc.returncode == expect, f"{label}: exits {expect} (got {proc.returncode})\n{proc.stdout[-1500:]}\n"
                                       f"{proc.stderr[-2000:]}")
    if expect != 0:
        return proc, None, None
    rows = h.metrics(os.path.join(work, label))
    final = array.array("f")
    with open(params, "rb") as f:
        final.frombytes(f.read())
    return proc, [r["loss"] for r in rows if r["kind"] == "train"], final


def close(a, b, rel):
    return len(a) == len(b) and all(abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a, b))


def worst(a, b):
    scale = max(abs(x) for x in b)
    return max(abs(x - y) for x, y in zip(a, b)) / scale


# ---- the device choice ----
deck = h.small_deck(work, "probe", corpus, run={"steps": 1}, parallel={"device": "cuda"})
proc = h.mpirun(args, 1, ["run", deck])
no_gpu = proc.returncode != 0 and "no CUDA device is usable" in proc.stdout + proc.stderr
if no_gpu:
    text = proc.stdout + proc.stderr
    reason = re.search(r"no CUDA device is usable on this node: ([^;]+);", text)
    h.check(reason is not None and reason.group(1).strip() != "",
            f"cuda without a GPU: refused with the driver's reason ({reason and reason.group(1)})")
    h.check('set parallel.device = "cpu"' in text, "cuda without a GPU: says what to change")
    two = h.mpirun(args, 2, ["run", deck])
    h.check(two.returncode != 0 and (two.stdout + two.stderr).count("no CUDA device is usable") >= 1,
            "cuda without a GPU on 2 ranks: every rank stops with the message (no hang)")
    _, losses, _ = run("auto_cpu", 1, "auto", steps=3)
    log = open(os.path.join(work, "auto_cpu", "train.log")).read()
    h.check("no usable CUDA device" in log and len(losses) == 3,
            "auto without a GPU trains on the CPU and the settings table says why")
    print(f"SKIPPED: no usable CUDA device on this machine: {reason.group(1).strip()}")
    raise SystemExit(h.SKIP)

h.check(proc.returncode == 0, f"cuda: a one-step run on the GPU exits 0\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
# GPUs this job may use, as the CUDA runtime will count them (CUDA_VISIBLE_DEVICES applies).
visible = os.environ.get("CUDA_VISIBLE_DEVICES")
if visible is not None:
    gpus = len([d for d in visible.split(",") if d.strip() != ""])
else:
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    gpus = len([l for l in listing.stdout.splitlines() if l.startswith("GPU ")]) if listing.returncode == 0 else 1
gpus = max(gpus, 1)

# ---- GPU against CPU ----
_, cpu, cpu_params = run("cpu_fp32", 1, "cpu")
_, gpu, gpu_params = run("gpu_fp32", 1, "cuda")
h.check(cpu[-1] < cpu[0] - 0.5, "the CPU run learns")
# One step's loss and every gradient are checked at 1e-4 by gpu.cuda_kernels (GpuModel); over 50
# steps the two summation orders drift apart: within bf16's tolerance.
h.check(close(gpu, cpu, 1e-2), f"fp32: 50 GPU steps match the CPU losses within 1e-2 (bf16 tolerance)\n{gpu}\n{cpu}")
h.check(close(gpu[:1], cpu[:1], 1e-4), f"fp32: the first step's loss matches within 1e-4 ({gpu[0]} vs {cpu[0]})")
h.check(worst(gpu_params, cpu_params) <= 1e-2,
        f"fp32: final parameters within 1e-2 of the CPU's (worst {worst(gpu_params, cpu_params):.2e})")
_, cpu_bf16, _ = run("cpu_bf16", 1, "cpu", parallel={"precision": "bf16"})
_, gpu_bf16, _ = run("gpu_bf16", 1, "cuda", parallel={"precision": "bf16"})
h.check(close(gpu_bf16, cpu_bf16, 2e-2), f"bf16: GPU losses within 2e-2 of the CPU's bf16 run\n{gpu_bf16}\n{cpu_bf16}")

# ---- a Llama on the GPU against the CPU (its kernels: RMSNorm, RoPE, SwiGLU, grouped-query attention) ----
LLAMA = {"arch": "llama", "n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "ffn_dim": 48,
         "tie_embeddings": False, "rope_theta": 500000.0}
_, cpu_llama, cpu_llama_params = run("cpu_llama", 1, "cpu", steps=30, model=dict(LLAMA))
_, gpu_llama, gpu_llama_params = run("gpu_llama", 1, "cuda", steps=30, model=dict(LLAMA))
h.check(cpu_llama[-1] < cpu_llama[0] - 0.3, "llama: the CPU run learns")
h.check(close(gpu_llama, cpu_llama, 1e-2), f"llama fp32: 30 GPU steps match the CPU losses within 1e-2\n{gpu_llama}\n"
                                           f"{cpu_llama}")
h.check(close(gpu_llama[:1], cpu_llama[:1], 1e-4),
        f"llama fp32: the first step's loss matches within 1e-4 ({gpu_llama[0]} vs {cpu_llama[0]})")
h.check(worst(gpu_llama_params, cpu_llama_params) <= 1e-2,
        f"llama fp32: final parameters within 1e-2 of the CPU's (worst {worst(gpu_llama_params, cpu_llama_params):.2e})")

# ---- flash attention (bf16, head width 32) against the CPU's bf16 runs and the GPU's exact path ----
def attention_row(label):
    log = open(os.path.join(work, label, "train.log")).read()
    row = re.search(r"^\|\s*attention\s*\|\s*([^|\n]+)", log, re.M)  # the derived row, not the deck key
    return row.group(1).strip() if row else ""


FLASH_GPT = {"d_model": 64, "n_head": 2}  # heads 32 wide
_, cpu_hs32, _ = run("cpu_bf16_hs32", 1, "cpu", parallel={"precision": "bf16"}, model=dict(FLASH_GPT))
_, gpu_flash, _ = run("gpu_bf16_flash", 1, "cuda", parallel={"precision": "bf16"}, model=dict(FLASH_GPT))
_, gpu_exact, _ = run("gpu_bf16_exact", 1, "cuda", parallel={"precision": "bf16", "attention": "exact"},
                      model=dict(FLASH_GPT))
h.check(attention_row("gpu_bf16_flash").startswith("flash"),
        f"bf16, heads 32 wide: the settings table says flash attention ({attention_row('gpu_bf16_flash')})")
h.check(attention_row("gpu_bf16_exact").startswith("exact"),
        f"parallel.attention = exact: the settings table says so ({attention_row('gpu_bf16_exact')})")
h.check(close(gpu_flash, cpu_hs32, 2e-2), f"flash: 50 GPU steps within 2e-2 of the CPU's bf16 run\n{gpu_flash}\n{cpu_hs32}")
h.check(close(gpu_flash, gpu_exact, 2e-2), f"flash: within 2e-2 of the GPU's exact path\n{gpu_flash}\n{gpu_exact}")
LLAMA_FLASH = dict(LLAMA, d_model=64, n_head=2, n_kv_head=1)  # multi-query, heads 32 wide
_, cpu_llama_hs32, _ = run("cpu_llama_bf16_hs32", 1, "cpu", steps=30, parallel={"precision": "bf16"},
                           model=dict(LLAMA_FLASH))
_, gpu_llama_flash, _ = run("gpu_llama_bf16_flash", 1, "cuda", steps=30, parallel={"precision": "bf16"},
                            model=dict(LLAMA_FLASH))
h.check(attention_row("gpu_llama_bf16_flash").startswith("flash"), "llama bf16, heads 32 wide: flash attention")
h.check(close(gpu_llama_flash, cpu_llama_hs32, 2e-2),
        f"llama flash: 30 GPU steps within 2e-2 of the CPU's bf16 run\n{gpu_llama_flash}\n{cpu_llama_hs32}")

# ---- bf16 activations (the CUDA kernels with bf16 storage) against the CPU's host reference ----
# parallel.activations = "bf16": activations, their gradients and the parameters the model reads
# in bf16, weight gradients in fp32. The CPU runs the host's reference kernels, which round at the
# same points; the GPU's flash attention rounds its probabilities inside its products where the
# host keeps fp32, the same difference as the fp32-activation flash runs above: 2e-2 over 50 steps.
BF16_ACT = {"precision": "bf16", "activations": "bf16"}


def activations_row(label):
    log = open(os.path.join(work, label, "train.log")).read()
    row = re.search(r"^\|\s*activations per rank\s*\|\s*([^|\n]+)", log, re.M)
    return row.group(1).strip() if row else ""


_, cpu_act, _ = run("cpu_bf16_act", 1, "cpu", parallel=dict(BF16_ACT), model=dict(FLASH_GPT))
_, gpu_act, gpu_act_params = run("gpu_bf16_act", 1, "cuda", parallel=dict(BF16_ACT), model=dict(FLASH_GPT))
h.check("(bf16;" in activations_row("gpu_bf16_act") and attention_row("gpu_bf16_act").startswith("flash"),
        f"bf16 activations on the GPU: the settings table says bf16 and flash attention "
        f"({activations_row('gpu_bf16_act')}; {attention_row('gpu_bf16_act')})")
h.check(gpu_act[-1] < gpu_act[0] - 0.5, f"bf16 activations on the GPU learn: {gpu_act}")
h.check(close(gpu_act, cpu_act, 2e-2), f"bf16 activations: 50 GPU steps within 2e-2 of the CPU's host reference\n"
                                       f"{gpu_act}\n{cpu_act}")
h.check(close(gpu_act, gpu_flash, 2e-2), f"bf16 activations: within 2e-2 of the GPU's fp32 activations\n"
                                         f"{gpu_act}\n{gpu_flash}")
h.check(gpu_act != gpu_flash, "bf16 activations are not fp32's under another name")
_, cpu_llama_act, _ = run("cpu_llama_bf16_act", 1, "cpu", steps=30, parallel=dict(BF16_ACT), model=dict(LLAMA_FLASH))
_, gpu_llama_act, _ = run("gpu_llama_bf16_act", 1, "cuda", steps=30, parallel=dict(BF16_ACT),
                          model=dict(LLAMA_FLASH))
h.check(close(gpu_llama_act, cpu_llama_act, 2e-2),
        f"llama, bf16 activations: 30 GPU steps within 2e-2 of the CPU's host reference\n{gpu_llama_act}\n"
        f"{cpu_llama_act}")
# A checkpoint of the GPU's bf16-activation run resumes on the CPU's reference and continues.
_, act_full, act_full_params = run("gpu_bf16_act_full", 1, "cuda", steps=8, parallel=dict(BF16_ACT),
                                   model=dict(FLASH_GPT),
                                   checkpoint={"every": 4, "dir": os.path.join(work, "gpu_bf16_act_full", "ckpt")})
_, act_resumed, act_resumed_params = run("gpu_bf16_act_resumed_on_cpu", 1, "cpu", steps=8, parallel=dict(BF16_ACT),
                                         model=dict(FLASH_GPT),
                                         sets=[f"checkpoint.resume={os.path.join(work, 'gpu_bf16_act_full', 'ckpt', 'ckpt_00000004.h5')}"])
h.check(close(act_resumed, act_full[4:], 2e-2) and worst(act_resumed_params, act_full_params) <= 2e-2,
        f"a bf16-activation GPU checkpoint resumes on the CPU: steps 5-8 within 2e-2\n{act_resumed}\n{act_full[4:]}")
# Heads the flash kernels do not cover are refused before anything is allocated, naming the keys.
proc, _, _ = run("gpu_bf16_act_hs48", 1, "cuda", steps=2, expect=2, parallel=dict(BF16_ACT),
                 model={"d_model": 96, "n_head": 2})
text = proc.stdout + proc.stderr
h.check("parallel.activations" in text and "model.d_model / model.n_head" in text and "48 wide" in text,
        f"bf16 activations, heads 48 wide: refused naming the keys\n{text[-1500:]}")

# ---- every strategy on the GPUs against one GPU ----
# A global batch that splits over every GPU count: 12 sequences per GPU.
batch = {"global_batch": 12 * gpus}
_, ref, ref_params = run("gpu_ref", 1, "cuda", steps=20, data=batch)
for strategy in ["ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"]:
    _, losses, params = run(f"gpu_{strategy}_np{gpus}", gpus, "cuda", steps=20, data=batch,
                            parallel={"strategy": strategy})
    h.check(close(losses, ref, 1e-5) and worst(params, ref_params) <= 1e-5,
            f"{strategy} on {gpus} GPU(s) matches one GPU within 1e-5 (worst parameter "
            f"{worst(params, ref_params):.2e})\n{losses}\n{ref}")

# ---- several ranks on one GPU, each its own emulated node ----
# SHARDTRAIN_RANKS_PER_NODE=1 on one visible GPU: every rank computes on it with NCCL
# communicators of one rank, and the ranks sum through MPI in pinned host memory (NCCL refuses
# two ranks of one communicator on one GPU). Every strategy on 2 and 4 ranks equals one GPU
# within 1e-5, and the settings table says how the GPU is shared and what carries the sums.
share_batch = {"global_batch": 12}
_, share_ref, share_ref_params = run("gpu_share_ref", 1, "cuda", steps=20, data=share_batch)
saved = {k: os.environ.get(k) for k in ("SHARDTRAIN_RANKS_PER_NODE", "CUDA_VISIBLE_DEVICES")}
first_gpu = (visible.split(",")[0].strip() if visible else "0") or "0"
os.environ.update({"SHARDTRAIN_RANKS_PER_NODE": "1", "CUDA_VISIBLE_DEVICES": first_gpu})
try:
    for ranks in (2, 4):
        for strategy in ["ddp", "zero1", "zero2", "zero3", "hsdp"]:
            label = f"gpu_share_{strategy}_np{ranks}"
            _, losses, params = run(label, ranks, "cuda", steps=20, data=share_batch, parallel={"strategy": strategy})
            log = open(os.path.join(work, label, "train.log")).read()
            h.check(f"shared by {ranks} ranks of this host" in log and "MPI through pinned host memory" in log,
                    f"{label}: the settings table says the GPU is shared by {ranks} ranks and the sums go through "
                    f"pinned host memory\n{log[:3000]}")
            h.check(close(losses, share_ref, 1e-5) and worst(params, share_ref_params) <= 1e-5,
                    f"{label}: {ranks} ranks on one GPU match one rank within 1e-5 (worst parameter "
                    f"{worst(params, share_ref_params):.2e})\n{losses}\n{share_ref}")
    # bf16 activations shared the same way: zero1 (fp32 gradients held over the micro-batches,
    # reduced once in bf16) and zero3 on 2 ranks against one rank. Each rank's rows are a
    # different split of the batch, so the bf16 roundings of the sums differ a little: 2e-3, as
    # on the CPU (tests/e2e/bf16_activations.py).
    act_batch = {"global_batch": 12, "micro_batch": 3}
    _, act_ref, _ = run("gpu_share_act_ref", 1, "cuda", steps=20, data=act_batch, parallel=dict(BF16_ACT),
                        model=dict(FLASH_GPT))
    for strategy in ("zero1", "zero3"):
        label = f"gpu_share_act_{strategy}_np2"
        _, losses, _ = run(label, 2, "cuda", steps=20, data=act_batch, parallel=dict(BF16_ACT, strategy=strategy),
                           model=dict(FLASH_GPT))
        h.check(close(losses, act_ref, 2e-3), f"{label}: bf16 activations on 2 ranks of one GPU within 2e-3 of one "
                                              f"rank\n{losses}\n{act_ref}")
    # Pipelines on the GPU: stages pass activations and gradients through host memory. GPT-2
    # (tied: the embeddings' gradient summed between the first and last stage) and the Llama
    # (untied), 4 blocks in 2 stages, 1f1b and interleaved, micro-batches of 3 sequences (4 a step
    # through each stage; 2 with zero1 over 2 ranks a stage), against one rank with micro-batches
    # of 3. The layers' products have the same shapes: 1e-5.
    pipe_data = {"global_batch": 12, "micro_batch": 3}
    for label, extra in (("gpt2", {"model": {"n_layer": 4}}), ("llama", {"model": dict(LLAMA, n_layer=4)})):
        _, pipe_ref, pipe_ref_params = run(f"gpu_pipe_{label}_ref", 1, "cuda", steps=20, data=pipe_data, **extra)
        for schedule, ranks, more in (("1f1b", 2, {}), ("interleaved", 2, {"virtual_stages": 2}),
                                      ("1f1b", 4, {"strategy": "zero1"})):
            name = f"gpu_pipe_{label}_{schedule}_np{ranks}"
            _, losses, params = run(name, ranks, "cuda", steps=20, data=pipe_data,
                                    parallel=dict({"pipeline": 2, "pipeline_schedule": schedule}, **more), **extra)
            h.check(close(losses, pipe_ref, 1e-5) and worst(params, pipe_ref_params) <= 1e-5,
                    f"{name}: 2 stages on one GPU match one rank within 1e-5 (worst parameter "
                    f"{worst(params, pipe_ref_params):.2e})\n{losses}\n{pipe_ref}")
finally:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

# ---- tensor parallelism over NCCL inside the node (two GPUs or more) ----
# Each layer split over 2 GPUs, with and without sequence parallelism, GPT-2 and the small Llama,
# against one GPU. The split GEMMs have other shapes than the whole model's, so cuBLAS may sum
# in another order (the data-parallel runs above keep the shapes): 1e-4, not 1e-5.
if gpus >= 2:
    tp_batch = {"global_batch": 12}
    for label, extra in (("gpt2", {}), ("llama", {"model": LLAMA})):
        _, tp_ref, tp_ref_params = run(f"gpu_{label}_tp_ref", 1, "cuda", steps=20, data=tp_batch, **extra)
        for sequence_parallel in (False, True):
            name = f"gpu_{label}_tensor2{'_sp' if sequence_parallel else ''}"
            _, losses, params = run(name, 2, "cuda", steps=20, data=tp_batch,
                                    parallel={"tensor": 2, "sequence_parallel": sequence_parallel}, **extra)
            h.check(close(losses, tp_ref, 1e-4) and worst(params, tp_ref_params) <= 1e-4,
                    f"{name}: tensor 2 on 2 GPUs matches one GPU within 1e-4 (worst parameter "
                    f"{worst(params, tp_ref_params):.2e})\n{losses}\n{tp_ref}")
    # bf16 activations split the same way: the group sums bf16 activations, the vocabulary-parallel
    # fused classifier's slices; within 2e-3 of one GPU, as on the CPU (tests/e2e/bf16_activations.py).
    _, tp_act_ref, _ = run("gpu_tp_act_ref", 1, "cuda", steps=20, data=tp_batch, parallel=dict(BF16_ACT),
                           model=dict(FLASH_GPT))
    _, tp_act, _ = run("gpu_tp_act_tensor2", 2, "cuda", steps=20, data=tp_batch,
                       parallel=dict(BF16_ACT, tensor=2, strategy="ddp"), model=dict(FLASH_GPT))
    h.check(close(tp_act, tp_act_ref, 2e-3), f"bf16 activations, tensor 2 on 2 GPUs within 2e-3 of one GPU\n"
                                             f"{tp_act}\n{tp_act_ref}")
else:
    print(f"tensor parallelism on GPUs: not run, it needs two GPUs in the node ({gpus} here)")

# ---- checkpoints across devices ----
def ckpt(label, step):
    return os.path.join(work, label, "ckpt", f"ckpt_{step:08d}.h5")


for writer, reader in (("cuda", "cpu"), ("cpu", "cuda")):
    _, full, full_params = run(f"full_{writer}", 1, writer, steps=8,
                               checkpoint={"every": 4, "dir": os.path.join(work, f"full_{writer}", "ckpt")})
    _, resumed, resumed_params = run(f"resumed_{writer}_on_{reader}", 1, reader, steps=8,
                                     sets=[f"checkpoint.resume={ckpt(f'full_{writer}', 4)}"])
    h.check(close(resumed, full[4:], 1e-4), f"a {writer} checkpoint resumes on {reader}: steps 5-8 match\n"
                                           f"{resumed}\n{full[4:]}")
    h.check(worst(resumed_params, full_params) <= 1e-3, f"{writer} -> {reader}: final parameters match")
print("passed")
