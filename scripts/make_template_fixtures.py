#!/usr/bin/env python3
"""Golden renders of the chat templates in tests/fixtures/templates/ by Python's jinja2.

The environment is set up exactly as HuggingFace transformers sets it up for
apply_chat_template (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the loopcontrols
extension and the {% generation %} block tag, the json.dumps-based tojson filter
and the raise_exception / strftime_now globals. strftime_now is fixed to
2026-12-05 12:00:00 so that renders are reproducible (the C++ test fixes the
same time through lr::jinja::RenderOptions).

Every template is rendered with a fixed set of cases; the render variables are
passed as transformers passes them (messages, tools, documents,
add_generation_prompt, bos_token, eos_token). Output: golden.json, a list of
{"template", "case", "context", and "output" or "error"/"error_type"}.

Not run in CI. Usage: python3 scripts/make_template_fixtures.py  (needs jinja2 3.x)
"""
import glob
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "templates")
NOW = datetime(2026, 12, 5, 12, 0, 0)


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: renders its body (tracking is off here)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return NOW.strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                             "description": "Temperature unit"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First term"},
                    "b": {"type": "integer", "description": "Second term", "default": 1},
                    "scale": {"type": "number", "default": 0.5},
                },
                "required": ["a", "b"],
            },
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER1 = {"role": "user", "content": "Hello! What is 2 + 2?"}
ASSISTANT1 = {"role": "assistant", "content": "2 + 2 = 4."}
USER2 = {"role": "user", "content": "And times 3?"}


def cases():
    tool_call = {
        "id": "call00001",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    }
    weird = ("Caf\u00e9 \u4e16\u754c \U0001F642 \"double\" 'single' back\\slash\n"
             "second line\ttab {{ not a tag }} {% neither %} {# nor #} <tag> & \u00ff")
    return [
        ("single_user", {"messages": [USER1], "add_generation_prompt": True}),
        ("multi_turn", {"messages": [SYSTEM, USER1, ASSISTANT1, USER2],
                        "add_generation_prompt": True}),
        ("multi_turn_no_gen", {"messages": [SYSTEM, USER1, ASSISTANT1, USER2],
                               "add_generation_prompt": False}),
        ("tools", {"messages": [{"role": "user", "content": "What's the weather in Paris?"}],
                   "tools": TOOLS, "add_generation_prompt": True}),
        ("tool_round_trip", {
            "messages": [
                {"role": "user", "content": "What's the weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [tool_call]},
                {"role": "tool", "tool_call_id": "call00001",
                 "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"},
            ],
            "tools": TOOLS, "add_generation_prompt": True}),
        ("special_chars", {"messages": [{"role": "system", "content": weird},
                                        {"role": "user", "content": weird},
                                        {"role": "assistant", "content": "\u00e9\n\"ok\""},
                                        {"role": "user", "content": "  padded  "}],
                           "add_generation_prompt": True}),
        # Beyond the six above: what else real conversations carry.
        ("reasoning", {"messages": [
            USER1,
            {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n2 + 2 = 4.",
             "reasoning_content": "Add them."},
            USER2], "add_generation_prompt": True}),
        ("string_arguments", {
            "messages": [
                SYSTEM,
                {"role": "user", "content": "Add 1 and 2."},
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call00002", "type": "function",
                    "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]},
                {"role": "tool", "tool_call_id": "call00002", "name": "add", "content": "3"},
                {"role": "assistant", "content": "The sum is 3."},
            ],
            "tools": TOOLS, "add_generation_prompt": False}),
        ("assistant_last", {"messages": [USER1, ASSISTANT1], "add_generation_prompt": False}),
    ]


def tokens_for(name):
    n = name.lower()
    if "llama-3" in n or "firefunction" in n or "hermes-3" in n or "functionary-medium-v3" in n:
        return "<|begin_of_text|>", "<|eot_id|>"
    if "qwen" in n or "qwq" in n or "smollm" in n:
        return "", "<|im_end|>"
    if "gemma" in n:
        return "<bos>", "<eos>"
    if "deepseek" in n:
        return "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
    return "<s>", "</s>"


def context_for(name, case):
    bos, eos = tokens_for(name)
    ctx = {"messages": case["messages"], "tools": case.get("tools"), "documents": None,
           "add_generation_prompt": case["add_generation_prompt"], "bos_token": bos,
           "eos_token": eos}
    return ctx


def main():
    env = make_env()
    out = []
    paths = sorted(glob.glob(os.path.join(FIXTURES, "*.jinja")))
    for path in paths:
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        try:
            template = env.from_string(source)
            compile_error = None
        except Exception as e:  # a template jinja2 itself cannot compile
            template, compile_error = None, e
        for case_name, case in cases():
            ctx = context_for(name, case)
            entry = {"template": name, "case": case_name, "context": ctx}
            try:
                if compile_error is not None:
                    raise compile_error
                entry["output"] = template.render(**json.loads(json.dumps(ctx)))
            except Exception as e:
                entry["error"] = str(e)
                entry["error_type"] = type(e).__name__
            out.append(entry)
    dest = os.path.join(FIXTURES, "golden.json")
    with open(dest, "w", encoding="utf-8") as f:  # one entry a line
        f.write("[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in out) + "\n]\n")
    errors = sum(1 for e in out if "error" in e)
    print(f"{len(paths)} templates, {len(out)} renders ({errors} raised) -> {dest}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
