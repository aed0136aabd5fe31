#!/usr/bin/env python3
"""Golden tool-call outputs from the real chat templates (tests/fixtures/templates).

What a model writes when it calls a tool is what its chat template renders for
an assistant message that carries `tool_calls`: the template is the code the
model was trained against, and we did not write it. For each template of a
family src/server/tool_calls.h supports, and each case below, this renders the
conversation twice with Python's jinja2 set up as transformers sets it up
(scripts/make_template_fixtures.py): without the last assistant message and
add_generation_prompt=True, and with it and add_generation_prompt=False. The
second render's suffix after the first is the text the model would have
generated for that turn; the turn's end token (<|im_end|>, <|eot_id|>, </s>...)
is cut off, as the engine stops on it and never shows it to the parser.

A leading <think>...</think> block that a template inserts before the answer
(Qwen3) is recorded apart (reasoning_prefix) and cut from `text`: splitting
reasoning off is not the tool-call parser's job.

Output: tests/fixtures/tools/golden.json with
  "cases":  [{template, format, case, text, reasoning_prefix, content, calls: [{name, arguments, id?}]}]
  "detect": {template file: format} for all templates (the family named below, else "generic").
Expected content is the message's content when the template rendered it, else "".

Not run in CI. Usage: /tmp/refvenv/bin/python scripts/make_tool_fixtures.py  (needs jinja2 3.x)
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_template_fixtures as mtf  # noqa: E402  the transformers-like jinja2 environment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "tests", "fixtures", "templates")
DEST = os.path.join(HERE, "..", "tests", "fixtures", "tools", "golden.json")

# The family of each template whose tool-call syntax is supported (by the
# template's documented format, not by the C++ detector, which the test checks
# against this table).
FAMILIES = {
    "hermes": ["Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen-QwQ-32B", "qwen2.5-coder-instruct",
               "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
               "ibm-granite-granite-4.0", "ibm-granite-granite-4.1", "MiMo-VL", "Bielik-11B-v3.0-Instruct",
               "Reka-Edge"],
    "llama3": ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
               "meta-llama-Llama-3.3-70B-Instruct"],
    "mistral": ["Mistral-Small-3.2-24B-Instruct-2506", "mistralai-Ministral-3-14B-Reasoning-2512",
                "mistralai-Mistral-Nemo-Instruct-2407", "unsloth-mistral-Devstral-Small-2507"],
    "granite": ["ibm-granite-granite-3.3-2B-Instruct"],  # describes <|tool_call|>, renders no calls
    "functools": ["fireworks-ai-llama-3-firefunction-v2"],
    "apriel": ["unsloth-Apriel-1.5", "Apriel-1.6-15b-Thinker-fixed"],
}
FORMAT_OF = {name + ".jinja": fmt for fmt, names in FAMILIES.items() for name in names}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search documents.",
        "parameters": {"type": "object", "properties": {"query": {"type": "object"}}, "required": ["query"]},
    },
}
TOOLS = mtf.TOOLS + [SEARCH_TOOL]

# Mistral's templates want 9-character alphanumeric ids.
WEATHER = {"id": "abcDEF123", "type": "function",
           "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
ADD = {"id": "xyzXYZ987", "type": "function",
       "function": {"name": "add", "arguments": {"a": 1.5, "b": -2, "scale": 1e-3}}}
SEARCH = {"id": "q1w2e3r4t", "type": "function", "function": {"name": "search", "arguments": {
    "query": {"text": "Caf\u00e9 \"quoted\" 'single' back\\slash \u4e16\u754c \U0001F642 <tool_call>",
              "filters": {"max": 10, "ratio": 0.25, "neg": -3, "big": 12345678901, "tags": ["a", "b"],
                          "ok": True, "none": None, "empty": {}, "list": []}},
}}}

CASES = [
    ("one_call", "", [WEATHER]),
    ("two_calls", "", [WEATHER, ADD]),
    ("nested_args", "", [SEARCH]),
    ("content_and_call", "Let me check that for you.", [WEATHER]),
    ("no_call", "The weather in Paris is sunny, 21 \u00b0C. {\"not\": \"a call\"}", []),
]

END_TOKENS = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|end_of_text|>", "<|end|>", "<sep>",
              "<end_of_sentence>", "<|end_of_role|>"]
THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.S)


def strip_end(text):
    """The text up to the turn's first end token (some templates render more after it)."""
    ends = [text.find(tok) for tok in END_TOKENS if tok in text]
    return text[: min(ends)].rstrip() if ends else text.rstrip()


def render(template, name, messages, add_generation_prompt):
    bos, eos = mtf.tokens_for(name)
    ctx = {"messages": messages, "tools": TOOLS, "add_generation_prompt": add_generation_prompt,
           "bos_token": bos, "eos_token": eos, "datetime": "Dec 05 2026", "functions": json.dumps([t["function"] for t in TOOLS])}
    return template.render(**json.loads(json.dumps(ctx)))


def generated(template, name, content, calls):
    history = [{"role": "user", "content": "What's the weather in Paris?"}]
    turn = {"role": "assistant", "content": content}
    if calls:
        turn["tool_calls"] = calls
    prompt = render(template, name, history, True)
    full = render(template, name, history + [turn], False)
    # Some templates open the generation with a tag the history render has not
    # (QwQ: "<think>\n"): the model's text starts after the line the two share.
    common = os.path.commonprefix([prompt, full])
    cut = len(common) if common == prompt else common.rfind("\n") + 1
    return strip_end(full[cut:]), common != prompt


def main():
    env = mtf.make_env()
    out, detect, skipped = [], {}, []
    for path in sorted(glob.glob(os.path.join(TEMPLATES, "*.jinja"))):
        name = os.path.basename(path)
        fmt = FORMAT_OF.get(name, "generic")
        detect[name] = fmt
        if fmt == "generic":
            continue
        with open(path, encoding="utf-8") as f:
            template = env.from_string(f.read())
        for case, content, calls in CASES:
            try:
                text, mismatch = generated(template, name, content, calls)
            except Exception as e:  # the template refuses the case (Llama 3: one call per turn)
                skipped.append(f"{name}/{case}: {e}")
                continue
            if calls and not any(c["function"]["name"] in text for c in calls):
                skipped.append(f"{name}/{case}: the template renders no calls")
                continue
            think = THINK.match(text)
            prefix = think.group(0) if think else ""
            entry = {"template": name, "format": fmt, "case": case, "text": text[len(prefix):],
                     "reasoning_prefix": prefix, "prompt_mismatch": mismatch,
                     "content": content if content and content in text else "",
                     "calls": []}
            for c in calls:
                call = {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                if c["id"] in text:  # the syntax carries ids (Mistral)
                    call["id"] = c["id"]
                entry["calls"].append(call)
            out.append(entry)
    os.makedirs(os.path.dirname(DEST), exist_ok=True)
    with open(DEST, "w", encoding="utf-8") as f:
        f.write('{"cases": [\n' + ",\n".join(json.dumps(e, ensure_ascii=False) for e in out) + "\n],\n")
        f.write('"detect": ' + json.dumps(detect, indent=0, ensure_ascii=False) + "}\n")
    for s in skipped:
        print("skipped:", s, file=sys.stderr)
    print(f"{len(out)} cases from {len(set(e['template'] for e in out))} templates, "
          f"{len(detect)} detections -> {DEST}", file=sys.stderr)


if __name__ == "__main__":
    main()
