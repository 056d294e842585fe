#!/usr/bin/env python3
"""Why this file exists: golden data for tests/nn_qwen3_golden_test.cpp, made by
Hugging Face transformers itself, so that chunkgrad's Qwen3 is checked against the
reference implementation and not only against itself.

It builds two tiny random Qwen3ForCausalLM models (tied and untied embeddings), saves each
with save_pretrained(safe_serialization=True) into tests/data/qwen3_tiny_{tied,untied}/,
runs a fixed batch of token ids through it in fp32 and writes the outputs next to it in
reference_outputs.safetensors, plus a README.txt saying how they were made.

Run on a machine with torch, transformers and safetensors (no network is needed):
    python3 tests/data/make_qwen3_golden.py            # writes next to this script
    python3 tests/data/make_qwen3_golden.py --out DIR  # or into DIR/qwen3_tiny_*/

Sizes (tens of KB per checkpoint): 2 layers, hidden 32, 4 query heads and 2 kv heads of
head_dim 16 (so heads * head_dim = 64 != hidden: Qwen3's decoupled head_dim is exercised),
MLP 64, vocab 256, rope_theta 1e6 (not transformers' default 10000, so a reader that
misses the RoPE base fails), rms_norm_eps 1e-6. Weights are drawn at scales that make
every part matter (unit-scale activations, attention scores of order 1, norm weights
around 1), rounded to bf16 and saved as BF16 (as real Qwen3 checkpoints are); the
reference runs in fp32 on exactly those rounded values.

reference_outputs.safetensors holds (B = 2, S = 8; all F32 except input_ids):
    input_ids            I64 [B, S]
    embeddings           F32 [B, S, hidden]   model.embed_tokens output
    layers.{i}.output    F32 [B, S, hidden]   decoder layer i's output (before the final norm)
    norm.output          F32 [B, S, hidden]   final norm output (last_hidden_state)
    logits               F32 [B, S, vocab]
    hf_hidden_states.{k} F32 [B, S, hidden]   output_hidden_states=True as returned, k = 0..L
The first four are captured with forward hooks, so their meaning does not depend on how a
transformers version assembles hidden_states; the script checks that hf_hidden_states
agrees with them (embeddings, layer outputs, and the normed last state) and says so.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

SEED = 1234
ROPE_THETA = 1e6
INPUT_IDS = [[1, 17, 42, 255, 0, 128, 7, 99],
             [200, 3, 3, 64, 250, 11, 190, 5]]
SIZES = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             rms_norm_eps=1e-6, max_position_embeddings=64)


def make_config(tie):
    """A Qwen3Config with rope_theta 1e6 in whichever layout this transformers expects."""
    kwargs = dict(SIZES, tie_word_embeddings=tie, hidden_act="silu", attention_bias=False,
                  use_sliding_window=False)
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    else:
        kwargs["rope_theta"] = ROPE_THETA
        kwargs["rope_scaling"] = None
    config = Qwen3Config(**kwargs)
    try:
        config._attn_implementation = "eager"  # plain softmax(QK^T)V; sdpa agrees to ~1e-7
    except Exception as e:  # noqa: BLE001 - a version without the setter keeps its default
        print(f"note: keeping the default attention implementation ({e})")
    return config


def effective_rope_theta(config):
    rope = getattr(config, "rope_parameters", None) or {}
    return rope.get("rope_theta", getattr(config, "rope_theta", None))


@torch.no_grad()
def randomize(model, gen):
    """Scales that make every weight matter: see the module docstring."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith("embed_tokens.weight"):
            p.copy_(torch.randn(p.shape, generator=gen))
        else:  # Linear [out, in]: unit-scale outputs for unit-scale inputs
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
        p.copy_(p.to(torch.bfloat16).to(torch.float32))  # exactly representable in bf16


def layer_output(output):
    return output[0] if isinstance(output, (tuple, list)) else output


@torch.no_grad()
def make_one(out_dir, tie):
    name = "qwen3_tiny_" + ("tied" if tie else "untied")
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + (1 if tie else 0))
    config = make_config(tie)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    randomize(model, gen)
    if tie:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    theta = effective_rope_theta(model.config)
    assert theta == ROPE_THETA, f"the config holds rope_theta {theta}, not {ROPE_THETA}"
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is not None and hasattr(rotary, "inv_freq"):
        hd = SIZES["head_dim"]
        expected = 1.0 / ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        assert torch.allclose(rotary.inv_freq.float().cpu(), expected), \
            "the model's RoPE frequencies are not those of base 1e6"

    captured = {}
    hooks = [model.model.embed_tokens.register_forward_hook(
        lambda m, i, o: captured.__setitem__("embeddings", o.detach().clone()))]
    for li, layer in enumerate(model.model.layers):
        hooks.append(layer.register_forward_hook(
            lambda m, i, o, li=li: captured.__setitem__(f"layers.{li}.output",
                                                        layer_output(o).detach().clone())))
    hooks.append(model.model.norm.register_forward_hook(
        lambda m, i, o: captured.__setitem__("norm.output", o.detach().clone())))

    ids = torch.tensor(INPUT_IDS, dtype=torch.int64)
    out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()

    ref = {"input_ids": ids.contiguous(), "logits": out.logits.float().contiguous()}
    ref.update({k: v.float().contiguous() for k, v in captured.items()})
    hs = out.hidden_states
    for k, h in enumerate(hs):
        ref[f"hf_hidden_states.{k}"] = h.float().contiguous()
    L = config.num_hidden_layers
    expected_hs = ([captured["embeddings"]] + [captured[f"layers.{i}.output"] for i in range(L - 1)]
                   + [captured["norm.output"]])
    agree = len(hs) == L + 1 and all(torch.equal(a, b) for a, b in zip(hs, expected_hs))
    print(f"{name}: hidden_states = (embeddings, layer outputs 0..{L - 2}, final norm): "
          f"{'yes' if agree else 'NO (see the hooks-captured tensors instead)'}")

    # Saved as BF16 like real checkpoints; the values are the fp32 ones above exactly.
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    save_file(ref, os.path.join(folder, "reference_outputs.safetensors"),
              metadata={"transformers_version": transformers.__version__,
                        "torch_version": torch.__version__})
    with open(os.path.join(folder, "config.json")) as f:
        saved = json.load(f)
    layout = "rope_parameters" if "rope_parameters" in saved else "top-level rope_theta"
    with open(os.path.join(folder, "README.txt"), "w") as f:
        f.write(
            f"{name}: a tiny random Qwen3ForCausalLM (tie_word_embeddings={tie}) and its\n"
            f"reference outputs, made by tests/data/make_qwen3_golden.py with transformers\n"
            f"{transformers.__version__} and torch {torch.__version__} on the CPU in fp32\n"
            f"(eager attention, seed {SEED + (1 if tie else 0)}). config.json keeps the RoPE\n"
            f"base ({ROPE_THETA:g}) as {layout}. model.safetensors holds the weights as BF16;\n"
            f"reference_outputs.safetensors the input ids, the embedding output, every\n"
            f"decoder layer's output (layers.i.output), the final norm output, the logits,\n"
            f"and hidden_states as transformers returns them (hf_hidden_states.k). Checked by\n"
            f"tests/nn_qwen3_golden_test.cpp. Regenerate with:\n"
            f"    python3 tests/data/make_qwen3_golden.py\n")
    sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
    print(f"{name}: wrote {sizes}; max |logit| {out.logits.abs().max().item():.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="folder to write qwen3_tiny_{tied,untied}/ into (default: next "
                             "to this script)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # deterministic reductions
    for tie in (True, False):
        make_one(args.out, tie)
    return 0


if __name__ == "__main__":
    sys.exit(main())
