#!/usr/bin/env python3
"""Why this file exists: the goldens of chunkgrad's DFlash drafter
(tests/dflash_drafter_golden_test.cpp): two random drafters in the public layout, run by the
PyTorch reference (dflash_reference.py) under SpecForge's training mask.

Reads OUT_DIR/tiny_qwen3 (made first by make_qwen3_golden.py: its embed_tokens, lm_head and
hidden states are the drafter's target). Writes into OUT_DIR:
  drafter_sliding/   config.json (the fields `chunkgrad export` writes) + bf16
                     model.safetensors: 2 layers [sliding_attention, full_attention],
                     window 5, block 4, heads 4/2 x 24 (q width 96 != hidden 64), MLP 96,
                     rope theta 1e4 (its own, not the target's 1e6), target layers [1, 2]
  drafter_full/      3 full layers, block 8, heads 2/1 x 32, MLP 160, rope theta 1e6,
                     target layers [0, 1, 2]
  drafter_golden.safetensors, per drafter D in (sliding, full):
    D.features  f32 [S, K*H]  the target's hidden_states[l + 1] for l in target_layer_ids,
                              concatenated, on the 40 tokens ids (S = 40)
    D.ids       i64 [S]
    D.anchors   i64 [N]
    D.block_ids i64 [N*Bk]    ids[anchor] in slot 0, the mask token (1003) elsewhere
    D.labels    i64 [N, Bk]   ids[anchor + k] (slot 0 is the anchor itself, never a loss)
    D.logits    f32 [N*Bk, V] the block logits under the training mask
    full.inference_logits f32 [N*Bk, V]  z-lab's unmasked forward, one block at a time
                              (context = features[:anchor]): equal to full.logits, since a
                              full layer's training mask is exactly "context before the
                              anchor + the whole own block"
    sliding.inference_logits  the same for the sliding drafter: NOT equal to its logits (the
                              unmasked forward ignores the window and the causal block);
                              kept to show the two rules differ
  The embedding and lm_head are the target's (tiny_qwen3 model.embed_tokens / lm_head).
If z-lab's dflash/model.py is given (ZLAB_MODEL=path) and imports under this transformers,
its DFlashDraftModel is loaded from each folder (strict) and run on one block without a mask;
the difference to the reference's inference forward is printed (a check of the reference).

  python3 tests/golden/make_drafter_golden.py [OUT_DIR]
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dflash_reference import DFlashReference  # noqa: E402

MASK_TOKEN = 1003
S = 40
SEED = 20261203

DRAFTERS = {
    "sliding": dict(layers=2, heads=4, kv=2, head_dim=24, mlp=96, theta=1e4, block=4,
                    window=5, types=["sliding_attention", "full_attention"],
                    target_layers=[1, 2], anchors=[0, 6, 13, 27, 35]),
    "full": dict(layers=3, heads=2, kv=1, head_dim=32, mlp=160, theta=1e6, block=8,
                 window=None, types=["full_attention"] * 3, target_layers=[0, 1, 2],
                 anchors=[1, 9, 21, 31]),
}


def public_config(d, hidden, vocab, num_target_layers):
    """config.json as train/drafter_export.cpp public_drafter_config writes it."""
    slides = "sliding_attention" in d["types"]
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "dflash_config": {"mask_token_id": MASK_TOKEN, "target_layer_ids": d["target_layers"],
                          "block_size": d["block"]},
        "block_size": d["block"], "num_target_layers": num_target_layers,
        "hidden_size": hidden, "num_hidden_layers": d["layers"],
        "num_attention_heads": d["heads"], "num_key_value_heads": d["kv"],
        "head_dim": d["head_dim"], "intermediate_size": d["mlp"], "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-6,
        "vocab_size": vocab, "max_position_embeddings": 40960, "layer_types": d["types"],
        "use_sliding_window": slides, "sliding_window": d["window"] if slides else None,
        "rope_theta": d["theta"], "rope_scaling": None, "tie_word_embeddings": False,
        "dtype": "bfloat16", "use_cache": True,
    }


def randomize(model, g):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))  # exactly what the file holds


def zlab_check(zlab_path, folder, features, ids, anchor, embed, lm_head, ref_logits):
    import importlib.util

    from transformers import Qwen3Config
    spec = importlib.util.spec_from_file_location("zlab_dflash_model", zlab_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    config = Qwen3Config(**c)
    for k in ("dflash_config", "block_size", "num_target_layers", "layer_types",
              "sliding_window", "head_dim"):
        setattr(config, k, c[k])
    config._attn_implementation = "eager"
    print(f"  z-lab config rope: {getattr(config, 'rope_parameters', None)}"
          f" / {getattr(config, 'rope_theta', None)}")
    model = mod.DFlashDraftModel(config).float().eval()
    from safetensors.torch import load_file
    state = {k: v.float() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    print(f"  z-lab load: missing {missing}, unexpected {unexpected}")
    Bk = c["block_size"]
    block = torch.full((1, Bk), MASK_TOKEN, dtype=torch.long)
    block[0, 0] = ids[anchor]
    with torch.no_grad():
        hidden = model(position_ids=torch.arange(anchor + Bk)[None], attention_mask=None,
                       noise_embedding=embed[block], target_hidden=features[None, :anchor],
                       use_cache=False, is_causal=False)
    logits = hidden[0] @ lm_head.T
    print(f"  z-lab forward vs reference inference forward, block at {anchor}: "
          f"max |diff| = {(logits - ref_logits).abs().max().item():.3g} "
          f"(logit scale {ref_logits.abs().max().item():.3g})")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    from safetensors.torch import save_file
    from transformers import Qwen3ForCausalLM
    target = Qwen3ForCausalLM.from_pretrained(os.path.join(out, "tiny_qwen3"),
                                              dtype=torch.float32).eval()
    embed = target.model.embed_tokens.weight.detach().float()
    lm_head = target.lm_head.weight.detach().float()
    tc = target.config
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(3, 1000, (S,), generator=g)
    with torch.no_grad():
        hs = target(ids[None], output_hidden_states=True).hidden_states
    goldens = {}
    for name, d in DRAFTERS.items():
        config = public_config(d, tc.hidden_size, tc.vocab_size, tc.num_hidden_layers)
        model = DFlashReference(config).float().eval()
        randomize(model, g)
        folder = os.path.join(out, f"drafter_{name}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()},
                  os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        features = torch.cat([hs[l + 1][0] for l in d["target_layers"]], dim=-1).float()
        anchors = torch.tensor(d["anchors"], dtype=torch.long)
        Bk = d["block"]
        with torch.no_grad():
            logits = model.training_forward(features, ids, anchors, embed, lm_head)
            inference = torch.cat([model.inference_forward(features, ids, int(a), embed, lm_head)
                                   for a in anchors])
        label_idx = (anchors[:, None] + torch.arange(Bk)[None]).clamp(max=S - 1)
        goldens.update({
            f"{name}.features": features.contiguous(), f"{name}.ids": ids.clone(),
            f"{name}.anchors": anchors, f"{name}.block_ids": model.block_ids(ids, anchors),
            f"{name}.labels": ids[label_idx].contiguous(), f"{name}.logits": logits.contiguous(),
            f"{name}.inference_logits": inference.contiguous(),
        })
        diff = (logits - inference).abs().max().item()
        print(f"{name}: logits {tuple(logits.shape)}, scale {logits.abs().max().item():.3g}; "
              f"training mask vs unmasked inference forward: max |diff| = {diff:.3g}")
        zlab = os.environ.get("ZLAB_MODEL")
        if zlab and os.path.exists(zlab):
            try:
                a = int(anchors[-1])
                zlab_check(zlab, folder, features, ids, a, embed, lm_head, inference[-Bk:])
            except Exception as e:
                print(f"  z-lab check skipped: {type(e).__name__}: {e}")
    save_file(goldens, os.path.join(out, "drafter_golden.safetensors"),
              metadata={"made_by": "tests/golden/make_drafter_golden.py",
                        "torch": torch.__version__})


if __name__ == "__main__":
    main()
