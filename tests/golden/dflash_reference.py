"""Why this file exists: an independent PyTorch implementation of the public DFlash drafter,
written from the public sources, that chunkgrad's drafter is checked against
(tests/golden/make_drafter_golden.py makes the goldens with it; check_exported_drafter.py
loads a folder written by `chunkgrad export` into it).

Module structure: z-lab/dflash `dflash/model.py` (DFlashDraftModel): the K target features
concatenated -> fc (no bias) -> hidden_norm = the context, once; each layer is a Qwen3
decoder layer whose k_proj / v_proj / k_norm are applied to the context and to the block
alike (keys and values = cat(context, block)), queries from the block only; RoPE on the
context at its positions 0 .. S-1 and on the block at anchor + k; final norm. The block
tokens go through the target's embed_tokens (anchor token in slot 0, the mask token in
slots 1..) and the hidden through the target's lm_head.

Training mask: SpecForge (sgl-project/SpecForge,
specforge/algorithms/common/dflash_family_model.py, create_dflash_sdpa_mask): a query in
slot k of block b (anchor a_b) sees context keys j < a_b and the whole of its own block;
in a sliding layer only the context keys j >= a_b + k - (W - 1), and the slots k' <= k of
its own block (no window inside the block: chunkgrad's rule also bounds k' >= k - (W - 1),
which agrees whenever block_size <= W, as in every published config).

Inference forward (z-lab's): no mask at all; the block attends to the whole given context
and to every slot of its block (the eager and sdpa paths ignore the sliding window).

Pure torch (no transformers), f32 by default. Parameter names are the public layout's.
"""
import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rope_cos_sin(positions, head_dim, theta):
    """positions i64 [T] -> cos, sin [T, head_dim] (Qwen3's default RoPE, halves rotated)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(torch.float32), emb.sin().to(torch.float32)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [heads, T, hd]; cos/sin [T, hd]."""
    return x * cos[None] + rotate_half(x) * sin[None]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.q_proj = nn.Linear(H, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, c["rms_norm_eps"])

    def forward(self, x, ctx, q_rope, k_rope, allowed):
        """x [T, H] block rows, ctx [S, H] context rows; q_rope = (cos, sin) of the block
        positions, k_rope of cat(context positions, block positions); allowed bool [T, S+T]
        or None (every key)."""
        T, S = x.shape[0], ctx.shape[0]
        q = self.q_norm(self.q_proj(x).view(T, self.nh, self.hd)).transpose(0, 1)
        kv_in = torch.cat([ctx, x], dim=0)
        k = self.k_norm(self.k_proj(kv_in).view(S + T, self.nkv, self.hd)).transpose(0, 1)
        v = self.v_proj(kv_in).view(S + T, self.nkv, self.hd).transpose(0, 1)
        q = apply_rope(q, *q_rope)
        k = apply_rope(k, *k_rope)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(self.hd)
        if allowed is not None:
            scores = scores.masked_fill(~allowed[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if allowed is not None:  # a row that sees nothing gives 0 (chunkgrad's rule too)
            probs = torch.nan_to_num(probs, nan=0.0)
        out = (probs @ v).transpose(0, 1).reshape(T, self.nh * self.hd)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, ctx, q_rope, k_rope, allowed):
        h = x + self.self_attn(self.input_layernorm(x), ctx, q_rope, k_rope, allowed)
        return h + self.mlp(self.post_attention_layernorm(h))


def layer_types_of(config):
    n = config["num_hidden_layers"]
    return config.get("layer_types") or ["full_attention"] * n


class DFlashReference(nn.Module):
    """Built from a public config.json (dict). state_dict keys are the public names."""

    def __init__(self, config):
        super().__init__()
        c = dict(config)
        c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
        self.c = c
        dc = c.get("dflash_config", {})
        self.target_layer_ids = list(dc["target_layer_ids"])
        self.mask_token_id = int(dc["mask_token_id"])
        self.block_size = int(dc.get("block_size", c.get("block_size")))
        H = c["hidden_size"]
        self.fc = nn.Linear(len(self.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, c["rms_norm_eps"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(H, c["rms_norm_eps"])
        self.layer_types = layer_types_of(c)
        sliding = any(t == "sliding_attention" for t in self.layer_types)
        self.window = c.get("sliding_window") if sliding else None
        self.theta = float(c.get("rope_theta", 1e6))

    def block_ids(self, ids, anchors):
        """[N * Bk] block tokens: ids[anchor] in slot 0, the mask token elsewhere."""
        Bk = self.block_size
        out = torch.full((len(anchors), Bk), self.mask_token_id, dtype=torch.long)
        out[:, 0] = ids[anchors]
        return out.reshape(-1)

    def training_mask(self, S, anchors, window):
        """SpecForge's dense allow-mask [N*Bk, S + N*Bk] (window None = a full layer)."""
        Bk, N = self.block_size, len(anchors)
        q = torch.arange(N * Bk)[:, None]
        kv = torch.arange(S + N * Bk)[None, :]
        qb, qk = q // Bk, q % Bk
        a = anchors[qb]
        ctx = (kv < S) & (kv < a)
        if window is not None:
            ctx = ctx & (kv >= a + qk - (window - 1))
        kb, kk = (kv - S) // Bk, (kv - S) % Bk
        own = (kv >= S) & (kb == qb)
        if window is not None:
            own = own & (kk <= qk)
        return ctx | own

    def run(self, features, block_embed, block_pos, allowed_per_layer):
        """features [S, K*H] (positions 0..S-1), block_embed [T, H] at block_pos [T]."""
        S = features.shape[0]
        ctx = self.hidden_norm(self.fc(features))
        hd = self.c["head_dim"]
        q_rope = rope_cos_sin(block_pos, hd, self.theta)
        k_rope = rope_cos_sin(torch.cat([torch.arange(S), block_pos]), hd, self.theta)
        x = block_embed
        for layer, allowed in zip(self.layers, allowed_per_layer):
            x = layer(x, ctx, q_rope, k_rope, allowed)
        return self.norm(x)

    def training_forward(self, features, ids, anchors, embed, lm_head):
        """Block logits [N*Bk, V] of every anchor at once under the training mask."""
        anchors = torch.as_tensor(anchors, dtype=torch.long)
        S, Bk = features.shape[0], self.block_size
        pos = (anchors[:, None] + torch.arange(Bk)[None]).reshape(-1)
        full = self.training_mask(S, anchors, None)
        slide = self.training_mask(S, anchors, self.window) if self.window else None
        masks = [slide if t == "sliding_attention" else full for t in self.layer_types]
        hidden = self.run(features, embed[self.block_ids(ids, anchors)], pos, masks)
        return hidden @ lm_head.T

    def inference_forward(self, features, ids, anchor, embed, lm_head):
        """z-lab's forward on one block: context = features[:anchor], no mask. [Bk, V]."""
        Bk = self.block_size
        pos = anchor + torch.arange(Bk)
        block = self.block_ids(ids, torch.tensor([anchor]))
        hidden = self.run(features[:anchor], embed[block], pos, [None] * len(self.layers))
        return hidden @ lm_head.T


def load_public_folder(folder, dtype=torch.float32):
    """A public-layout folder -> DFlashReference with its weights (strict), in `dtype`."""
    import json
    import os

    from safetensors.torch import load_file

    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    model = DFlashReference(config)
    state = load_file(os.path.join(folder, "model.safetensors"))
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return model.to(dtype), config
