#!/usr/bin/env python3
"""Why this file exists: the goldens of chunkgrad's Hugging Face tokenizer
(train/hf_tokenizer.h, checked by tests/hf_tokenizer_golden_test.cpp).

Trains a small byte-level BPE with Hugging Face `tokenizers` the way the Qwen family's
tokenizer.json is built (NFC normaliser, the Qwen split regex isolated, ByteLevel without
its own regex, ByteLevel decoder, <|endoftext|>, <|im_start|>, <|im_end|> as special
tokens and <think>, </think> as plain added tokens), on a small corpus written here, and
saves into tests/golden/tokenizer/:
  tokenizer.json  the trained tokenizer
  cases.jsonl     {"name", "text", "ids", "decoded", "decoded_skip_special"} per hard string
Needs only `tokenizers` (0.23 on the device) and no network:
  python3 tests/golden/make_tokenizer_golden.py [OUT_DIR]
"""
import json
import os
import sys
import unicodedata

# As in Qwen2 / Qwen2.5 / Qwen3's tokenizer.json.
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1000

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog didn't care; it's been there before.",
    "We'll see what they've said: I'm sure you're right, and he'd agree that it's fine.",
    "In 2024, about 1,234,567 people used 3.14159 as pi, and 42 was still the answer.",
    "def train(model, data):\n    for step, batch in enumerate(data):\n        loss = model(batch)\n"
    "        loss.backward()\n    return loss.item()\n",
    "int main(int argc, char** argv) {\n\treturn argc > 1 ? 0 : 1;\n}\n",
    "Tokenizers split text into pieces, then merge bytes into tokens by rank.",
    "Speculative decoding drafts a block of tokens and the target verifies them in one pass.",
    "Привет, мир! Это небольшой текст на русском языке для обучения токенизатора.",
    "日本語のテキストも少し入れておきます。東京は大きな都市です。",
    "中文文本：今天天气很好，我们去公园散步吧。机器学习很有趣。",
    "한국어 문장도 있습니다. 오늘은 날씨가 좋네요.",
    "مرحبا بالعالم، هذا نص عربي قصير.",
    "हिन्दी में एक छोटा वाक्य। ελληνικά κείμενα επίσης. Ünïcödé àccents: café, naïve, résumé.",
    "Emoji: 🙂 😀 👍🏽 👨‍👩‍👧 🏳️‍🌈 ❤️ and symbols: © ® ™ € £ ¥ → ← ≤ ≥ ∞.",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "What is 2 + 2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n2 + 2 = 4.<|im_end|>\n",
    "Lines\r\nwith\r\nwindows\r\nendings and    runs   of  spaces\t\tand tabs.",
    "URLs like https://example.com/path?query=1&x=2 and emails like someone@example.org.",
    "JSON: {\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, 1], \"text\": \"hello\"}",
]


def corpus():
    for i in range(200):
        for j, line in enumerate(CORPUS):
            yield line if (i + j) % 3 else f"{i} {line} #{j}"


def build():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, single_word=False, lstrip=False, rstrip=False,
                               normalized=False, special=False) for t in ["<think>", "</think>"]])
    # One added token matched after NFC, to cover "normalized": true.
    tok.add_tokens([AddedToken("<tool_call>", normalized=True, special=False)])
    return tok


def hard_strings():
    mixed = "Mixed: English, Русский, 日本語のテキスト, 한국어, العربية, हिन्दी, ελληνικά 🙂"
    cases = {
        "empty": "",
        "ascii": "Hello, world! The quick brown fox jumps over the lazy dog.",
        "mixed_scripts": mixed,
        "emoji_zwj": "family 👨‍👩‍👧‍👦, skin 👍🏽, flag 🏳️‍🌈, keycap 1️⃣, heart ❤️‍🔥",
        "spaces": "runs     of   spaces    and a  double",
        "leading_trailing": "   leading and trailing   ",
        "only_spaces": "        ",
        "tabs_newlines": "\t\ttabs\tand\nnewlines\n\n\n  indented\n\t\n",
        "crlf": "windows\r\nline\r\nendings\r\n\r\n",
        "lone_cr": "old\rmac\r",
        "digits": "digits 1234567890 3.14159 1,000,000 0x1F 2024-12-01 ٣٤٥ ①②",
        "contractions": "I'm you're they've we'll he'd it's don't CAN'T I'M We'Ve o'clock",
        "specials": "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>",
        "specials_glued": "a<|endoftext|>b<|endoftext|><|endoftext|>c<|im_end|>",
        "special_partial": "<|im_start <|im_end| <think </think <|endoftext|",
        "added_normalized": "call<tool_call>{\"name\": \"f\"}</tool_call> done",
        "nfc": "cafe\u0301 vs café, A\u030a vs Å, \u1e9b\u0323",
        "nfd_hangul": unicodedata.normalize("NFD", "한국어 문장"),
        "punctuation": "?!... --- *** ((())) [[]] {{}} \"quotes\" 'single' `code` ~~~",
        "code": "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
        "controls": "nul\x00byte bell\x07 del\x7f nbsp\u00a0zwsp\u200bend",
        "long_mixed": (mixed + " the 12345 <|im_end|>\n  ") * 120,
        "long_letters": "a" * 20000,
        "long_spaces": " " * 5000 + "x" + "\n" * 3000,
        "long_word": "supercalifragilistic" * 500,
    }
    return cases


def main():
    import tokenizers
    from tokenizers import Tokenizer
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "tokenizer")
    os.makedirs(out_dir, exist_ok=True)
    tok = build()
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    # Read it back, as chunkgrad does: the goldens are what the saved file gives.
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "cases.jsonl"), "w", encoding="utf-8") as f:
        for name, text in hard_strings().items():
            ids = tok.encode(text).ids
            row = {"name": name, "text": text, "ids": ids,
                   "decoded": tok.decode(ids, skip_special_tokens=False),
                   "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"tokenizers {tokenizers.__version__}: vocab {tok.get_vocab_size(True)}, "
          f"{len(hard_strings())} cases in {out_dir}")


if __name__ == "__main__":
    main()
