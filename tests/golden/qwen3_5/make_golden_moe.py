#!/usr/bin/env python3
"""Why this file exists: the golden of chunkgrad's mixture-of-experts Qwen3.5 target
(model_type qwen3_5_moe, issue 21; tests/qwen3_5_moe_golden_test.cpp): a tiny random
Qwen3_5MoeForConditionalGeneration made and saved by transformers itself, and what transformers
computes from it. The sibling of make_golden.py (the dense goldens), whose helpers it reuses:
the same randomisation rules, reference tensors and generation report.

Writes into OUT_DIR (default: this folder):
  tiny_qwen3_5_moe/     Qwen3_5MoeForConditionalGeneration (model_type qwen3_5_moe, text_config
                        qwen3_5_moe_text, a tiny vision_config) as save_pretrained writes it.
                        transformers 5.17 holds the experts packed in memory (experts.gate_up_proj
                        [8, 32, 64], gate rows first; experts.down_proj [8, 64, 16]) but SAVES
                        them one by one (its conversion mapping reversed on save):
                        model.language_model.layers.N.mlp.experts.{e}.{gate,up,down}_proj.weight
                        ([16, 64], [16, 64], [64, 16]); besides .mlp.gate.weight [8, 64],
                        .shared_expert.{gate,up,down}_proj.weight, .shared_expert_gate.weight
                        [1, 64]; plus mtp.* tensors (skipped on load).
                        4 layers: linear, full, linear, full. 8 experts, top 3, expert MLP 16,
                        shared expert 24, the other sizes as the dense golden (hidden 64, head_dim
                        32, 4 q / 2 kv heads, DeltaNet 2 key / 4 value heads x 16, vocab 1024),
                        rope theta 1e7, partial_rotary_factor 0.25, f32, untied.
                        config._experts_implementation is pinned to "eager" (transformers'
                        per-expert loop) before every forward, and recorded.
  tiny_qwen3_5_moe_packed/  the same weights in the packed layout (as the released Qwen3.5-MoE
                        checkpoints store them): experts.gate_up_proj [8, 32, 64] (gate rows
                        before up rows) and experts.down_proj [8, 64, 16]; config.json copied.
                        (Should a transformers version save packed, the other layout is written
                        as tiny_qwen3_5_moe_per_expert/; the report says which is which.)
  tiny_qwen3_5_moe_hidden.safetensors    as make_golden.py's NAME_hidden, lengths (2, 77, 150):
                        2 tokens x top 3 = 6 slots < 8 experts, so some expert gets no token;
                        77 and 150 are > 64 and not multiples of 64 (DeltaNet chunks).
  tiny_qwen3_5_moe_routing.safetensors   per length n and layer l: route.n.l.indices (i64 [n, 3],
                        transformers' top-k order) and route.n.l.weights (f32 [n, 3]), the
                        router's output; route.n.l.logits (f32 [n, 8]).
  tiny_qwen3_5_moe_generate.json, tiny_qwen3_5_moe_modules.txt   as make_golden.py's.
  tiny_qwen3_5_moe_report.json   the experts implementation used, tokens per expert per layer
                        and length, the per-expert checkpoint reloaded by transformers (if it
                        can) and its logits against the packed one's, and a hand-written eager
                        MoE block against transformers' block (a check of what "eager" means).
  reference_source_moe.txt       the transformers MoE classes' source (for reading only).

Needs torch and transformers (2.11 / 5.17 on the device), no network, CPU only:
  python3 tests/golden/qwen3_5/make_golden_moe.py [OUT_DIR] [TOKENIZER_FOLDER]
"""
import inspect
import json
import os
import shutil
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
for candidate in (HERE, os.path.join(os.getcwd(), "tests", "golden", "qwen3_5")):
    if os.path.exists(os.path.join(candidate, "make_golden.py")):
        sys.path.insert(0, candidate)
        break
import make_golden as mg  # noqa: E402  (the dense golden's helpers)

NAME = "tiny_qwen3_5_moe"
LENGTHS = (2, 77, 150)
LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
EXPERTS = 8
TOP_K = 3
MOE_INTERMEDIATE = 16
SHARED_INTERMEDIATE = 24
SEED = mg.SEED + 40
log = mg.log


def pin_eager(model):
    """Sets _experts_implementation = "eager" on every config object the model holds."""
    seen = []
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and all(cfg is not s for s in seen):
            seen.append(cfg)
    for cfg in [model.config] + seen:
        for c in (cfg, getattr(cfg, "text_config", None)):
            if c is not None:
                try:
                    c._experts_implementation = "eager"
                except Exception as e:  # a config that refuses it: recorded, not fatal
                    log(f"could not set _experts_implementation on {type(c).__name__}: {e}")
    return sorted({getattr(c, "_experts_implementation", None) or "None" for c in seen})


def make_moe_model():
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration
    common = {k: v for k, v in mg.TEXT_COMMON.items() if k != "intermediate_size"}
    text = dict(common, num_hidden_layers=len(LAYER_TYPES), layer_types=LAYER_TYPES,
                tie_word_embeddings=False, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                moe_intermediate_size=MOE_INTERMEDIATE,
                shared_expert_intermediate_size=SHARED_INTERMEDIATE,
                rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                 "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                 "mrope_interleaved": True})
    try:
        config = Qwen3_5MoeConfig(text_config=text, vision_config=mg.tiny_vision(),
                                  tie_word_embeddings=False)
    except Exception as e:
        log("tiny vision_config refused, retrying with fewer fields:", type(e).__name__, e)
        v = {k: mg.tiny_vision()[k] for k in ("depth", "hidden_size", "intermediate_size",
                                              "num_heads", "out_hidden_size")}
        config = Qwen3_5MoeConfig(text_config=text, vision_config=v, tie_word_embeddings=False)
    try:
        config._experts_implementation = "eager"
    except Exception as e:
        log(f"could not set _experts_implementation on the config: {e}")
    torch.manual_seed(SEED)
    model = Qwen3_5MoeForConditionalGeneration(config).to(torch.float32).eval()
    counts = mg.randomize(model, SEED)
    pin_eager(model)
    return model, counts


def moe_blocks(model):
    return [layer.mlp for layer in mg.text_model_of(model).layers]


def router_outputs(out):
    """(logits, weights, indices) from whatever the router returns (a tuple in transformers 5)."""
    parts = list(out) if isinstance(out, (tuple, list)) else [out]
    ints = [p for p in parts if torch.is_tensor(p) and not p.is_floating_point()]
    floats = [p for p in parts if torch.is_tensor(p) and p.is_floating_point()]
    indices = ints[0] if ints else None
    logits = next((f for f in floats if f.shape[-1] == EXPERTS), None)
    weights = next((f for f in floats if indices is not None and f.shape == indices.shape), None)
    return logits, weights, indices


def manual_block(block, x):
    """transformers' eager MoE block written out by hand from the block's parameters."""
    flat = x.reshape(-1, x.shape[-1])
    logits = torch.nn.functional.linear(flat, block.gate.weight)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    w, idx = torch.topk(probs, TOP_K, dim=-1)
    w = (w / w.sum(-1, keepdim=True)).to(flat.dtype)
    out = torch.zeros_like(flat)
    gu, down = block.experts.gate_up_proj, block.experts.down_proj
    for e in range(EXPERTS):
        tok, pos = torch.where(idx == e)  # idx [N, k]: (token, slot) pairs
        if tok.numel() == 0:
            continue
        g, u = torch.nn.functional.linear(flat[tok], gu[e]).chunk(2, dim=-1)
        y = torch.nn.functional.linear(torch.nn.functional.silu(g) * u, down[e])
        out.index_add_(0, tok, y * w[tok, pos, None])
    shared = block.shared_expert(flat)
    out = out + torch.sigmoid(block.shared_expert_gate(flat)) * shared
    return out.reshape(x.shape)


def routing_references(model, out_dir, report):
    from safetensors.torch import save_file
    blocks = moe_blocks(model)
    captured = {}
    block_io = {}
    hooks = []
    for l, b in enumerate(blocks):
        hooks.append(b.gate.register_forward_hook(
            lambda m, a, o, l=l: captured.__setitem__(l, router_outputs(o))))
        hooks.append(b.register_forward_hook(
            lambda m, a, o, l=l: block_io.__setitem__(l, (a[0], o[0] if isinstance(o, tuple) else o))))
    tensors, counts, manual_diff = {}, {}, 0.0
    g = torch.Generator().manual_seed(mg.SEED + 1)  # the ids references() draws, in its order
    for n in LENGTHS:
        ids = torch.randint(3, 1000, (n,), generator=g)
        if n > 3:
            ids[0], ids[n // 2] = 1, 1001
        captured.clear()
        block_io.clear()
        with torch.no_grad():
            model(ids[None])
            for l, b in enumerate(blocks):
                x, y = block_io[l]
                manual_diff = max(manual_diff, (manual_block(b, x) - y).abs().max().item())
        tensors[f"ids.{n}"] = ids.to(torch.int64).contiguous()
        for l in range(len(blocks)):
            logits, weights, indices = captured[l]
            if indices is None:
                raise RuntimeError(f"the router of layer {l} returned no indices: {type(captured[l])}")
            tensors[f"route.{n}.{l}.indices"] = indices.reshape(n, TOP_K).to(torch.int64).contiguous()
            if weights is not None:
                tensors[f"route.{n}.{l}.weights"] = weights.reshape(n, TOP_K).float().contiguous()
            if logits is not None:
                tensors[f"route.{n}.{l}.logits"] = logits.reshape(n, EXPERTS).float().contiguous()
            per_expert = torch.bincount(indices.reshape(-1), minlength=EXPERTS).tolist()
            counts[f"n={n} layer={l}"] = per_expert
    for h in hooks:
        h.remove()
    report["tokens_per_expert"] = counts
    report["some_expert_without_tokens"] = {k: min(v) == 0 for k, v in counts.items()}
    report["manual_eager_block_vs_transformers_max_abs"] = manual_diff
    log(f"{NAME}: tokens per expert {json.dumps(counts)}")
    log(f"{NAME}: hand-written eager block vs transformers' block max |diff| = {manual_diff:.3g}")
    save_file(tensors, os.path.join(out_dir, f"{NAME}_routing.safetensors"),
              metadata={"made_by": "tests/golden/qwen3_5/make_golden_moe.py"})


def write_other_layout(folder, out_dir, report):
    """The saved checkpoint rewritten in the other expert layout: one tensor per expert and
    projection when transformers saved the packed one (expected), or packed when it saved per
    expert. Returns the new folder."""
    import re
    from safetensors.torch import load_file, save_file
    saved = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            saved.update(load_file(os.path.join(folder, f)))
    packed = any(k.endswith("experts.gate_up_proj") for k in saved)
    report["saved_layout"] = "packed" if packed else "per_expert"
    other = {}
    if packed:
        for k, v in saved.items():
            if k.startswith("mtp."):
                continue
            if k.endswith("experts.gate_up_proj"):
                base = k[: -len("gate_up_proj")]
                inter = v.shape[1] // 2
                for e in range(v.shape[0]):
                    other[f"{base}{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                    other[f"{base}{e}.up_proj.weight"] = v[e, inter:].contiguous()
            elif k.endswith("experts.down_proj"):
                base = k[: -len("down_proj")]
                for e in range(v.shape[0]):
                    other[f"{base}{e}.down_proj.weight"] = v[e].contiguous()
            else:
                other[k] = v.contiguous()
        target = os.path.join(out_dir, f"{NAME}_per_expert")
    else:
        pattern = re.compile(r"^(.*experts\.)(\d+)\.(gate|up|down)_proj\.weight$")
        groups = {}
        for k, v in saved.items():
            if k.startswith("mtp."):
                continue
            m = pattern.match(k)
            if m is None:
                other[k] = v.contiguous()
                continue
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
        for base, t in groups.items():
            n = 1 + max(e for e, _ in t)
            other[f"{base}gate_up_proj"] = torch.stack(
                [torch.cat([t[(e, "gate")], t[(e, "up")]], 0) for e in range(n)]).contiguous()
            other[f"{base}down_proj"] = torch.stack([t[(e, "down")] for e in range(n)]).contiguous()
        target = os.path.join(out_dir, f"{NAME}_packed")
    os.makedirs(target, exist_ok=True)
    save_file(other, os.path.join(target, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(folder, "config.json"), os.path.join(target, "config.json"))
    report["other_layout_folder"] = os.path.basename(target)
    report["other_layout_tensors"] = len(other)
    log(f"{NAME}: saved layout {report['saved_layout']}; other layout with {len(other)} tensors "
        f"in {target}")
    return target


def check_per_expert_with_transformers(packed_model, target, report):
    """Informational: whether transformers itself loads the other layout, and to what."""
    from transformers import Qwen3_5MoeForConditionalGeneration
    try:
        model, info = Qwen3_5MoeForConditionalGeneration.from_pretrained(
            target, dtype=torch.float32, output_loading_info=True)
        model = model.eval()
        pin_eager(model)
        ids = torch.randint(3, 1000, (77,), generator=torch.Generator().manual_seed(7))
        diff = (mg.full_logits(model, ids) - mg.full_logits(packed_model, ids)).abs().max().item()
        report["transformers_loads_other_layout"] = {
            "missing": sorted(info.get("missing_keys", [])),
            "unexpected": sorted(info.get("unexpected_keys", []))[:20],
            "logits_vs_packed_max_abs": diff}
    except Exception as e:
        report["transformers_loads_other_layout"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    log(f"{NAME}: transformers on the other layout: {report['transformers_loads_other_layout']}")


def write_reference_source(out_dir):
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m
    names = ["Qwen3_5MoeTopKRouter", "Qwen3_5MoeExperts", "Qwen3_5MoeMLP",
             "Qwen3_5MoeSparseMoeBlock", "Qwen3_5MoeDecoderLayer"]
    with open(os.path.join(out_dir, "reference_source_moe.txt"), "w") as f:
        f.write(f"transformers {__import__('transformers').__version__}: {m.__file__}\n")
        for n in names:
            obj = getattr(m, n, None)
            if obj is None:
                f.write(f"\n== {n}: absent\n")
                continue
            try:
                f.write(f"\n== {n}\n" + inspect.getsource(inspect.unwrap(obj)))
            except Exception as e:
                f.write(f"\n== {n}: no source ({e})\n")
        try:
            from transformers.integrations import moe as im
            f.write("\n== transformers/integrations/moe.py use_experts_implementation\n")
            f.write(inspect.getsource(im.use_experts_implementation))
        except Exception as e:
            f.write(f"\n== integrations.moe: {e}\n")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else HERE
    tok_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "tiny_qwen3")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(min(8, torch.get_num_threads()))
    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    try:
        write_reference_source(out_dir)
    except Exception:
        traceback.print_exc()
    mg.LENGTHS = LENGTHS  # references() reads the module's LENGTHS
    report = {"name": NAME, "lengths": list(LENGTHS), "experts": EXPERTS, "top_k": TOP_K}

    # build() reloads with from_pretrained; pin "eager" on whatever it loads before it runs it.
    original_reload = mg.reload

    def reload_eager(cls, folder):
        model = original_reload(cls, folder)
        report["experts_implementation"] = pin_eager(model)
        return model

    mg.reload = reload_eager

    def mtp(folder):
        mg.add_mtp_tensors(folder, mg.TEXT_COMMON["hidden_size"])
        return ["mtp.* tensors added after save_pretrained",
                "config._experts_implementation pinned to \"eager\" before every forward"]

    status = 0
    try:
        loaded = mg.build(NAME, make_moe_model, "Qwen3_5MoeForConditionalGeneration", out_dir,
                          tok_dir, mtp, None,
                          {"layer_types": LAYER_TYPES, "rotary_dims": 8, "tied": False})
        experts = moe_blocks(loaded)[0].experts
        report["experts_class"] = type(experts).__name__
        report["experts_config_implementation"] = getattr(
            getattr(experts, "config", None), "_experts_implementation", "no config")
        routing_references(loaded, out_dir, report)
        target = write_other_layout(os.path.join(out_dir, NAME), out_dir, report)
        check_per_expert_with_transformers(loaded, target, report)
    except Exception:
        traceback.print_exc()
        status = 1
        log(f"FAILED: {NAME}")
    with open(os.path.join(out_dir, f"{NAME}_report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    total = 0
    for root, _, files in os.walk(out_dir):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    log(f"total written: {total} bytes; status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
