#!/usr/bin/env python3
"""Golden data for tests/grammar (not run in CI).

Writes tests/fixtures/grammar/:
  schemas.json   JSON Schemas with candidate texts (hand-written and mutated),
                 each labelled valid/invalid by the `jsonschema` package
                 (Draft 2020-12, with its format checker); texts are written in
                 the grammar's canonical forms (schema property order, compact
                 / ", " ": " / indent=2, ensure_ascii=False).
  gbnf/*.gbnf    llama.cpp's example grammars (vendored in llama-cpp-python).
  gbnf_cases.json  strings accepted/rejected by llama.cpp's grammar sampler.
  vocab.json     SmolLM2-135M's token pieces as llama.cpp's grammar sees them
                 (bytes as latin-1 characters; pieces starting with a NUL byte, which llama.cpp never
                 allows, written empty) and its end-of-generation tokens.
  masks.json     for grammars and prefixes, the exact set of tokens llama.cpp's
                 grammar sampler allows (a base64 bitmap over the vocabulary).

Usage (the venv has llama-cpp-python 0.3.36 and jsonschema):
  cd /tmp && /tmp/refvenv/bin/pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
  tar xzf llama_cpp_python-0.3.36.tar.gz
  /tmp/refvenv/bin/python scripts/make_grammar_fixtures.py \
      --llama-src /tmp/llama_cpp_python-0.3.36 \
      --model ~/.cache/lowrank/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import base64
import copy
import ctypes
import json
import os
import shutil

import jsonschema

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "grammar")

# name -> (schema, valid-looking candidate values in schema property order,
#          extra raw texts). Mutations add the near misses.
SCHEMAS = {
    "string": ({"type": "string"}, ["", "hello", "a \"quoted\" \\ line\nnext", "héllo wörld ✓"], ["hello", "'x'"]),
    "number": ({"type": "number"}, [0, -1, 3.25, 1e-07, 12345678901234], ["01", "1.", ".5", "-", "1e"]),
    "integer": ({"type": "integer"}, [0, 7, -42, 123456789], ["1.5", "+1", "00"]),
    "boolean": ({"type": "boolean"}, [True, False], ["True", "tru"]),
    "null": ({"type": "null"}, [None], ["nul", "0"]),
    "nullable": ({"type": ["string", "null"]}, ["x", None, ""], ["1"]),
    "object": ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name"]},
               [{"name": "Ann", "age": 31}, {"name": "Bob"}, {"name": "", "age": 0, "extra": [1]}],
               ['{"age": 3}', '{"name": 1}']),
    "closed_object": ({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}},
                       "required": ["b"], "additionalProperties": False},
                      [{"a": True, "b": None}, {"b": None}], ['{"a": true}', '{"b": null, "c": 1}', '{}']),
    "additional_schema": ({"type": "object", "properties": {"id": {"type": "integer"}},
                           "additionalProperties": {"type": "string"}},
                          [{"id": 1, "x": "y"}, {"k": "v", "l": ""}, {}], ['{"x": 1}', '{"id": "1"}']),
    "nested": ({"type": "object", "properties": {
        "user": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
                 "required": ["tags"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
               [{"user": {"tags": []}}, {"user": {"tags": ["a", "b"]}}], ['{"user": {}}', '{"user": {"tags": [1]}}']),
    "array": ({"type": "array", "items": {"type": "integer"}}, [[], [1], [1, 2, 3]], ['[1,]', '[,1]', '["a"]']),
    "array_bounds": ({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
                     [[True, False], [True, True, True]], ['[true]', '[true, true, true, true]', '[]']),
    "tuple": ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
              [["a", 1], ["a"], []], ['["a", 1, 2]', '[1, "a"]']),
    "enum_strings": ({"type": "string", "enum": ["red", "green", "blue"]}, ["red", "blue"], ['"yellow"', '"Red"']),
    "enum_any": ({"enum": ["a", 1, None, True, [1, 2], {"k": "v"}]}, ["a", 1, None, True, [1, 2], {"k": "v"}],
                 ['"b"', "2", "false", "[2, 1]"]),
    "const": ({"const": {"x": [1, "two"]}}, [{"x": [1, "two"]}], ['{"x": [1]}', '{"x": [1, "two", 3]}']),
    "lengths": ({"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd", "äöü"], ['"a"', '"abcde"']),
    "pattern": ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,4}$"}, ["AB-123", "XY-9876"],
                ['"ab-123"', '"AB-12"', '"AB-12345"', '"AB123"']),
    "pattern_alt": ({"type": "string", "pattern": "^(cat|dog)s?( [a-z]+)*$"}, ["cat", "dogs", "cats are nice"],
                    ['"cow"', '"cat "', '"Cat"']),
    "pattern_search": ({"type": "string", "pattern": "ab+c"}, ["abc", "xxabbbcyy"], ['"ac"', '"abx"']),
    "date": ({"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"], ['"2024-13-01"', '"24-01-01"']),
    "date_time": ({"type": "string", "format": "date-time"}, ["2024-05-06T07:08:09Z", "2024-05-06T07:08:09.123+02:00"],
                  ['"2024-05-06 07:08"', '"2024-05-06T25:00:00Z"']),
    "uuid": ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"],
             ['"123e4567e89b12d3a456426614174000"', '"123e4567-e89b-12d3-a456-42661417400"']),
    "any_of": ({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, [5, "x", ""],
               ['"xy"', "1.5", "null"]),
    "one_of_objects": ({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
         "required": ["kind"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "b"}, "s": {"type": "string"}},
         "required": ["kind", "s"], "additionalProperties": False}]},
                       [{"kind": "a", "n": 1}, {"kind": "a"}, {"kind": "b", "s": ""}],
                       ['{"kind": "b"}', '{"kind": "c"}', '{"kind": "a", "s": "x"}']),
    "defs_ref": ({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                      "required": ["x", "y"], "additionalProperties": False}},
                  "type": "array", "items": {"$ref": "#/$defs/point"}},
                 [[], [{"x": 1, "y": 2.5}]], ['[{"x": 1}]', '[{"x": 1, "y": 2, "z": 3}]']),
    "recursive": ({"definitions": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/definitions/node"},
                  [{"v": 1}, {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]}],
                  ['{"v": 1, "kids": [{}]}', '{"kids": []}']),
    "described": ({"title": "T", "description": "d", "$schema": "https://json-schema.org/draft/2020-12/schema",
                   "type": "object", "properties": {"q": {"type": "string", "description": "x", "examples": ["e"],
                                                          "default": "z"}}, "additionalProperties": False},
                  [{"q": "x"}, {}], ['{"r": "x"}']),
    # Numeric bounds: candidates at lo-1, lo, lo+1, hi-1, hi, hi+1, 0, -0 and
    # far out. No exponent forms and no integers written as 1.0: the grammar
    # never emits those for bounded numbers / integers, though jsonschema
    # accepts them (json_schema.h).
    "int_0_10": ({"type": "integer", "minimum": 0, "maximum": 10}, [0, 1, 5, 9, 10],
                 ["-1", "11", "-0", "100", "10.5", "010", "00", "-10"]),
    "int_neg5_5": ({"type": "integer", "minimum": -5, "maximum": 5}, [-5, -4, 0, 4, 5],
                   ["-6", "6", "-0", "-50", "50", "-05"]),
    "int_min_7": ({"type": "integer", "minimum": 7}, [7, 8, 10, 70, 123456789012345678901234567890],
                  ["6", "-7", "0", "-0", "-8", "07"]),
    "int_max_neg3": ({"type": "integer", "maximum": -3}, [-3, -4, -10, -300, -123456789012345678901234567890],
                     ["-2", "3", "0", "-0", "-1", "-03"]),
    "int_exclusive": ({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 12}, [-2, 0, 11],
                      ["-3", "12", "-4", "13", "-0", "1.5", "-2.5"]),
    "int_100_2000": ({"type": "integer", "minimum": 100, "maximum": 2000}, [100, 101, 999, 1000, 1500, 1999, 2000],
                     ["99", "2001", "10", "200", "20000", "1000000", "0", "-100", "-0", "0100"]),
    "int_fractional_bounds": ({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 9.5}, [2, 9],
                              ["1", "10", "5", "-0"]),
    "num_0_1": ({"type": "number", "minimum": 0, "maximum": 1}, [0, 1, 0.5, 0.999, 1.0, 0.0],
                ["-0", "-0.0", "-0.5", "1.01", "1.000", "1.0001", "2", "-1", "0.00", "-0.001", ".5", "1."]),
    "num_0_100": ({"type": "number", "minimum": 0, "maximum": 100}, [0, 100, 99.99, 100.0, 50, 0.01, 1, 99],
                  ["100.01", "-0.01", "101", "-0", "99.999", "1000", "100.00", "100.001", "-100", "-1"]),
    "num_decimal_bounds": ({"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25},
                           [-1.49, -1, 0, 2.25, 2.2, 2.249, -1.4999],
                           ["-1.5", "-1.50", "-1.51", "-2", "2.26", "2.251", "3", "2.250", "-0", "-1.500001"]),
    "num_exclusive": ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [0.001, 9.999, 5, 0.5],
                      ["0", "-0", "0.0", "10", "10.0", "9.9999", "-0.5", "10.0001"]),
    "num_min_only": ({"type": "number", "minimum": -3}, [-3, -2.5, 0, 1000000.5, 12345678901234567890],
                     ["-3.0001", "-4", "-3.000", "-3.5", "-30"]),
}


def mutations(value):
    """Near misses of a value: type changes, dropped/added keys, removed items."""
    out = []
    if isinstance(value, dict):
        for k in value:
            d = {kk: vv for kk, vv in value.items() if kk != k}
            out.append(d)
            for repl in ("s", 1, None, [], {}):
                d = dict(value)
                d[k] = repl
                out.append(d)
        out.append(dict(value, zz_extra=True))
    elif isinstance(value, list):
        out += [value[:-1], value + value[-1:], value + ["s"], value + [None]] if value else [[1], ["s"], [{}]]
    else:
        out += ["s", 1, 2.5, None, True, [], {}, [value], {"v": value}]
        if isinstance(value, str):
            out += [value + "x", value[:-1], value.upper(), value + "-0"]
    return out


def renderings(value):
    texts = {json.dumps(value, separators=(",", ":"), ensure_ascii=False),
             json.dumps(value, ensure_ascii=False)}
    if isinstance(value, (dict, list)):
        texts.add(json.dumps(value, indent=2, ensure_ascii=False))
    return texts


def make_schemas():
    out = []
    for name, (schema, values, raw) in SCHEMAS.items():
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        candidates = set()
        for v in values:
            candidates |= renderings(v)
            for m in mutations(v):
                candidates |= renderings(m)
        candidates |= set(raw)
        cases = []
        for text in sorted(candidates):
            try:
                valid = validator.is_valid(json.loads(text))
            except json.JSONDecodeError:
                valid = False
            cases.append({"text": text, "valid": valid})
        out.append({"name": name, "schema": schema, "cases": cases})
        assert any(c["valid"] for c in cases) and any(not c["valid"] for c in cases), name
    return out


class LlamaGrammarOracle:
    """llama.cpp's grammar sampler over SmolLM2's vocabulary (llama_cpp's low-level API)."""

    def __init__(self, model_path):
        import llama_cpp
        self.ll = llama_cpp
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(model_path.encode(), params)
        assert self.model
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n = llama_cpp.llama_vocab_n_tokens(self.vocab)
        buf = ctypes.create_string_buffer(512)
        self.pieces = []
        for t in range(self.n):
            k = llama_cpp.llama_token_to_piece(self.vocab, t, buf, 512, 0, True)
            self.pieces.append(buf.raw[:k])
        self.eog = [t for t in range(self.n) if llama_cpp.llama_vocab_is_eog(self.vocab, t)]
        self.byte_token = {}
        for t, p in enumerate(self.pieces):
            if len(p) == 1 and p[0] not in self.byte_token:
                self.byte_token[p[0]] = t

    def allowed(self, grammar, prefix):
        """The tokens allowed after `prefix` (bytes), fed one byte token at a time; None if rejected."""
        ll = self.ll
        smpl = ll.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        assert smpl, "llama.cpp refused the grammar"
        try:
            for b in prefix:
                t = self.byte_token[b]
                if not self._apply(smpl, [t])[0]:
                    return None
                ll.llama_sampler_accept(smpl, t)
            return self._apply(smpl, list(range(self.n)))
        finally:
            ll.llama_sampler_free(smpl)

    def accepts(self, grammar, text):
        allowed = self.allowed(grammar, text.encode())
        return allowed is not None and any(allowed[t] for t in self.eog)

    def _apply(self, smpl, ids):
        ll = self.ll
        arr = (ll.llama_token_data * len(ids))()
        for i, t in enumerate(ids):
            arr[i].id, arr[i].logit, arr[i].p = t, 0.0, 0.0
        cur = ll.llama_token_data_array(data=arr, size=len(ids), selected=-1, sorted=False)
        ll.llama_sampler_apply(smpl, ctypes.byref(cur))
        allowed = [False] * (self.n if len(ids) == self.n else len(ids))
        for i in range(len(ids)):
            if arr[i].logit != float("-inf"):
                allowed[i if len(ids) != self.n else arr[i].id] = True
        return allowed


GBNF_CASES = {
    "arithmetic.gbnf": (["1+2=3\n", "x = (a+b) \n", "a=b\nc=d\n"], ["1+2=3", "=3\n", "A=1\n", "1++2=3\n"]),
    "json.gbnf": (['{}', '{"a": [1, 2.5, "x", null, true]}', '{"k":{"n":-0.5e19}}', '{\n  "a": 1\n}'],
                  ['[]', '{"a"}', '{"a": 01}', '{"a": "\x01"}', '{"a": 1,}']),
    "chess.gbnf": (["1. e4 e5\n2. Nf3 Nc6\n", "1. O-O O-O-O\n2. exd5 Qxd8+\n"], ["1. e4 e5\n", "e4 e5\n", "1. e9 e5\n2. a3 a4\n"]),
    "list.gbnf": (["- one\n", "- a\n- b b\n"], ["- \n", "* a\n", "- a"]),
    "english.gbnf": (["Hello, world!", "a b\tc\nd"], ["", "héllo", "a  b"]),
    "japanese.gbnf": (["こんにちは", "カタカナ 漢字"], ["abc", "こんにちは "]),
    "c.gbnf": (["int main(){return 0;}", "int f(int x){x=x+1;}"], ["main(){}", "int main(){return 0}"]),
    "json_arr.gbnf": (['[\n{"a": 1},\n2]', "[\n]"], ["[1]", '[\n1,2]']),
}

MASK_CASES = [
    ("json.gbnf", ["", "{", '{"na', '{"name": "Jo', '{"a": [1, 2', '{"a": 1', '{"t": "caf\xc3']),
    ("arithmetic.gbnf", ["", "x", "1+(2"]),
    ("japanese.gbnf", ["", "\xe3\x81", "こん"]),
    ("chess.gbnf", ["1. ", "1. e4 "]),
]


def bitmap(allowed):
    bits = bytearray((len(allowed) + 7) // 8)
    for i, a in enumerate(allowed):
        if a:
            bits[i // 8] |= 1 << (i % 8)
    return base64.b64encode(bytes(bits)).decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-src", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    os.makedirs(os.path.join(OUT, "gbnf"), exist_ok=True)

    with open(os.path.join(OUT, "schemas.json"), "w") as f:
        json.dump(make_schemas(), f, indent=1, ensure_ascii=False)

    src = os.path.join(args.llama_src, "vendor", "llama.cpp", "grammars")
    grammars = {}
    for name in sorted(os.listdir(src)):
        if name.endswith(".gbnf"):
            shutil.copy(os.path.join(src, name), os.path.join(OUT, "gbnf", name))
            grammars[name] = open(os.path.join(src, name), encoding="utf-8").read()

    oracle = LlamaGrammarOracle(os.path.expanduser(args.model))
    cases = []
    for name, (good, bad) in GBNF_CASES.items():
        for text in good + bad:
            accepted = oracle.accepts(grammars[name], text)
            if accepted != (text in good):  # the oracle decides; say where it differs from the guess
                print(f"note: llama.cpp {'accepts' if accepted else 'rejects'} {text!r} ({name})")
            cases.append({"grammar": name, "text": text, "accept": accepted})
        labels = {c["accept"] for c in cases if c["grammar"] == name}
        assert labels == {True, False}, (name, labels)
    # The converter llama-cpp-python ships, on a schema: its output must parse here too.
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    schema = json.dumps(SCHEMAS["object"][0])
    grammars["llama_object_schema"] = json_schema_to_gbnf(schema)
    for text in ['{"name": "Ann", "age": 31}', '{"age": 31}']:
        cases.append({"grammar": "llama_object_schema", "text": text,
                      "accept": oracle.accepts(grammars["llama_object_schema"], text)})
    with open(os.path.join(OUT, "gbnf_cases.json"), "w") as f:
        json.dump({"converted": {"llama_object_schema": grammars["llama_object_schema"]}, "cases": cases},
                  f, indent=1, ensure_ascii=False)

    pieces = [("" if p[:1] == b"\0" else p.decode("latin-1")) for p in oracle.pieces]
    with open(os.path.join(OUT, "vocab.json"), "w") as f:
        json.dump({"model": os.path.basename(args.model), "pieces_latin1": pieces, "eog": oracle.eog}, f,
                  ensure_ascii=False)
    masks = []
    for name, prefixes in MASK_CASES + [("llama_object_schema", ["", '{"name": "A', '{"name": "Ann", '])]:
        for prefix in prefixes:
            raw = prefix.encode("latin-1") if any(0x80 <= ord(c) < 0x100 for c in prefix) else prefix.encode()
            allowed = oracle.allowed(grammars[name], raw)
            assert allowed is not None, (name, prefix)
            masks.append({"grammar": name, "prefix_hex": raw.hex(), "allowed": bitmap(allowed),
                          "count": sum(allowed)})
    with open(os.path.join(OUT, "masks.json"), "w") as f:
        json.dump(masks, f, indent=1)
    print(f"wrote {len(cases)} gbnf cases, {len(masks)} masks, vocab {oracle.n}")


if __name__ == "__main__":
    main()
