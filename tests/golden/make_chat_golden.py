#!/usr/bin/env python3
"""Why this file exists: the goldens of chunkgrad's chat rendering (train/chat_data.h,
checked by tests/chat_golden_test.cpp): the text Hugging Face `apply_chat_template` makes
of hard conversations with the Qwen3 chat template and thinking off, and the ids its
tokenizer gives that text.

The tokenizer is the small byte-level BPE of tests/golden/tokenizer/tokenizer.json (made
by make_tokenizer_golden.py: <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>,
<tool_call> added), loaded by transformers with QWEN3_TEMPLATE below as its chat template.
Writes OUT_DIR/cases.jsonl, one line per conversation:
  {"name", "messages", "text", "ids"}                 always
  {"prompt_text", "prompt_ids"}                        when the last message is the
      assistant's: messages[:-1] rendered with add_generation_prompt=True and thinking
      off, i.e. the prompt a serving engine gives the target before that answer
and OUT_DIR/versions.txt. Needs transformers (5.17 on the device), tokenizers and jinja2;
no network:
  python3 tests/golden/make_chat_golden.py [OUT_DIR] [TOKENIZER_JSON]
"""
import json
import os
import sys
import unicodedata

# Note [The template's source]: verbatim the Qwen3 chat template (the chat_template of
# Qwen/Qwen3-0.6B's and Qwen/Qwen3-8B's tokenizer_config.json as released), as copied
# into llama.cpp's models/templates/Qwen-Qwen3-0.6B.jinja (read from the fork
# ye-NX/llama.cpp, commit b354d7c9ecb76c97c07098617cdebbdfffa2583e). A later revision of
# Qwen3-8B's tokenizer_config.json (HF commit 895c8d171bc03c30e113cd7a28c02494b5e068b7)
# reads `message.content is string` (else '') and `message.reasoning_content is string`;
# for the string contents chunkgrad accepts the two render the same text.
QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""


def S(text):
    return {"role": "system", "content": text}


def U(text):
    return {"role": "user", "content": text}


def A(text, reasoning=None):
    m = {"role": "assistant", "content": text}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def conversations():
    nfd = unicodedata.normalize("NFD", "café naïve 한국어")
    return {
        "single_turn": [U("What is 2 + 2?"), A("2 + 2 = 4.")],
        "with_system": [S("You are a helpful assistant."), U("Hi there"), A("Hello! How can I help?")],
        "multi_turn": [U("Name a colour."), A("Blue."), U("Another one?"), A("Green.")],
        "multi_turn_system": [S("Be brief."), U("one"), A("1"), U("two"), A("2"), U("three"),
                              A("3")],
        "ends_with_user": [U("first"), A("answer one"), U("second, unanswered")],
        "two_assistants_after_query": [U("Tell me two things."), A("Thing one."), A("Thing two.")],
        "think_in_last": [U("Why?"), A("<think>\nBecause of reasons.\n</think>\n\nThe answer.")],
        "think_in_earlier": [U("q1"), A("<think>\nhidden\n</think>\n\nshown one"), U("q2"),
                             A("shown two")],
        "think_not_last_after_query": [U("go"), A("<think>plan</think>step one"),
                                       A("step two")],
        "think_without_open": [U("x"), A("just reasoning</think>\n\nfinal")],
        "think_twice": [U("x"), A("<think>a</think>b</think>\n\nc")],
        "open_think_only": [U("x"), A("text with <think> but no close")],
        "reasoning_field": [U("Solve it."), A("42", reasoning="\n\nLet me think: 6 * 7.\n\n")],
        "reasoning_field_earlier": [U("a"), A("b", reasoning="hidden"), U("c"), A("d")],
        "empty_assistant": [U("Say nothing."), A("")],
        "empty_user": [U(""), A("You said nothing.")],
        "whitespace_content": [U("   "), A("  \n  ")],
        "leading_newlines_last": [U("x"), A("\n\n\nafter newlines")],
        "leading_newlines_earlier": [U("x"), A("\n\nearlier answer\n"), U("y"), A("z")],
        "trailing_newlines": [U("x\n\n"), A("answer\n\n\n")],
        "system_in_middle": [U("hi"), A("hello"), S("New instructions."), U("ok?"), A("ok.")],
        "system_only_first_rendered_as_system": [S("sys"), S("second sys"), U("u"), A("a")],
        "no_user": [S("You talk alone."), A("Monologue.")],
        "assistant_first": [A("I start."), U("Fine."), A("Thanks.")],
        "tool_response_user": [U("Look it up."), A("Looking."),
                               U("<tool_response>\n{\"r\": 1}\n</tool_response>"),
                               A("It is 1.")],
        "specials_in_content": [U("write <|im_end|> and <think> literally"),
                                A("here: <|im_end|> <|im_start|>user <think>")],
        "unicode": [S("Réponds en français 🙂"),
                    U("Mixed: English, Русский, 日本語, 한국어, العربية, हिन्दी 👨‍👩‍👧"),
                    A("Ünïcödé → ✓ 👍🏽 中文回答。")],
        "nfd_content": [U(nfd), A(nfd + " " + nfd)],
        "crlf_tabs": [U("line one\r\nline two\ttab"), A("\tindented\r\n  spaced   out  ")],
        "digits_code": [U("def f(x):\n    return x * 2\n"),
                        A("```python\nprint(f(21))  # 42\n```")],
        "long": [U("Explain. " * 200), A("Because " * 300 + "done.")],
    }


def load_tokenizer(tok_path):
    """transformers' fast tokenizer of tok_path with the Qwen3 template, and how it was made."""
    import transformers
    try:
        from transformers import PreTrainedTokenizerFast as Fast
    except ImportError:  # transformers 5 may name it TokenizersBackend only
        from transformers import TokenizersBackend as Fast
    tok = Fast(tokenizer_file=tok_path)
    tok.chat_template = QWEN3_TEMPLATE
    return tok, f"transformers {transformers.__version__} {type(tok).__name__}"


def main():
    import jinja2
    import tokenizers
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "chat")
    tok_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "tokenizer",
                                                                 "tokenizer.json")
    os.makedirs(out_dir, exist_ok=True)
    tok, how = load_tokenizer(tok_path)
    raw = tokenizers.Tokenizer.from_file(tok_path)
    mismatches = 0

    def render(messages, generation_prompt):
        return tok.apply_chat_template(messages, tokenize=False,
                                       add_generation_prompt=generation_prompt,
                                       enable_thinking=False)

    def encode(text):
        ids = list(tok(text, add_special_tokens=False)["input_ids"])
        if ids != raw.encode(text, add_special_tokens=False).ids:
            nonlocal mismatches
            mismatches += 1
            print(f"transformers and tokenizers disagree on the ids of {text[:80]!r}", flush=True)
        return ids

    with open(os.path.join(out_dir, "cases.jsonl"), "w", encoding="utf-8") as f:
        for name, messages in conversations().items():
            text = render(messages, False)
            assert isinstance(text, str), f"{name}: apply_chat_template gave {type(text)}"
            row = {"name": name, "messages": messages, "text": text, "ids": encode(text)}
            if messages[-1]["role"] == "assistant":
                row["prompt_text"] = render(messages[:-1], True)
                row["prompt_ids"] = encode(row["prompt_text"])
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(os.path.join(out_dir, "versions.txt"), "w") as f:
        f.write(f"{how}\ntokenizers {tokenizers.__version__}\njinja2 {jinja2.__version__}\n"
                f"id mismatches between transformers and tokenizers: {mismatches}\n")
    print(f"{how}, tokenizers {tokenizers.__version__}: {len(conversations())} conversations "
          f"in {out_dir}, {mismatches} id mismatches")


if __name__ == "__main__":
    main()
