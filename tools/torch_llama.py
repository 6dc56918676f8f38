"""Llama written with torch.nn.functional over a dict of named tensors that follows shardtrain's
parameter layout (attn.qkv.w = q, k, v projections stacked; mlp.gate_up.w = gate over up), as
transformers' LlamaForCausalLM computes it (eager attention): RMSNorm, rotate-half rotary
embeddings, key/value heads repeated per query group, SwiGLU, no biases. Used by the PyTorch
cross-check test (tests/e2e/torch_llama.py) and as the baseline of the step benchmark.
`cfg` holds n_layer, d_model, n_head, n_kv_head, ffn_dim, vocab_size, norm_eps, rope_theta,
tie_embeddings, and optionally rope_scaling ("none" or "llama3") with rope_factor,
rope_low_freq_factor, rope_high_freq_factor, rope_original_positions."""
import math

import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def inverse_frequencies(cfg, hd):
    """theta^(-2i/hd), rescaled as transformers' rope_type "llama3" does (Llama 3.1): wavelengths
    above original/low_freq_factor divided by the factor, below original/high_freq_factor kept, a
    linear blend in original/wavelength between."""
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if cfg.get("rope_scaling", "none") == "none":
        return inv_freq
    factor, low, high = cfg["rope_factor"], cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
    original = cfg["rope_original_positions"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, blended, scaled)


def llama_logits(w, tokens, cfg):
    L, C, NH, NKV, FF = cfg["n_layer"], cfg["d_model"], cfg["n_head"], cfg["n_kv_head"], cfg["ffn_dim"]
    eps = cfg["norm_eps"]
    B, T = tokens.shape
    hd = C // NH
    dtype = w["wte"].dtype
    inv_freq = inverse_frequencies(cfg, hd)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
    x = w["wte"][tokens]
    for layer in range(L):
        p = f"block{layer}."
        h = rms_norm(x, w[p + "attn_norm.w"], eps)
        q, k, v = F.linear(h, w[p + "attn.qkv.w"]).split([C, NKV * hd, NKV * hd], dim=-1)
        q = q.view(B, T, NH, hd).transpose(1, 2)
        k = k.view(B, T, NKV, hd).transpose(1, 2)
        v = v.view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)  # transformers' repeat_kv
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, w[p + "attn.proj.w"])
        h = rms_norm(x, w[p + "mlp_norm.w"], eps)
        gate, up = F.linear(h, w[p + "mlp.gate_up.w"]).split([FF, FF], dim=-1)
        x = x + F.linear(F.silu(gate) * up, w[p + "mlp.down.w"])
    x = rms_norm(x, w["lnf.w"], eps)
    head = w["wte"] if cfg["tie_embeddings"] else w["lm_head.w"]
    return (x @ head.T)[..., :cfg["vocab_size"]]


def llama_loss(w, tokens, targets, cfg):
    logits = llama_logits(w, tokens, cfg)
    return F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1))


def llama_init(cfg, padded_vocab, dtype=torch.float32):
    """transformers' initialisation (N(0, 0.02) matrices and embedding, norms 1), shardtrain's shapes."""
    C, NH, NKV, FF = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"], cfg["ffn_dim"]
    W = C + 2 * NKV * (C // NH)
    w = {"wte": torch.randn(padded_vocab, C, dtype=dtype) * 0.02}
    if not cfg["tie_embeddings"]:
        w["lm_head.w"] = torch.randn(padded_vocab, C, dtype=dtype) * 0.02
    for layer in range(cfg["n_layer"]):
        p = f"block{layer}."
        w.update({p + "attn_norm.w": torch.ones(C, dtype=dtype), p + "attn.qkv.w": torch.randn(W, C, dtype=dtype) * 0.02,
                  p + "attn.proj.w": torch.randn(C, C, dtype=dtype) * 0.02, p + "mlp_norm.w": torch.ones(C, dtype=dtype),
                  p + "mlp.gate_up.w": torch.randn(2 * FF, C, dtype=dtype) * 0.02,
                  p + "mlp.down.w": torch.randn(C, FF, dtype=dtype) * 0.02})
    w["lnf.w"] = torch.ones(C, dtype=dtype)
    for t in w.values():
        t.requires_grad_(True)
    return w
