# Why this file exists: the PyTorch twin of chunkgrad's full-scale DFlash drafter step
# (issue 19), so that chunkgrad's step time and peak memory are judged against the
# framework its users would otherwise write the step in. The same step, written the way a
# careful PyTorch user would: fp32 parameters under bf16 autocast, FlexAttention with the
# DFlash block masks (full and sliding layers, no dense mask), fused AdamW, and a
# fused-chunked head loss (an autograd.Function that computes logits, loss and dh chunk by
# chunk in the forward pass, as bench/fused_loss_torch.py does, here with slot weights).
#
#   python3 bench/drafter_step_torch.py                      # the seed's run, fused loss
#   python3 bench/drafter_step_torch.py --loss-path chunked  # chunking under autograd
#   python3 bench/drafter_step_torch.py --checkpoint-layers  # activation checkpointing
#
# Shapes (defaults = issue 19): one sequence of S = 4096 context tokens, N = 1024 anchors x
# block 24 = T = 24576 block positions, K = 5 target layers, hidden 5120, 5 drafter layers
# (32 query heads x 128, 8 KV heads, MLP 17408, qk-norm, RoPE theta 1e7; layers 0-3 sliding
# with window 2048, layer 4 full), V = 248320, loss 0.9 forward KL + 0.1 CE with slot
# weights exp(-(k-1)/7). Features, teacher hidden states and tokens are random (the time
# and memory of a step do not depend on them). Prints one table row per configuration:
# median step ms, context tokens/s, positions/s, MFU (the FLOP count below / time /
# 989.4 TFLOP/s, H200 dense bf16) and the caching allocator's peak.
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

GIB = 1024.0**3
H200_BF16_DENSE = 989.4e12


def step_flops(a):
    """GEMM and attention FLOPs of one step (no recomputation), as chunkgrad counts them."""
    S, T, H, K, V, L = a.context, a.anchors * a.block, a.hidden, a.target_layers, a.vocab, a.layers
    q_w, kv_w = a.heads * a.head_dim, a.kv_heads * a.head_dim
    fc = 2 * S * K * H * H * 2  # forward + dW (the features need no gradient)
    per_layer_block = 2 * T * H * (q_w + 2 * kv_w) + 2 * T * q_w * H + 3 * 2 * T * H * a.mlp
    block = 3 * per_layer_block * L  # forward, d input, d weight
    context_kv = 3 * 2 * S * H * 2 * kv_w * L
    anchors = anchors_for(a, torch.device("cpu"))
    attn = 0.0
    for i in range(L):
        pairs = visible_pairs(anchors, a.block, a.window if is_sliding(a, i) else 0) * a.heads
        attn += pairs * 4 * a.head_dim * (1 + 2.5)
    head = 3 * 2 * T * H * V  # student logits, dh, teacher logits (frozen head: no dW)
    return fc + block + context_kv + attn + head


def is_sliding(a, i):
    return a.window > 0 and i < a.layers - a.full_layers


def visible_pairs(anchors, bs, window):
    k = torch.arange(bs, dtype=torch.float64)
    a = anchors.to(torch.float64)[:, None]
    if window == 0:
        return float((a + bs).sum() * bs)  # each of the bs slots sees a + bs keys
    ctx = torch.clamp(a - torch.clamp(a + k - (window - 1), min=0), min=0)
    own = torch.minimum(k + 1, torch.full_like(k, float(window)))
    return float((ctx + own).sum())


def anchors_for(a, device):
    g = torch.Generator().manual_seed(a.seed)
    picks = torch.randperm(a.context - 1, generator=g)[: a.anchors] + 1
    return picks.sort().values.to(device)


def rms_norm(x, w, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w).to(x.dtype)


def rope(x, pos, theta):
    """x [B, L, h, d], pos [L] -> rotated (the half-split layout of Hugging Face Qwen3)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rot = torch.cat([-x2, x1], -1)
    return (x.float() * cos[None, :, None, :] + rot.float() * sin[None, :, None, :]).to(x.dtype)


class Layer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        H, qw, kvw = a.hidden, a.heads * a.head_dim, a.kv_heads * a.head_dim
        self.q = torch.nn.Linear(H, qw, bias=False)
        self.k = torch.nn.Linear(H, kvw, bias=False)
        self.v = torch.nn.Linear(H, kvw, bias=False)
        self.o = torch.nn.Linear(qw, H, bias=False)
        self.gate = torch.nn.Linear(H, a.mlp, bias=False)
        self.up = torch.nn.Linear(H, a.mlp, bias=False)
        self.down = torch.nn.Linear(a.mlp, H, bias=False)
        self.ln1 = torch.nn.Parameter(torch.ones(H))
        self.ln2 = torch.nn.Parameter(torch.ones(H))
        self.qn = torch.nn.Parameter(torch.ones(a.head_dim))
        self.kn = torch.nn.Parameter(torch.ones(a.head_dim))
        self.a = a

    def forward(self, x, ctx, pos, ctx_pos, block_mask):
        a = self.a
        B, T, _ = x.shape
        S = ctx.shape[1]
        h = rms_norm(x, self.ln1, 1e-6)
        q = rope(rms_norm(self.q(h).view(B, T, a.heads, a.head_dim), self.qn, 1e-6), pos, a.theta)
        kx = rope(rms_norm(self.k(h).view(B, T, a.kv_heads, a.head_dim), self.kn, 1e-6), pos, a.theta)
        kc = rope(rms_norm(self.k(ctx).view(B, S, a.kv_heads, a.head_dim), self.kn, 1e-6), ctx_pos, a.theta)
        vx = self.v(h).view(B, T, a.kv_heads, a.head_dim)
        vc = self.v(ctx).view(B, S, a.kv_heads, a.head_dim)
        k = torch.cat([kc, kx], 1).transpose(1, 2)
        v = torch.cat([vc, vx], 1).transpose(1, 2)
        o = FLEX(q.transpose(1, 2), k, v, block_mask=block_mask, enable_gqa=True)
        x = x + self.o(o.transpose(1, 2).reshape(B, T, a.heads * a.head_dim))
        h = rms_norm(x, self.ln2, 1e-6)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Drafter(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.fc = torch.nn.Linear(a.target_layers * a.hidden, a.hidden, bias=False)
        self.hidden_norm = torch.nn.Parameter(torch.ones(a.hidden))
        self.layers = torch.nn.ModuleList([Layer(a) for _ in range(a.layers)])
        self.norm = torch.nn.Parameter(torch.ones(a.hidden))
        self.a = a

    def forward(self, features, x, pos, ctx_pos, masks):
        ctx = rms_norm(self.fc(features), self.hidden_norm, 1e-6)
        for i, layer in enumerate(self.layers):
            if self.a.checkpoint_layers:
                x = torch.utils.checkpoint.checkpoint(layer, x, ctx, pos, ctx_pos, masks[i], use_reentrant=False)
            else:
                x = layer(x, ctx, pos, ctx_pos, masks[i])
        return rms_norm(x, self.norm, 1e-6)


def row_terms(z, t, y, w, ce_weight):
    """fp32 logits z [c, V], teacher logits t, labels y, row weights w (sum 1 overall) ->
    (weighted loss sum, d loss / d z)."""
    lq = torch.log_softmax(z, -1)
    q = lq.exp()
    lp = torch.log_softmax(t, -1)
    p = lp.exp()
    kl = (p * (lp - lq)).sum(-1)
    ce = -lq.gather(1, y.clamp(min=0)[:, None]).squeeze(1)
    loss = (w * ((1 - ce_weight) * kl + ce_weight * ce)).sum()
    g = (1 - ce_weight) * (q - p) + ce_weight * q
    g.scatter_add_(1, y.clamp(min=0)[:, None], (-ce_weight * torch.ones_like(w))[:, None])
    return loss, g * w[:, None]


class FusedWeightedLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, th, y, rw, chunk, ce_weight):
        dh = torch.empty_like(h)
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        for r0 in range(0, h.shape[0], chunk):
            sl = slice(r0, r0 + chunk)
            z = (h[sl] @ w.t()).float()
            t = (th[sl] @ w.t()).float()
            loss, g = row_terms(z, t, y[sl], rw[sl], ce_weight)
            del z, t
            total += loss
            dh[sl] = g.to(h.dtype) @ w
            del g
        ctx.save_for_backward(dh)
        return total

    @staticmethod
    def backward(ctx, grad):
        (dh,) = ctx.saved_tensors
        return dh * grad.to(dh.dtype), None, None, None, None, None, None


def head_loss(a, h, w, th, y, rw):
    if a.loss_path == "fused":
        return FusedWeightedLoss.apply(h, w, th, y, rw, a.chunk, a.ce_weight)
    if a.loss_path == "naive":
        z = (h @ w.t()).float()
        with torch.no_grad():
            t = (th @ w.t()).float()
        lq = torch.log_softmax(z, -1)
        lp = torch.log_softmax(t, -1)
        kl = (lp.exp() * (lp - lq)).sum(-1)
        ce = -lq.gather(1, y.clamp(min=0)[:, None]).squeeze(1)
        return (rw * ((1 - a.ce_weight) * kl + a.ce_weight * ce)).sum()
    total = 0
    for r0 in range(0, h.shape[0], a.chunk):  # chunked under autograd
        sl = slice(r0, r0 + a.chunk)
        z = (h[sl] @ w.t()).float()
        with torch.no_grad():
            t = (th[sl] @ w.t()).float()
        lq = torch.log_softmax(z, -1)
        lp = torch.log_softmax(t, -1)
        kl = (lp.exp() * (lp - lq)).sum(-1)
        ce = -lq.gather(1, y[sl].clamp(min=0)[:, None]).squeeze(1)
        total = total + (rw[sl] * ((1 - a.ce_weight) * kl + a.ce_weight * ce)).sum()
    return total


def build_batch(a, dev):
    g = torch.Generator(device=dev).manual_seed(a.seed)
    S, N, bs, H = a.context, a.anchors, a.block, a.hidden
    ids = torch.randint(0, a.vocab, (S,), device=dev, generator=g)
    anchors = anchors_for(a, dev)
    k = torch.arange(bs, device=dev)
    pos = (anchors[:, None] + k[None, :]).reshape(-1)  # [T]
    block_ids = torch.full((N, bs), a.mask_id, device=dev)
    block_ids[:, 0] = ids[anchors]
    valid = (k[None, :] >= 1) & (anchors[:, None] + k[None, :] < S)
    labels = torch.where(valid, ids[pos.clamp(max=S - 1)].view(N, bs), -100).reshape(-1)
    weights = torch.where(valid, torch.exp(-(k[None, :] - 1).clamp(min=0) / a.gamma), 0.0).reshape(-1)
    teacher_rows = (pos - 1).clamp(min=0, max=S - 1)
    features = torch.randn(1, S, a.target_layers * H, device=dev, dtype=torch.bfloat16, generator=g)
    last_hidden = torch.randn(S, H, device=dev, dtype=torch.bfloat16, generator=g)
    return dict(ids=ids, anchors=anchors, pos=pos, block_ids=block_ids.reshape(1, -1), labels=labels,
                weights=(weights / weights.sum()).float(), teacher=last_hidden[teacher_rows], features=features)


def block_masks(a, anchors, dev):
    S, bs, T = a.context, a.block, a.anchors * a.block

    def full(b, h, q, kv):
        blk = q // bs
        return torch.where(kv < S, kv < anchors[blk], (kv - S) // bs == blk)

    def sliding(b, h, q, kv):
        blk, k = q // bs, q % bs
        an = anchors[blk]
        ctx_ok = (kv < an) & (kv >= an + k - (a.window - 1))
        kk = (kv - S) % bs
        own = ((kv - S) // bs == blk) & (kk <= k) & (kk >= k - (a.window - 1))
        return torch.where(kv < S, ctx_ok, own)

    m_full = create_block_mask(full, None, None, T, S + T, device=dev)
    m_slide = create_block_mask(sliding, None, None, T, S + T, device=dev) if a.window > 0 else m_full
    return [m_slide if is_sliding(a, i) else m_full for i in range(a.layers)]


def run(a):
    dev = "cuda"
    torch.manual_seed(a.seed)
    model = Drafter(a).to(dev)  # fp32 masters; autocast runs the GEMMs in bf16
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    gw = torch.Generator(device=dev).manual_seed(a.seed + 1)
    embed = torch.randn(a.vocab, a.hidden, device=dev, dtype=torch.bfloat16, generator=gw) * 0.02
    head = torch.randn(a.vocab, a.hidden, device=dev, dtype=torch.bfloat16, generator=gw) / math.sqrt(a.hidden)
    b = build_batch(a, dev)
    masks = block_masks(a, b["anchors"], dev)
    ctx_pos = torch.arange(a.context, device=dev)
    params = sum(p.numel() for p in model.parameters())

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = F.embedding(b["block_ids"], embed)
            hid = model(b["features"], x, b["pos"], ctx_pos, masks)
            loss = head_loss(a, hid.reshape(-1, a.hidden), head, b["teacher"], b["labels"], b["weights"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t_compile = time.time()
    losses = []
    try:
        for _ in range(a.warmup):
            losses.append(float(step()))
        torch.cuda.synchronize()
        compile_s = time.time() - t_compile
        torch.cuda.reset_peak_memory_stats()
        ms = []
        for _ in range(a.steps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            loss = step()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
            losses.append(float(loss))
    except torch.OutOfMemoryError as err:
        return None, str(err).split("\n")[0], params
    ms.sort()
    med = ms[len(ms) // 2]
    return dict(ms=med, lo=ms[0], hi=ms[-1], peak=torch.cuda.max_memory_allocated() / GIB,
                losses=losses, compile_s=compile_s), None, params


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--anchors", type=int, default=1024)
    ap.add_argument("--block", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=5120)
    ap.add_argument("--target-layers", type=int, default=5)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--full-layers", type=int, default=1, help="the last N layers use the full rule")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--mlp", type=int, default=17408)
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--theta", type=float, default=1e7)
    ap.add_argument("--mask-id", type=int, default=248070)
    ap.add_argument("--gamma", type=float, default=7.0)
    ap.add_argument("--ce-weight", type=float, default=0.1)
    ap.add_argument("--loss-path", default="fused", choices=["fused", "chunked", "naive"])
    ap.add_argument("--chunk", type=int, default=2048, help="head-loss rows per chunk")
    ap.add_argument("--checkpoint-layers", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.anchors > a.context - 1:
        ap.error(f"--anchors {a.anchors} needs a context of at least {a.anchors + 1}")
    global FLEX
    FLEX = torch.compile(flex_attention, dynamic=False)
    flops = step_flops(a)
    res, err, params = run(a)
    label = f"torch {a.loss_path}" + (" +ckpt" if a.checkpoint_layers else "")
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}: drafter {params / 1e9:.3f}B params, "
          f"{a.anchors} x {a.block} anchors over {a.context} context, V {a.vocab}, "
          f"{a.layers - a.full_layers if a.window else 0} sliding ({a.window}) + "
          f"{a.full_layers if a.window else a.layers} full layers; {flops / 1e12:.1f} TFLOP per step; "
          f"median of {a.steps} after {a.warmup} warm-up")
    print(f"{'path':22s} {'ms':>9s} {'min-max':>15s} {'ctx tok/s':>10s} {'pos/s':>10s} {'MFU':>6s} {'peak GiB':>9s}")
    if err:
        print(f"{label:22s} out of memory: {err}")
        return
    s = res["ms"] / 1e3
    print(f"{label:22s} {res['ms']:9.1f} {res['lo']:7.1f}-{res['hi']:<7.1f} {a.context / s:10.0f} "
          f"{a.anchors * a.block / s:10.0f} {flops / s / H200_BF16_DENSE:6.1%} {res['peak']:9.2f}")
    print(f"  loss {res['losses'][0]:.4f} -> {res['losses'][-1]:.4f}; warm-up incl. compile {res['compile_s']:.1f} s")


if __name__ == "__main__":
    main()
