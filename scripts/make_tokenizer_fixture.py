#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/smollm2.json: reference token ids for the
default model's vocabulary (SmolLM2-135M-Instruct), produced by llama.cpp through
llama-cpp-python with a vocab-only load.

    python scripts/make_tokenizer_fixture.py [MODEL.gguf] [-o OUT.json]

MODEL defaults to $LOWRANK_MODEL, then ~/.cache/lowrank/models/SmolLM2-135M-Instruct.Q4_1.gguf.
Each case is {"text", "special", "ids"}: ids = tokenize(text, add_bos=False,
special=special). The test (tests/tokenizer/test_smollm2.cpp) must reproduce
every entry and round-trip decode(encode(text)) == text.
"""
import argparse
import json
import os
import sys
from pathlib import Path

CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")

# (text, special)
CASES = [
    ("", False),
    ("Hello world", False),
    (" Hello world", False),
    ("Hello", False),
    ("  Hello", False),
    ("    Hello\n    Hello", False),
    ("The quick brown fox jumps over the lazy dog.", False),
    ("Hello, y'all! How are you 😁 ?", False),
    ("I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL", False),
    ("don't won't can't it's we're they've I'm you'll he'd", False),
    ("café naïve résumé Ångström façade", False),
    ("ied 4 ½ months, Führer über", False),
    ("e\u0301 combining accent vs é", False),
    ("日本語のテキストです。中文测试：你好，世界！", False),
    ("한국어 문장입니다", False),
    ("Привет, мир! Как дела?", False),
    ("مرحبا بالعالم", False),
    ("नमस्ते दुनिया", False),
    ("Mixed: English, Ελληνικά, עברית, ไทย, and 日本 in one line", False),
    ("👨‍👩‍👧‍👦 family ZWJ sequence", False),
    ("🏳️‍🌈 flag, 👍🏽 skin tone, 🇺🇸 regional indicators", False),
    ("🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)", False),
    ("3", False),
    ("33333333", False),
    ("1234567890 3.14159 -42 1e10 0x1F 1,000,000", False),
    ("The year 2024 had 366 days; π ≈ 3.14159265358979323846", False),
    ("superscript² subscript₂ fractions ¾ ⅞ roman Ⅻ circled ①", False),
    ("A1B2C3 ab12cd 123abc", False),
    ("   leading spaces", False),
    ("trailing spaces   ", False),
    ("multiple     internal      spaces", False),
    ("\t\ttabs\tand\ttabs\t", False),
    ("line1\nline2\n\nline4\r\nwindows\r\n", False),
    ("\n\n\n", False),
    (" \n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n", False),
    ("Hello\u00a0non-breaking\u2003em space\u200bzero-width", False),
    ("ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and 𝓂𝒶𝓉𝒽 script", False),
    ("def foo(x):\n    return x ** 2  # square\n\nprint(foo(12))\n", False),
    ("int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}", False),
    ("<div class=\"a\">Hi &amp; bye</div>", False),
    ("{\"key\": [1, 2, 3], \"null\": null, \"nested\": {\"a\": true}}", False),
    ("!!!!!! ?????? ...... ------======= ''''''```````\"\"\"\"", False),
    ("<|im_start|>user\nhi<|im_end|>", True),
    ("<|im_start|>user\nhi<|im_end|>", False),
    (CHAT, True),
    ("<|endoftext|>", True),
    ("text<|endoftext|>more", False),
    ("text<|endoftext|>more", True),
    ("<repo_name>lowrank<file_sep>main.cpp<filename>x", True),
    ("<|im_start|><|im_end|><|im_start|>", True),
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
     "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
     "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.", False),
]


def default_model():
    env = os.environ.get("LOWRANK_MODEL")
    if env:
        return env
    return str(Path.home() / ".cache/lowrank/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=default_model())
    ap.add_argument("-o", "--out", default=str(root / "tests/fixtures/tokenizer/smollm2.json"))
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"model not found: {args.model} (pass a path or set LOWRANK_MODEL)")

    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    cases = []
    for text, special in CASES:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        cases.append({"text": text, "special": special, "ids": [int(i) for i in ids]})

    doc = {
        "model": Path(args.model).name,
        "generator": f"llama-cpp-python {llama_cpp.__version__}: "
                     "Llama(vocab_only=True).tokenize(text.encode(), add_bos=False, special=special)",
        "cases": cases,
    }
    # One case per line keeps the file small and diffs readable.
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write(f' "model": {json.dumps(doc["model"])},\n')
        f.write(f' "generator": {json.dumps(doc["generator"])},\n')
        f.write(' "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
