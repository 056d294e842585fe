#!/usr/bin/env python3
"""Why this file exists: the cross-load of issue 20 in the direction chunkgrad -> PyTorch.
A folder written by `chunkgrad export` must load into the PyTorch reference drafter
(dflash_reference.py, strict load_state_dict: every public name, no other) and give the
block logits chunkgrad computes. chunkgrad writes them beside the folder's files
(DIR/chunkgrad_logits.safetensors, by the test DFlashDrafterGolden.ExportForTheReference:
features, ids, anchors, logits under the training mask); this script recomputes them
with the reference and compares.

  python3 tests/golden/check_exported_drafter.py DIR [TARGET_DIR]

TARGET_DIR (default tests/golden/tiny_qwen3) gives the target's embed_tokens and lm_head
(the drafter has neither). Prints one line per check and exits 1 when any fails.
Needs torch; uses the `safetensors` package when present, else a small reader here.
"""
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dflash_reference import DFlashReference  # noqa: E402

REL_TOL = 1e-4  # f32 both sides from the same bf16 weights

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
           "I64": torch.int64, "I32": torch.int32, "BOOL": torch.bool, "F64": torch.float64}


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = bytearray(data[8 + n + b:8 + n + e])
        t = torch.frombuffer(buf, dtype=_DTYPES[info["dtype"]]) if e > b else \
            torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def read_target_tensors(target_dir, names):
    """The named tensors of a Hugging Face folder (one file or an index of shards)."""
    index = os.path.join(target_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map[n] for n in names))
    else:
        files = ["model.safetensors"]
    found = {}
    for fname in files:
        found.update({k: v for k, v in read_safetensors(os.path.join(target_dir, fname)).items()
                      if k in names})
    return [found[n].float() for n in names]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    folder = sys.argv[1]
    target_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "tiny_qwen3")
    ok = True

    def check(what, good, detail=""):
        nonlocal ok
        ok = ok and good
        print(f"{'PASS' if good else 'FAIL'}: {what}{': ' + detail if detail else ''}")

    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    for leak in ("rope_parameters", "partial_rotary_factor", "mrope_section", "rope_type"):
        check(f"config.json has no {leak}", leak not in config)
    check("config.json rope_scaling is null", "rope_scaling" in config and
          config["rope_scaling"] is None)
    state = read_safetensors(os.path.join(folder, "model.safetensors"))
    check("model.safetensors is all bf16", all(v.dtype == torch.bfloat16 for v in state.values()),
          str(sorted({str(v.dtype) for v in state.values()})))
    model = DFlashReference(config)
    try:
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
        check("strict load_state_dict", True, f"{len(state)} tensors")
    except RuntimeError as e:
        check("strict load_state_dict", False, str(e).splitlines()[0])
        return 1
    model.eval()
    embed, lm_head = read_target_tensors(target_dir, ["model.embed_tokens.weight",
                                                      "lm_head.weight"])
    data = read_safetensors(os.path.join(folder, "chunkgrad_logits.safetensors"))
    with torch.no_grad():
        logits = model.training_forward(data["features"].float(), data["ids"], data["anchors"],
                                        embed, lm_head)
    want = data["logits"].float()
    if logits.shape != want.shape:
        check("block logits shape", False, f"{tuple(logits.shape)} vs {tuple(want.shape)}")
        return 1
    rel = ((logits - want).abs().max() / max(1.0, want.abs().max().item())).item()
    check("block logits equal chunkgrad's", rel <= REL_TOL,
          f"max |diff| / scale = {rel:.3g} (tolerance {REL_TOL}), {tuple(want.shape)}")
    agree = (logits.argmax(-1) == want.argmax(-1)).float().mean().item()
    print(f"argmax agreement {agree:.4f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
