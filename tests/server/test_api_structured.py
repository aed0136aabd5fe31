"""The API agents use, end to end with the official openai client: JSON
schema outputs (validated by the Python jsonschema package), the client's
parse() with a Pydantic model, n > 1, logit_bias, embeddings, and tool calls
on Qwen2.5-Coder-0.5B (streamed and not, with the tool's answer sent back).
Every loop is bounded in count and time."""
import base64
import json
import math
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pydantic
import pytest

from conftest import CACHE, Server

HERE = os.path.dirname(__file__)
QWEN = os.path.join(CACHE, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=300)


# Varied schemas, each bounded so that a valid answer always fits in max_tokens.
NAME = {"type": "string", "maxLength": 12}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
     "required": ["colour", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1},
                                      "note": {"anyOf": [NAME, {"type": "null"}]}},
     "required": ["score", "note"], "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                                      "kind": {"const": "ticket"}},
     "required": ["code", "kind"], "additionalProperties": False},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                                        "y": {"type": "integer", "minimum": -9, "maximum": 9}},
                      "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 99}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"city": NAME, "temp": {"type": "integer", "minimum": -40, "maximum": 50},
                                      "unit": {"enum": ["C", "F"]}},
     "required": ["city", "temp", "unit"], "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                                           {"enum": ["none"]}]}},
     "required": ["answer"], "additionalProperties": False},
    {"type": "object", "properties": {"title": NAME, "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
                                      "rated": {"type": "boolean"}},
     "required": ["title", "year"], "additionalProperties": False},
]
PROMPTS = ["Describe a person.", "Pick a colour.", "Tag this: a red car.", "Rate the weather.",
           "Make a ticket.", "Give two points.", "List some numbers.", "Report the weather in Oslo.",
           "How many moons has Mars?", "Name a film."]


@pytest.fixture(scope="module")
def server():
    s = Server("-np", "4", "--queue", "64", "-c", "1024")
    yield s
    assert s.stop() == 0


def test_50_json_schema_requests_at_concurrency_8_all_validate(server):
    c = client(server)

    def one(i):
        schema = SCHEMAS[i % len(SCHEMAS)]
        r = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + " Answer in JSON."}],
            max_tokens=160, temperature=0.8, seed=i,
            response_format={"type": "json_schema",
                             "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}})
        return schema, r.choices[0]

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(50)))
    for schema, choice in results:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_json_object_and_streaming_give_json(server):
    c = client(server)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "A JSON object about cats."}],
                                  max_tokens=200, temperature=0, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.lstrip().startswith("{")
    schema = SCHEMAS[0]
    stream = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Describe a person."}], max_tokens=100, temperature=0,
        stream=True, response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    jsonschema.validate(json.loads(text), schema)


def test_a_cut_answer_finishes_with_length(server):
    r = client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Describe a person."}], max_tokens=3, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS[0]}})
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content.startswith("{")


class Film(pydantic.BaseModel):
    title: str = pydantic.Field(max_length=16)
    year: int = pydantic.Field(ge=1900, le=2030)
    genre: str = pydantic.Field(max_length=12)


def test_the_clients_parse_with_a_pydantic_model(server):
    r = client(server).chat.completions.parse(
        model="m", messages=[{"role": "user", "content": "Name a film, its year and genre."}],
        response_format=Film, max_tokens=120, temperature=0)
    film = r.choices[0].message.parsed
    assert isinstance(film, Film) and 1900 <= film.year <= 2030


@pytest.mark.parametrize("rf,param,words", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "allOf": [{}]}}},
     "response_format.json_schema.schema", "allOf"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 2}}},
     "response_format.json_schema.schema", "unsatisfiable"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(?=a)b"}}},
     "response_format.json_schema.schema", "pattern"),
    ({"type": "xml"}, "response_format.type", "xml"),
])
def test_unsupported_or_unsatisfiable_schemas_are_400(server, rf, param, words):
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                               max_tokens=4, response_format=rf)
    assert e.value.body["param"] == param and words in e.value.body["message"]


def test_hostile_schemas_are_refused_fast(server):
    deep = {"type": "string"}
    for _ in range(300):
        deep = {"type": "array", "items": deep}
    wide = {"enum": ["x" * 20 + str(i) for i in range(50000)]}
    long = {"type": "array", "items": {"type": "integer"}, "minItems": 10 ** 9}
    for schema, limit in ((deep, "deeper than 256"), (wide, "the limit is 4096"), (long, "limit")):
        t0 = time.time()
        with pytest.raises(openai.BadRequestError) as e:
            client(server).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                response_format={"type": "json_schema", "json_schema": {"name": "h", "schema": schema}})
        assert limit in e.value.body["message"] and time.time() - t0 < 5
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                               max_tokens=4, extra_body={"grammar": "root ::= undefined"})
    assert "undefined" in e.value.body["message"]


def test_a_raw_gbnf_grammar_constrains_the_answer(server):
    r = client(server).completions.create(model="m", prompt="The answer is", max_tokens=8, temperature=0.9,
                                          seed=3, extra_body={"grammar": 'root ::= ("yes" | "no") "!"'})
    assert r.choices[0].text in ("yes!", "no!")


def test_n_3_gives_three_choices_identical_at_temperature_0(server):
    c = client(server)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hello."}],
                                  max_tokens=12, temperature=0, n=3)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert len({ch.message.content for ch in r.choices}) == 1
    one = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hello."}],
                                    max_tokens=12, temperature=0)
    assert r.choices[0].message.content == one.choices[0].message.content
    assert r.usage.completion_tokens == 3 * one.usage.completion_tokens
    # Sampled: answer i draws with seed + i, at any concurrency.
    s = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Tell a story."}],
                                  max_tokens=16, temperature=1.0, seed=40, n=2)
    alone = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Tell a story."}],
                                      max_tokens=16, temperature=1.0, seed=41)
    assert s.choices[1].message.content == alone.choices[0].message.content
    stream = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hello."}],
                                       max_tokens=12, temperature=0, n=2, stream=True)
    texts = ["", ""]
    for ch in stream:
        for choice in ch.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == [one.choices[0].message.content] * 2


def test_logit_bias_bans_and_forces_tokens(server):
    c = client(server)
    base = c.completions.create(model="m", prompt="One, two, three,", max_tokens=1, temperature=0)
    tok = base.choices[0].text
    ids = json.loads(json.dumps(c.post("/../tokenize", body={"content": tok}, cast_to=object)))["tokens"]
    banned = c.completions.create(model="m", prompt="One, two, three,", max_tokens=1, temperature=0,
                                  logit_bias={str(ids[0]): -100})
    assert banned.choices[0].text != tok
    forced = c.completions.create(model="m", prompt="One, two, three,", max_tokens=3, temperature=0,
                                  logit_bias={"90": 100})
    assert forced.choices[0].text == c.post("/../detokenize", body={"tokens": [90, 90, 90]},
                                            cast_to=object)["content"]


def test_embeddings_match_llama_cpp(server):
    golden = json.load(open(os.path.join(HERE, "../fixtures/embed/golden_smollm2.json")))
    cases = [g for g in golden["models"]["SmolLM2-135M-Instruct.Q4_1.gguf"] if g["pooling"] == "mean"]
    c = client(server)
    r = c.embeddings.create(model="m", input=[g["text"] for g in cases])  # base64, as the client asks
    assert [d.index for d in r.data] == list(range(len(cases)))
    assert r.usage.prompt_tokens == sum(len(g["tokens"]) for g in cases)
    for d, g in zip(r.data, cases):
        cos = sum(a * b for a, b in zip(d.embedding, g["embedding"]))
        assert cos > 0.999 and abs(math.sqrt(sum(a * a for a in d.embedding)) - 1) < 1e-5
    f = c.embeddings.create(model="m", input=cases[0]["tokens"], encoding_format="float")
    assert f.data[0].embedding == pytest.approx(r.data[0].embedding, abs=1e-6)
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model="m", input="hi", dimensions=8)


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]


@pytest.fixture(scope="module")
def qwen():
    if not os.path.exists(QWEN):
        pytest.skip(f"{QWEN} not cached (scripts/fetch-model.sh --model qwen2.5-coder-0.5b)")
    s = Server("-np", "2", "-c", "2048", model=QWEN)
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip_on_qwen(qwen, stream):
    c = client(qwen)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    kw = dict(model="m", tools=WEATHER, tool_choice="required", max_tokens=80, temperature=0)
    if stream:
        calls, finish = {}, None
        for ch in c.chat.completions.create(messages=msgs, stream=True, **kw):
            for choice in ch.choices:
                assert not choice.delta.content  # no markup leaks into content
                for tc in choice.delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
                finish = choice.finish_reason or finish
        assert finish == "tool_calls" and len(calls) == 1
        call = calls[0]
    else:
        r = c.chat.completions.create(messages=msgs, **kw)
        assert r.choices[0].finish_reason == "tool_calls"
        tc = r.choices[0].message.tool_calls[0]
        call = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    args = json.loads(call["arguments"])
    jsonschema.validate(args, WEATHER[0]["function"]["parameters"])
    assert "paris" in args["city"].lower()
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": call["id"], "type": "function",
                  "function": {"name": call["name"], "arguments": call["arguments"]}}]},
             {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"temp_c": 21, "sky": "sunny"})}]
    answer = c.chat.completions.create(model="m", messages=msgs, tools=WEATHER, max_tokens=60, temperature=0)
    text = answer.choices[0].message.content or ""
    assert answer.choices[0].finish_reason == "stop" and "21" in text, text


def test_a_named_tool_choice_and_bad_tools_on_qwen(qwen):
    c = client(qwen)
    two = WEATHER + [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, "required": ["zone"]}}}]
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Rome?"}], tools=two,
                                  tool_choice={"type": "function", "function": {"name": "get_time"}},
                                  max_tokens=60, temperature=0)
    tc = r.choices[0].message.tool_calls[0]
    assert tc.function.name == "get_time" and "zone" in json.loads(tc.function.arguments)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tools=two,
                                  tool_choice={"type": "function", "function": {"name": "nope"}})
    assert e.value.body["param"] == "tool_choice"
    none = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi!"}], tools=two,
                                     tool_choice="none", max_tokens=10, temperature=0)
    assert none.choices[0].message.tool_calls is None
