#!/usr/bin/env python3
"""Why this file exists: the golden of chunkgrad's Qwen3.5 / Qwen3.6 targets (issue 21,
tests/qwen3_5_golden_test.cpp): tiny random checkpoints of both layouts made and saved by
transformers itself, and what transformers computes from them (its PyTorch Gated DeltaNet
fallback: no flash-linear-attention or causal-conv1d on the device, so that is the reference).

Writes into OUT_DIR (default: this folder):
  tiny_qwen3_5/        Qwen3_5ForConditionalGeneration (model_type qwen3_5): the language
                       model's fields nested in text_config, a tiny vision_config so that
                       model.visual.* weights exist, tie_word_embeddings false (lm_head.weight
                       at the top), partial_rotary_factor 0.25 inside rope_parameters, rope
                       theta 1e7, M-RoPE sections [2, 1, 1] interleaved, explicit layer_types
                       (6 layers: linear x3, full, linear, full), saved in shards with an index;
                       then a few mtp.* tensors added to the last shard and the index (released
                       checkpoints carry them; a loader must skip them).
  tiny_qwen3_5_text/   Qwen3_5ForCausalLM (model_type qwen3_5_text, weights under model.*), tied
                       embeddings (no lm_head.weight in the file), layer_types ABSENT from
                       config.json (derived from full_attention_interval 2: 5 layers linear,
                       full, linear, full, linear), partial_rotary_factor 0.5 at the top of the
                       config (not in rope_parameters; a non-default value, so a loader that
                       ignores the top-level field computes something else), rope theta 1e6,
                       no mrope_section.
  Both: vocab 1024 (tests/golden/tiny_qwen3/tokenizer.json, mask token 1003 past it), hidden 64,
  head_dim 32, 4 q / 2 kv heads, MLP 128, linear_num_key_heads 2 < linear_num_value_heads 4,
  linear key/value head dims 16, conv kernel 4, f32. Every weight non-trivial: the zero-centred
  norms (input, post-attention, final, q_norm, k_norm; scale 1 + w) get w in [-0.4, 0.4], the
  DeltaNet's gated norm (plain w) gets w in [0.6, 1.4], A_log in [-2, 1], dt_bias ~ N(0, 0.5^2),
  conv1d ~ N(0, 1/4), projections ~ N(0, 1/fan_in), embeddings ~ N(0, 1).
  NAME_hidden.safetensors   per length n in (5, 77, 150): ids.n (i64 [n]), hidden_states.n.i
                       (f32 [n, 64], i = 0 .. L: output_hidden_states), layer_out.n.(L-1)
                       (the last decoder layer's own output, by a forward hook; the others equal
                       hidden_states.n.(l+1) and are left out), last_hidden_state.n (the normed
                       output), logits.n ([n, 1024], n = 5 and 77: kept small, the normed
                       hidden of 150 is there); gen.prompt (i64 [70]), gen.greedy (i64
                       [12]: greedy continuation by full forwards, no eos stop), gen.logits (the
                       full forward's logits over prompt + greedy[:-1] at positions 69 .. 80,
                       [12, 1024]: the rows each greedy token was taken from).
  NAME_generate.json   transformers generate (greedy, 12 new tokens, cached) and the manual
                       full-forward greedy loop, and whether they agree; transformers' own
                       cached-vs-full checks (one token at a time, and a block of 4).
  NAME_modules.txt     print(model), every parameter's name and shape, every safetensors key,
                       shape and dtype, and config.json as saved: the C++ names are checked
                       against it.
  tiny_qwen3_5_moe/ + tiny_qwen3_5_moe_hidden.safetensors   (optional; skipped on any error)
                       Qwen3_5MoeForCausalLM: 4 experts, top-2, a shared expert.
  reference_source.txt the transformers functions the reference runs (for reading, not for
                       committing).

Needs torch and transformers (2.11 / 5.17 on the device), no network, CPU only:
  python3 tests/golden/qwen3_5/make_golden.py [OUT_DIR] [TOKENIZER_FOLDER]
TOKENIZER_FOLDER holds tokenizer.json and tokenizer_config.json (default tests/golden/tiny_qwen3).
"""
import inspect
import json
import os
import shutil
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 1024
LENGTHS = (5, 77, 150)
PROMPT_LEN = 70
NEW_TOKENS = 12
SEED = 20261203
EOS = [2, 0]

TEXT_COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, hidden_act="silu", max_position_embeddings=4096,
    rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4,
    bos_token_id=None, eos_token_id=2, pad_token_id=0)

CG_LAYER_TYPES = ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                  "linear_attention", "full_attention"]
TEXT_INTERVAL = 2
TEXT_LAYERS = 5
TEXT_PARTIAL = 0.5


def log(*a):
    print(*a, flush=True)


def randomize(model, seed):
    """Non-trivial weights everywhere (see the header); returns what each rule touched.
    The rules go by parameter name: the DeltaNet's gated norm is linear_attn.norm.weight, every
    other *norm.weight (input_layernorm, post_attention_layernorm, norm, q_norm, k_norm) is
    zero-centred in Qwen3.5."""
    g = torch.Generator().manual_seed(seed)
    counts = {}

    def put(rule, p, value):
        p.copy_(value)
        counts[rule] = counts.get(rule, 0) + 1

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual." in name:
                continue  # the vision tower keeps transformers' init: chunkgrad ignores it
            u = torch.rand(p.shape, generator=g)
            n = torch.randn(p.shape, generator=g)
            if name.endswith("linear_attn.norm.weight"):
                put("gated norm w in [0.6, 1.4]", p, 0.6 + 0.8 * u)
            elif name.endswith("norm.weight"):
                put("zero-centred norm w in [-0.4, 0.4]", p, -0.4 + 0.8 * u)
            elif name.endswith("A_log"):
                put("A_log in [-2, 1]", p, -2.0 + 3.0 * u)
            elif name.endswith("dt_bias"):
                put("dt_bias ~ N(0, 0.25)", p, 0.5 * n)
            elif "conv1d" in name:
                put("conv1d ~ N(0, 1/4)", p, n / 2.0)
            elif "embed_tokens" in name:
                put("embeddings ~ N(0, 1)", p, n)
            elif p.dim() >= 2:
                put("matrices ~ N(0, 1/fan_in)", p, n / p.shape[-1] ** 0.5)
            else:
                put("other vectors ~ N(0, 1/4)", p, 0.5 * n)
    return counts


def tiny_vision():
    return dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3,
                patch_size=4, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                num_position_embeddings=16)


def make_cg_model():
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    text = dict(TEXT_COMMON, num_hidden_layers=len(CG_LAYER_TYPES), layer_types=CG_LAYER_TYPES,
                tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                 "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                 "mrope_interleaved": True})
    try:
        config = Qwen3_5Config(text_config=text, vision_config=tiny_vision(),
                               tie_word_embeddings=False)
    except Exception as e:
        log("tiny vision_config refused, retrying with fewer fields:", type(e).__name__, e)
        v = {k: tiny_vision()[k] for k in ("depth", "hidden_size", "intermediate_size",
                                           "num_heads", "out_hidden_size")}
        config = Qwen3_5Config(text_config=text, vision_config=v, tie_word_embeddings=False)
    torch.manual_seed(SEED)
    model = Qwen3_5ForConditionalGeneration(config).to(torch.float32).eval()
    return model, randomize(model, SEED)


def make_text_model():
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    config = Qwen3_5TextConfig(**TEXT_COMMON, num_hidden_layers=TEXT_LAYERS,
                               full_attention_interval=TEXT_INTERVAL, tie_word_embeddings=True,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                               partial_rotary_factor=TEXT_PARTIAL)
    torch.manual_seed(SEED + 10)
    model = Qwen3_5ForCausalLM(config).to(torch.float32).eval()
    return model, randomize(model, SEED + 10)


def make_moe_model():
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    common = {k: v for k, v in TEXT_COMMON.items() if k != "intermediate_size"}
    config = Qwen3_5MoeTextConfig(**common, num_hidden_layers=4, tie_word_embeddings=False,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                                   "partial_rotary_factor": 0.25},
                                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                  shared_expert_intermediate_size=48)
    torch.manual_seed(SEED + 20)
    model = Qwen3_5MoeForCausalLM(config).to(torch.float32).eval()
    return model, randomize(model, SEED + 20)


def copy_tokenizer(folder, tok_dir):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(folder, name))


def write_generation_config(folder):
    from transformers import GenerationConfig
    GenerationConfig(eos_token_id=EOS, pad_token_id=0, do_sample=False).save_pretrained(folder)


def add_mtp_tensors(folder, hidden):
    """Adds mtp.* tensors (as released Qwen3.5 checkpoints carry) to the last shard."""
    from safetensors.torch import load_file, save_file
    g = torch.Generator().manual_seed(SEED + 5)
    extra = {
        "mtp.fc.weight": torch.randn(hidden, 2 * hidden, generator=g),
        "mtp.pre_fc_norm_embedding.weight": torch.randn(hidden, generator=g),
        "mtp.pre_fc_norm_hidden.weight": torch.randn(hidden, generator=g),
        "mtp.layers.0.input_layernorm.weight": torch.randn(hidden, generator=g),
        "mtp.layers.0.mlp.gate_proj.weight": torch.randn(128, hidden, generator=g),
        "mtp.norm.weight": torch.randn(hidden, generator=g),
    }
    index_path = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        shard = sorted(set(index["weight_map"].values()))[-1]
    else:
        index, shard = None, "model.safetensors"
    path = os.path.join(folder, shard)
    tensors = load_file(path)
    tensors.update(extra)
    save_file(tensors, path, metadata={"format": "pt"})
    if index is not None:
        for k, v in extra.items():
            index["weight_map"][k] = shard
        index["weight_map"] = dict(sorted(index["weight_map"].items()))
        index.setdefault("metadata", {})
        index["metadata"]["total_size"] = index["metadata"].get("total_size", 0) + sum(
            v.numel() * v.element_size() for v in extra.values())
        with open(index_path, "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    log(f"added {len(extra)} mtp.* tensors to {shard}")


def edit_text_config(folder):
    """layer_types out (full_attention_interval instead), partial_rotary_factor to the top."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("layer_types", None)
    cfg["full_attention_interval"] = TEXT_INTERVAL
    rope = cfg.get("rope_parameters") or {}
    rope.pop("partial_rotary_factor", None)
    cfg["rope_parameters"] = rope
    cfg["partial_rotary_factor"] = TEXT_PARTIAL
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def saved_keys(folder):
    from safetensors import safe_open
    rows = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), framework="pt") as f:
                for k in f.keys():
                    t = f.get_slice(k)
                    dtype = t.get_dtype() if hasattr(t, "get_dtype") else "?"
                    rows.append((k, list(t.get_shape()), dtype, name))
    return sorted(rows)


def write_modules(model, folder, path, notes):
    with open(path, "w") as f:
        f.write(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}\n")
        for line in notes:
            f.write(line + "\n")
        f.write("\n== print(model)\n" + str(model) + "\n")
        f.write("\n== named_parameters\n")
        for name, p in model.named_parameters():
            f.write(f"{name} {list(p.shape)} {str(p.dtype)}\n")
        f.write("\n== safetensors keys (name, shape, dtype, file)\n")
        for k, shape, dtype, file in saved_keys(folder):
            f.write(f"{k} {shape} {dtype} {file}\n")
        with open(os.path.join(folder, "config.json")) as c:
            f.write("\n== config.json as saved\n" + c.read())


def reload(cls, folder):
    model, info = cls.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    model = model.eval()
    tied = getattr(model.config, "tie_word_embeddings", False)
    missing = [k for k in info.get("missing_keys", []) if not (tied and k == "lm_head.weight")]
    unexpected = info.get("unexpected_keys", [])
    mismatched = info.get("mismatched_keys", [])
    log(f"reloaded {folder}: missing {sorted(missing)}; unexpected {sorted(unexpected)}; "
        f"mismatched {mismatched}")
    if missing or mismatched:
        raise RuntimeError(f"{folder} did not reload cleanly: missing {missing}")
    return model


def text_model_of(model):
    lm = model.model
    return lm.language_model if hasattr(lm, "language_model") else lm


def full_logits(model, ids):
    with torch.no_grad():
        return model(ids[None]).logits[0]


def check_cached(model, ids, label):
    """transformers' own cached decoding against its full forward (a sanity line in the log)."""
    out = {}
    try:
        with torch.no_grad():
            full = model(ids[None]).logits[0]
            n0 = len(ids) - 8
            o = model(ids[None, :n0], use_cache=True)  # the model makes its own cache
            got = [o.logits[0]]
            for t in range(n0, n0 + 4):  # one token at a time
                o = model(ids[None, t:t + 1], past_key_values=o.past_key_values, use_cache=True)
                got.append(o.logits[0])
            o = model(ids[None, n0 + 4:], past_key_values=o.past_key_values, use_cache=True)
            got.append(o.logits[0])  # a block of 4
            cached = torch.cat(got, 0)
        out["max_abs_cached_vs_full"] = (cached - full).abs().max().item()
        out["max_abs_full"] = full.abs().max().item()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    log(f"{label}: transformers cached vs full forward: {out}")
    return out


def references(model, name, out_dir, with_generation):
    from safetensors.torch import save_file
    layers = text_model_of(model).layers
    captured = {}
    hooks = [layer.register_forward_hook(
        lambda m, a, o, l=l: captured.__setitem__(l, (o[0] if isinstance(o, tuple) else o)))
        for l, layer in enumerate(layers)]
    outs = {}
    g = torch.Generator().manual_seed(SEED + 1)
    for n in LENGTHS:
        ids = torch.randint(3, 1000, (n,), generator=g)
        if n > 3:
            ids[0], ids[n // 2] = 1, 1001  # <|im_start|>, </think>: added tokens inside
        with torch.no_grad():
            o = model(ids[None], output_hidden_states=True)
            base = text_model_of(model)(ids[None])
        outs[f"ids.{n}"] = ids.to(torch.int64).contiguous()
        for i, h in enumerate(o.hidden_states):
            outs[f"hidden_states.{n}.{i}"] = h[0].float().contiguous()
        for l in range(len(layers)):
            # Only the last layer's own output is new: the others are hidden_states[l + 1]
            # (kept anyway if they ever differ).
            if l + 1 < len(layers) and torch.equal(captured[l][0], o.hidden_states[l + 1][0]):
                continue
            outs[f"layer_out.{n}.{l}"] = captured[l][0].float().contiguous()
        outs[f"last_hidden_state.{n}"] = base.last_hidden_state[0].float().contiguous()
        if n != max(LENGTHS):  # the longest one's normed hidden is enough (logits: a GEMM)
            outs[f"logits.{n}"] = o.logits[0].float().contiguous()
        last_is_normed = torch.equal(o.hidden_states[-1], base.last_hidden_state)
        log(f"{name} n={n}: {len(o.hidden_states)} hidden_states; last == normed output: "
            f"{last_is_normed}; |logits| max {o.logits.abs().max().item():.3g}; per-layer "
            f"|h| max {[round(h.abs().max().item(), 2) for h in o.hidden_states]}")
    for h in hooks:
        h.remove()

    report = {"name": name}
    prompt = torch.randint(3, 1000, (PROMPT_LEN,), generator=g)
    prompt[0] = 1
    seq = prompt.clone()
    for _ in range(NEW_TOKENS):  # greedy by full forwards: no cache, no eos stop
        nxt = full_logits(model, seq)[-1].argmax()
        seq = torch.cat([seq, nxt[None]])
    greedy = seq[PROMPT_LEN:]
    outs["gen.prompt"] = prompt.to(torch.int64).contiguous()
    outs["gen.greedy"] = greedy.to(torch.int64).contiguous()
    # rows PROMPT_LEN - 1 .. : the logits each greedy token was chosen from
    outs["gen.logits"] = full_logits(model, seq[:-1])[PROMPT_LEN - 1:].float().contiguous()
    report["prompt"] = prompt.tolist()
    report["greedy_full_forward"] = greedy.tolist()
    report["cached_check"] = check_cached(model, seq, name)
    if with_generation:
        try:
            from transformers import GenerationConfig
            gc = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=EOS,
                                  pad_token_id=0)
            with torch.no_grad():
                gen = model.generate(prompt[None], generation_config=gc,
                                     attention_mask=torch.ones(1, PROMPT_LEN, dtype=torch.long))
            got = gen[0, PROMPT_LEN:].tolist()
            report["generate"] = got
            k = len(got)
            report["generate_equals_full_forward_greedy"] = got == greedy.tolist()[:k]
            report["generate_stopped_at_eos"] = k < NEW_TOKENS
        except Exception as e:
            report["generate_error"] = f"{type(e).__name__}: {e}"
    log(f"{name} generation: {json.dumps(report)}")
    with open(os.path.join(out_dir, f"{name}_generate.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    save_file(outs, os.path.join(out_dir, f"{name}_hidden.safetensors"),
              metadata={"made_by": "tests/golden/qwen3_5/make_golden.py",
                        "torch": torch.__version__,
                        "transformers": __import__("transformers").__version__})


def build(name, make, cls_name, out_dir, tok_dir, after_save=None, shard=None, expect=None):
    import transformers
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    model, counts = make()
    log(f"{name}: randomized {counts}")
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)
    write_generation_config(folder)
    copy_tokenizer(folder, tok_dir)
    notes = []
    if after_save:
        notes += after_save(folder) or []
    cls = getattr(transformers, cls_name)
    loaded = reload(cls, folder)
    # The reloaded model must compute what the one in memory does (nothing dropped or re-initialised).
    ids = torch.randint(3, 1000, (77,), generator=torch.Generator().manual_seed(7))
    diff = (full_logits(model, ids) - full_logits(loaded, ids)).abs().max().item()
    log(f"{name}: reloaded vs in-memory logits max |diff| = {diff:.3g}")
    notes.append(f"reloaded vs in-memory logits max |diff| = {diff:.3g}")
    cfg = loaded.config.get_text_config() if hasattr(loaded.config, "get_text_config") else loaded.config
    notes.append(f"text config layer_types: {getattr(cfg, 'layer_types', None)}")
    notes.append(f"text config rope_parameters: {getattr(cfg, 'rope_parameters', None)}")
    rot = text_model_of(loaded).rotary_emb
    notes.append(f"rotary inv_freq: {rot.inv_freq.tolist()} (rotary dims {2 * rot.inv_freq.numel()})")
    notes.append(f"tie: lm_head is embed_tokens: "
                 f"{loaded.lm_head.weight.data_ptr() == text_model_of(loaded).embed_tokens.weight.data_ptr()}")
    for key, want in (expect or {}).items():
        got = {"layer_types": list(getattr(cfg, "layer_types", None) or []),
               "rotary_dims": 2 * rot.inv_freq.numel(),
               "tied": loaded.lm_head.weight.data_ptr()
               == text_model_of(loaded).embed_tokens.weight.data_ptr()}[key]
        notes.append(f"{'ok' if got == want else 'WARNING: MISMATCH'}: {key} = {got}, meant {want}")
    for line in notes:
        log(f"{name}: {line}")
    write_modules(loaded, folder, os.path.join(out_dir, f"{name}_modules.txt"), notes)
    references(loaded, name, out_dir, with_generation=True)
    for f in sorted(os.listdir(folder)):
        log(f"  {name}/{f}: {os.path.getsize(os.path.join(folder, f))} bytes")
    return loaded


def write_reference_source(out_dir):
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    names = ["Qwen3_5RMSNorm", "Qwen3_5RMSNormGated", "Qwen3_5TextRotaryEmbedding",
             "apply_rotary_pos_emb", "Qwen3_5Attention", "Qwen3_5GatedDeltaNet",
             "torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "l2norm",
             "causal_conv1d_fn", "causal_conv1d_update", "Qwen3_5DecoderLayer"]
    with open(os.path.join(out_dir, "reference_source.txt"), "w") as f:
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


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else HERE
    tok_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "tiny_qwen3")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(min(8, torch.get_num_threads()))
    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    from transformers.utils import is_flash_linear_attention_available
    log(f"flash-linear-attention available: {is_flash_linear_attention_available()}")
    failures = []
    try:
        write_reference_source(out_dir)
    except Exception:
        traceback.print_exc()

    def mtp(folder):
        add_mtp_tensors(folder, TEXT_COMMON["hidden_size"])
        return ["mtp.* tensors added after save_pretrained"]

    def text_edit(folder):
        edit_text_config(folder)
        return ["config.json edited: layer_types removed, full_attention_interval "
                f"{TEXT_INTERVAL}, partial_rotary_factor {TEXT_PARTIAL} at the top level"]

    text_types = ["linear_attention" if (i + 1) % TEXT_INTERVAL else "full_attention"
                  for i in range(TEXT_LAYERS)]
    jobs = [("tiny_qwen3_5", make_cg_model, "Qwen3_5ForConditionalGeneration", mtp, "200KB",
             {"layer_types": CG_LAYER_TYPES, "rotary_dims": 8, "tied": False}),
            ("tiny_qwen3_5_text", make_text_model, "Qwen3_5ForCausalLM", text_edit, None,
             {"layer_types": text_types, "rotary_dims": int(32 * TEXT_PARTIAL), "tied": True}),
            ("tiny_qwen3_5_moe", make_moe_model, "Qwen3_5MoeForCausalLM", None, None, None)]
    for name, make, cls_name, after, shard, expect in jobs:
        try:
            build(name, make, cls_name, out_dir, tok_dir, after, shard, expect)
        except Exception:
            traceback.print_exc()
            failures.append(name)
            log(f"FAILED: {name}")
    total = 0
    for root, _, files in os.walk(out_dir):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    log(f"total written: {total} bytes; failures: {failures}")
    return 1 if any(f != "tiny_qwen3_5_moe" for f in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
