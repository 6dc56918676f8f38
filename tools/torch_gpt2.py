"""GPT-2 written with torch.nn.functional over a dict of named tensors that follows shardtrain's
parameter layout (names and [out, in] matrices). Used by the PyTorch cross-check test, as the
baseline of the step benchmark, and (greedy decoding with a key/value cache) as the baseline of
the generation benchmark."""
import torch
import torch.nn.functional as F


def gpt2_loss(w, tokens, targets, n_layer, d_model, n_head, vocab_size):
    B, T = tokens.shape
    C, H = d_model, n_head
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = w["wte"][tokens] + w["wpe"][:T]
    for layer in range(n_layer):
        p = f"block{layer}."
        h = F.layer_norm(x, (C,), w[p + "ln1.w"], w[p + "ln1.b"], eps=1e-5)
        q, k, v = F.linear(h, w[p + "attn.qkv.w"], w[p + "attn.qkv.b"]).split(C, dim=2)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (C // H) ** 0.5
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, w[p + "attn.proj.w"], w[p + "attn.proj.b"])
        h = F.layer_norm(x, (C,), w[p + "ln2.w"], w[p + "ln2.b"], eps=1e-5)
        h = F.gelu(F.linear(h, w[p + "mlp.fc.w"], w[p + "mlp.fc.b"]), approximate="tanh")
        x = x + F.linear(h, w[p + "mlp.proj.w"], w[p + "mlp.proj.b"])
    x = F.layer_norm(x, (C,), w["lnf.w"], w["lnf.b"], eps=1e-5)
    logits = (x @ w["wte"].T)[..., :vocab_size]  # tied head; padded rows are never predicted
    return F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1))


def gpt2_init(n_layer, d_model, seq_len, padded_vocab, dtype=torch.float32):
    """GPT-2 initialisation with the same shapes as shardtrain's layout."""
    C = d_model
    std_res = 0.02 / (2 * n_layer) ** 0.5
    w = {"wte": torch.randn(padded_vocab, C, dtype=dtype) * 0.02, "wpe": torch.randn(seq_len, C, dtype=dtype) * 0.02}
    for layer in range(n_layer):
        p = f"block{layer}."
        w.update({p + "ln1.w": torch.ones(C, dtype=dtype), p + "ln1.b": torch.zeros(C, dtype=dtype),
                  p + "attn.qkv.w": torch.randn(3 * C, C, dtype=dtype) * 0.02, p + "attn.qkv.b": torch.zeros(3 * C, dtype=dtype),
                  p + "attn.proj.w": torch.randn(C, C, dtype=dtype) * std_res, p + "attn.proj.b": torch.zeros(C, dtype=dtype),
                  p + "ln2.w": torch.ones(C, dtype=dtype), p + "ln2.b": torch.zeros(C, dtype=dtype),
                  p + "mlp.fc.w": torch.randn(4 * C, C, dtype=dtype) * 0.02, p + "mlp.fc.b": torch.zeros(4 * C, dtype=dtype),
                  p + "mlp.proj.w": torch.randn(C, 4 * C, dtype=dtype) * std_res, p + "mlp.proj.b": torch.zeros(C, dtype=dtype)})
    w.update({"lnf.w": torch.ones(C, dtype=dtype), "lnf.b": torch.zeros(C, dtype=dtype)})
    for t in w.values():
        t.requires_grad_(True)
    return w


def gpt2_greedy_decode(w, prompt, count, n_layer, d_model, n_head, vocab_size):
    """Greedy decoding with a key/value cache, the way a PyTorch user would write it: the prompt in
    one pass, then one token per pass attending to the cached keys and values. Returns the new
    tokens (ties: the lower id, as torch.argmax). The context must fit in the position table."""
    C, H = d_model, n_head
    hs = C // H
    keys, values = [None] * n_layer, [None] * n_layer
    out, new, pos = [], torch.tensor(prompt), 0
    with torch.no_grad():
        for _ in range(count):
            T = new.shape[0]
            x = w["wte"][new] + w["wpe"][pos:pos + T]
            # query i (position pos + i) sees keys 0 .. pos + i
            mask = torch.triu(torch.ones(T, pos + T, dtype=torch.bool), pos + 1)
            for layer in range(n_layer):
                p = f"block{layer}."
                h = F.layer_norm(x, (C,), w[p + "ln1.w"], w[p + "ln1.b"], eps=1e-5)
                q, k, v = (z.view(T, H, hs).transpose(0, 1)
                           for z in F.linear(h, w[p + "attn.qkv.w"], w[p + "attn.qkv.b"]).split(C, dim=1))
                keys[layer] = k if keys[layer] is None else torch.cat([keys[layer], k], 1)
                values[layer] = v if values[layer] is None else torch.cat([values[layer], v], 1)
                att = (q @ keys[layer].transpose(-2, -1)) / hs ** 0.5
                y = att.masked_fill(mask, float("-inf")).softmax(-1) @ values[layer]
                x = x + F.linear(y.transpose(0, 1).reshape(T, C), w[p + "attn.proj.w"], w[p + "attn.proj.b"])
                h = F.layer_norm(x, (C,), w[p + "ln2.w"], w[p + "ln2.b"], eps=1e-5)
                h = F.gelu(F.linear(h, w[p + "mlp.fc.w"], w[p + "mlp.fc.b"]), approximate="tanh")
                x = x + F.linear(h, w[p + "mlp.proj.w"], w[p + "mlp.proj.b"])
            last = F.layer_norm(x[-1], (C,), w["lnf.w"], w["lnf.b"], eps=1e-5)
            token = int(torch.argmax(F.linear(last, w["wte"][:vocab_size])))
            out.append(token)
            pos += T
            new = torch.tensor([token])
    return out
