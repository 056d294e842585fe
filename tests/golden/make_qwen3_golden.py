#!/usr/bin/env python3
"""Why this file exists: the golden of chunkgrad's Hugging Face Qwen3 target
(tests/qwen3_golden_test.cpp): a tiny random Qwen3 checkpoint made and saved by
transformers itself, and what transformers computes from it.

Writes into OUT_DIR (default tests/golden):
  tiny_qwen3/            Qwen3ForCausalLM (vocab 1024 padded past the tokenizer's 1003 tokens,
                         as Qwen pads 151669 to 151936; hidden 64, 4 layers, 4/2 heads x 16,
                         MLP 128, rope theta 1e6, untied lm_head, f32), save_pretrained with
                         safetensors sharded into several files + model.safetensors.index.json,
                         config.json, generation_config.json, tokenizer.json (the committed
                         tests/golden/tokenizer/tokenizer.json), tokenizer_config.json (the
                         Qwen3 chat template, the eos/pad tokens)
  tiny_qwen3_hidden.safetensors
                         per sequence length n in (1, 7, 33): ids.n (i64 [n]),
                         hidden_states.n.i (f32 [n, 64], i = 0 .. 4: transformers'
                         output_hidden_states), layer_out.n.l (the output of decoder layer l
                         taken by a forward hook, before any final norm), last_hidden_state.n
                         (Qwen3Model's normed output), logits.n ([n, 1024])
  tiny_qwen3_chat.jsonl  the chat template rendered by transformers (a few conversations,
                         thinking on/off), text and ids, when the tokenizer loads

Needs torch and transformers (2.11 / 5.17 on the device), no network:
  python3 tests/golden/make_qwen3_golden.py [OUT_DIR] [TOKENIZER_DIR]
TOKENIZER_DIR holds tokenizer.json and qwen3_chat_template.jinja (default: tests/golden/tokenizer).
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 1024
LENGTHS = (1, 7, 33)
SEED = 20261202


def make_model():
    import inspect

    from transformers import Qwen3Config, Qwen3ForCausalLM
    # transformers 5 keeps the theta in rope_parameters; 4.x takes rope_theta.
    if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters:
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    else:
        rope = {"rope_theta": 1e6}
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, **rope,
        rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=2, pad_token_id=0, use_sliding_window=False,
        attention_bias=False, hidden_act="silu")
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    # Weights whose mistakes show: unit-scale embeddings, projections ~ 1/sqrt(fan_in),
    # norm weights away from 1 (a 1 + w or a missing norm weight changes every output).
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return model


def write_tokenizer(folder, tok_dir):
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(tok_dir, "qwen3_chat_template.jinja")) as f:
        template = f.read().strip("\n")
    with open(os.path.join(tok_dir, "tokenizer.json")) as f:
        added = json.load(f)["added_tokens"]
    config = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
        "chat_template": template, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 40960,
        "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
        "added_tokens_decoder": {
            str(t["id"]): {"content": t["content"], "lstrip": t["lstrip"],
                           "normalized": t["normalized"], "rstrip": t["rstrip"],
                           "single_word": t["single_word"], "special": t["special"]}
            for t in added},
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")


CHATS = [
    {"messages": [{"role": "user", "content": "What is 2 + 2?"},
                  {"role": "assistant", "content": "2 + 2 = 4."}]},
    {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "Say hi."},
                  {"role": "assistant", "content": "Hi!"},
                  {"role": "user", "content": "Again, in French."},
                  {"role": "assistant", "content": "Salut !"}]},
]


def write_chat_cases(folder, out_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    with open(out_path, "w") as f:
        for i, chat in enumerate(CHATS):
            for thinking in (False, True):
                for gen in (False, True):
                    msgs = chat["messages"][:-1] if gen else chat["messages"]
                    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen,
                                                   enable_thinking=thinking)
                    ids = tok(text, add_special_tokens=False)["input_ids"]
                    f.write(json.dumps({"chat": i, "enable_thinking": thinking,
                                        "add_generation_prompt": gen, "messages": msgs,
                                        "text": text, "ids": ids}, ensure_ascii=False) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    tok_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "tokenizer")
    folder = os.path.join(out, "tiny_qwen3")
    os.makedirs(folder, exist_ok=True)
    model = make_model()
    model.save_pretrained(folder, max_shard_size="400KB")
    shards = [f for f in os.listdir(folder) if f.endswith(".safetensors")]
    print(f"{len(shards)} safetensors shards: {sorted(shards)}")
    if len(shards) < 2:
        print("WARNING: the checkpoint was not sharded")
    model.generation_config.eos_token_id = [2, 0]
    model.generation_config.save_pretrained(folder)
    write_tokenizer(folder, tok_dir)

    from safetensors.torch import save_file
    outs = {}
    layers = model.model.layers
    captured = {}
    hooks = [layer.register_forward_hook(
        lambda m, a, o, l=l: captured.__setitem__(l, (o[0] if isinstance(o, tuple) else o)))
        for l, layer in enumerate(layers)]
    g = torch.Generator().manual_seed(SEED + 1)
    for n in LENGTHS:
        ids = torch.randint(3, 1000, (n,), generator=g)
        if n > 3:
            ids[0], ids[n // 2] = 1, 1001  # <|im_start|>, </think>: added tokens inside
        with torch.no_grad():
            o = model(ids[None], output_hidden_states=True)
            base = model.model(ids[None])
        outs[f"ids.{n}"] = ids.to(torch.int64).contiguous()
        for i, h in enumerate(o.hidden_states):
            outs[f"hidden_states.{n}.{i}"] = h[0].float().contiguous()
        for l in range(len(layers)):
            outs[f"layer_out.{n}.{l}"] = captured[l][0].float().contiguous()
        outs[f"last_hidden_state.{n}"] = base.last_hidden_state[0].float().contiguous()
        outs[f"logits.{n}"] = o.logits[0].float().contiguous()
        last_is_normed = torch.equal(o.hidden_states[-1], base.last_hidden_state)
        print(f"n={n}: {len(o.hidden_states)} hidden_states; last entry == normed output: "
              f"{last_is_normed}; max |hidden_states[L] - layer_out[L-1]| = "
              f"{(o.hidden_states[-1][0] - captured[len(layers) - 1][0]).abs().max().item():.3g}")
    for h in hooks:
        h.remove()
    save_file(outs, os.path.join(out, "tiny_qwen3_hidden.safetensors"),
              metadata={"made_by": "tests/golden/make_qwen3_golden.py",
                        "torch": torch.__version__,
                        "transformers": __import__("transformers").__version__})
    try:
        write_chat_cases(folder, os.path.join(out, "tiny_qwen3_chat.jsonl"))
    except Exception as e:  # the checkpoint goldens do not depend on it
        print("chat cases skipped:", type(e).__name__, e)
    for name in sorted(os.listdir(folder)):
        print(f"{name}: {os.path.getsize(os.path.join(folder, name))} bytes")


if __name__ == "__main__":
    main()
