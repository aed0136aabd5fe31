"""`lowrank serve` end to end: the official openai client and raw HTTP against
the real binary on 127.0.0.1 with the default model. Every loop is bounded
in count and time."""
import http.client
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import BIN, MODEL, Server, need_model

# (Asked for one word: the 135M model's plain question is answered without the
# city on some kernel paths.)
CHAT = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


def client(s, key="none"):
    return openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0, timeout=120)


def raw(s, method, path, body=None, headers=None):
    """(status, headers, parsed JSON or text) of one request on its own connection."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode("utf-8", "replace")
    c.close()
    try:
        return r.status, dict(r.getheaders()), json.loads(text)
    except ValueError:
        return r.status, dict(r.getheaders()), text


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.e+-]+|\+Inf|NaN)$')


def parse_metrics(text):
    """Prometheus text exposition, checked line by line: {name{labels}: value}."""
    out, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(4))
    for name, kind in types.items():
        if kind == "histogram":
            buckets = [v for k, v in out.items() if k.startswith(name + "_bucket")]
            assert buckets == sorted(buckets), f"{name}: buckets are not cumulative"
            assert out[name + '_bucket{le="+Inf"}'] == out[name + "_count"]
        else:
            assert any(k == name or k.startswith(name + "{") for k in out), f"{name} has no sample"
    return out


def wait_for(pred, timeout=20.0, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def test_stream_and_plain_give_the_same_text(server):
    c = client(server)
    full = c.chat.completions.create(model="m", messages=CHAT, max_tokens=24, temperature=0)
    chunks = list(
        c.chat.completions.create(model="m", messages=CHAT, max_tokens=24, temperature=0, stream=True,
                                  stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    assert len({ch.id for ch in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = full.choices[0].finish_reason
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == [finish]
    assert "Paris" in text and finish in ("stop", "length")
    n = full.usage.completion_tokens
    assert (n == 24) == (finish == "length") and 1 <= n <= 24
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n
    assert full.usage.prompt_tokens == chunks[-1].usage.prompt_tokens
    assert full.usage.total_tokens == full.usage.prompt_tokens + n


def test_stream_never_splits_a_character(server):
    # The model continues in Japanese; several of its tokens are parts of one character's bytes.
    body = dict(model="m", prompt="日本語の文章を書きます。日本語", max_tokens=12, temperature=0)
    full = client(server).completions.create(**body)
    chunks = [ch.choices[0].text for ch in client(server).completions.create(stream=True, **body) if ch.choices]
    text = full.choices[0].text
    assert "".join(chunks) == text and full.usage.completion_tokens == 12
    # Only the end may hold a character cut short: the 12th token can stop inside one.
    assert sum(ord(ch) > 0x3000 for ch in text) >= 4 and "\ufffd" not in text.rstrip("\ufffd")
    said = [c for c in chunks if c]
    assert all("\ufffd" not in c for c in said[:-1]) and "\ufffd" not in said[-1].rstrip("\ufffd")


def test_completion_usage_counts_the_prompt_tokens(server):
    prompt = "The quick brown fox jumps over the lazy dog. " * 3
    _, _, tok = raw(server, "POST", "/tokenize", {"content": prompt, "add_special": True})
    r = client(server).completions.create(model="m", prompt=prompt, max_tokens=5, temperature=0, logprobs=2)
    assert r.usage.prompt_tokens == len(tok["tokens"])
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 5 and len(lp.token_logprobs) == 5
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(t) == 2 and max(t.values()) >= lp.token_logprobs[i] for i, t in enumerate(lp.top_logprobs))
    _, _, plain = raw(server, "POST", "/tokenize", {"content": prompt})
    _, _, de = raw(server, "POST", "/detokenize", {"tokens": plain["tokens"]})
    assert de["content"] == prompt
    # A stop string cuts the text before it.
    full = client(server).completions.create(model="m", prompt=prompt, max_tokens=20, temperature=0).choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 3]
    cut = client(server).completions.create(model="m", prompt=prompt, max_tokens=20, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[:full.index(stop)] and cut.choices[0].finish_reason == "stop"


def tokens_of(s, body):
    r = client(s).completions.create(model="m", **body)
    return r.choices[0].text, r.choices[0].logprobs.token_logprobs


def invariance(model, *args):
    """The same request alone and among 7 concurrent others (sampled too): the same tokens and log-probabilities."""
    s = Server("-np", "8", "--queue", "16", *args, model=model)
    try:
        target = {"prompt": "The history of the Roman Empire begins", "max_tokens": 24, "temperature": 0, "logprobs": 1}
        alone = tokens_of(s, target)
        others = [{"prompt": f"Story number {i}: once upon a time " * (1 + i), "max_tokens": 8 + 6 * i,
                   "temperature": 0.8, "seed": i, "logprobs": 1} for i in range(7)]
        with ThreadPoolExecutor(8) as ex:
            futures = [ex.submit(tokens_of, s, b) for b in others[:3]]
            time.sleep(0.2)  # the target joins while others run
            mine = ex.submit(tokens_of, s, target)
            futures += [ex.submit(tokens_of, s, b) for b in others[3:]]
            among = mine.result(timeout=300)
            for f in futures:
                f.result(timeout=300)
        assert among == alone
    finally:
        assert s.stop() == 0


def test_batch_invariance():
    invariance(MODEL)


@pytest.mark.parametrize("keys", [["q8_0"], ["kivi2", "--kivi-window", "32"]])
def test_batch_invariance_compressed_keys(keys):
    """Each slot with its own compressed key cache (q8_0; KIVI quantizing every 32 tokens)."""
    invariance(MODEL, "--cache-type-k", *keys)


def test_batch_invariance_low_rank(tmp_path):
    need_model()
    lr = str(tmp_path / "smollm2-svd-0.8.gguf")
    subprocess.run([BIN, "compress", "--method", "svd", "--keep", "0.8", "-t", "2", "-o", lr], check=True,
                   capture_output=True, timeout=600)
    invariance(lr)


def gauges(s):
    m = parse_metrics(s.metrics())
    return int(m["lowrank_slots_busy"]), int(m["lowrank_requests_waiting"]), m


def hold_streams(s, n, max_tokens=400, one_by_one=False):
    """n streamed requests held open until `release` is set; returns (release, threads).
    one_by_one: each request is sent only after the server has counted the previous
    one, so requests that would arrive together cannot race for a short queue."""
    release = threading.Event()

    def one(i):
        try:
            with client(s).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"Tell me a long story number {i}."}],
                    max_tokens=max_tokens, temperature=0, stream=True, extra_body={"ignore_eos": True}) as stream:
                for _ in stream:
                    if release.is_set():
                        break
        except openai.APIStatusError:
            pass

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for i, t in enumerate(threads):
        t.start()
        if one_by_one:
            wait_for(lambda: sum(gauges(s)[:2]) == i + 1)
    return release, threads


@pytest.mark.parametrize("slots,requests", [(1, 3), (2, 4), (4, 6)])
def test_slots_busy_and_waiting(slots, requests):
    s = Server("-np", str(slots), "--queue", "16")
    try:
        release, threads = hold_streams(s, requests)
        seen = wait_for(lambda: gauges(s)[:2] == (slots, requests - slots))
        busy, waiting, _ = gauges(s)
        release.set()
        for t in threads:
            t.join(timeout=60)
        assert seen, f"slots busy {busy}, waiting {waiting}; expected {slots}, {requests - slots}"
        assert wait_for(lambda: gauges(s)[:2] == (0, 0))
    finally:
        assert s.stop() == 0


def test_full_queue_is_503_with_retry_after():
    s = Server("-np", "1", "--queue", "1")
    try:
        # The second is sent once the first holds the slot: sent together, both could
        # be queued before the scheduler admits the first, and the second refused.
        release, threads = hold_streams(s, 2, one_by_one=True)
        assert wait_for(lambda: gauges(s)[:2] == (1, 1))
        status, headers, body = raw(s, "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2})
        release.set()
        for t in threads:
            t.join(timeout=60)
        assert status == 503 and headers.get("Retry-After") == "1"
        assert body["error"]["type"] == "unavailable_error" and body["error"]["code"] == "server_busy"
        assert parse_metrics(s.metrics())["lowrank_requests_rejected_total"] == 1
    finally:
        assert s.stop() == 0


def test_disconnect_frees_the_slot(server):
    before = parse_metrics(server.metrics())['lowrank_requests_finished_total{finish_reason="cancelled"}']
    with client(server).chat.completions.create(model="m", messages=CHAT, max_tokens=1000, stream=True,
                                                extra_body={"ignore_eos": True}) as stream:
        for i, _ in enumerate(stream):
            if i == 3:
                break  # leaving the block closes the connection
    assert wait_for(lambda: gauges(server)[0] == 0, timeout=5)
    after = parse_metrics(server.metrics())['lowrank_requests_finished_total{finish_reason="cancelled"}']
    assert after == before + 1


ERRORS = [
    # (body, status, param)
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"messages": []}, 400, "messages"),
    ({"messages": "hi"}, 400, "messages"),
    ({}, 400, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ({"messages": CHAT, "temperature": "hot"}, 400, "temperature"),
    ({"messages": CHAT, "temperature": 3}, 400, "temperature"),
    ({"messages": CHAT, "max_tokens": 0}, 400, "max_tokens"),
    ({"messages": CHAT, "max_tokens": 1.5}, 400, "max_tokens"),
    ({"messages": CHAT, "max_tokens": 100000}, 400, "max_tokens"),
    ({"messages": CHAT, "n": 17}, 400, "n"),
    ({"messages": CHAT, "stream": "yes"}, 400, "stream"),
    ({"messages": CHAT, "stop": [1]}, 400, "stop"),
    ({"messages": CHAT, "top_logprobs": 3}, 400, "top_logprobs"),
    ({"messages": CHAT, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"messages": [{"role": "user", "content": "word " * 3000}]}, 400, "messages"),
]


@pytest.mark.parametrize("body,status,param", ERRORS)
def test_bad_requests_are_400_with_an_error_body(server, body, status, param):
    got, _, err = raw(server, "POST", "/v1/chat/completions", body)
    assert got == status, err
    assert set(err["error"]) == {"message", "type", "param", "code"} and err["error"]["message"]
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param


def test_completions_errors(server):
    for body, param in [({}, "prompt"), ({"prompt": ""}, "prompt"), ({"prompt": {"a": 1}}, "prompt"),
                        ({"prompt": [1, 2, 99999999]}, None), ({"prompt": "x", "logprobs": 9}, "logprobs")]:
        status, _, err = raw(server, "POST", "/v1/completions", body)
        assert status == 400 and err["error"]["param"] == param, (body, err)


def test_routes_methods_and_sizes(server):
    status, _, err = raw(server, "GET", "/v1/nothing")
    assert status == 404 and err["error"]["type"] == "not_found_error"
    status, headers, err = raw(server, "GET", "/v1/chat/completions")
    assert status == 405 and headers["Allow"] == "POST" and "error" in err
    status, headers, _ = raw(server, "DELETE", "/v1/models")
    assert status == 405 and headers["Allow"] == "GET"
    status, _, models = raw(server, "GET", "/v1/models")
    assert status == 200 and models["data"][0]["id"] == os.path.basename(MODEL)
    assert raw(server, "GET", "/health")[:3:2] == (200, {"status": "ok"})
    # A malformed request line gets 400, and the server carries on.
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    c.connect()
    c.sock.sendall(b"NONSENSE\r\n\r\n")
    assert c.sock.recv(64).startswith(b"HTTP/1.1 400")
    c.close()
    assert raw(server, "GET", "/health")[0] == 200


def test_apply_template_renders_the_models_own_template(server):
    """POST /apply-template (llama-server's): the prompt SmolLM2's Jinja template
    makes, as Python's jinja2 renders it under transformers' settings (the
    literals below were rendered so), its default system turn included."""
    hi = [{"role": "user", "content": "Hi"}]
    status, _, out = raw(server, "POST", "/apply-template", {"messages": hi})
    assert status == 200, out
    assert out["prompt"] == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                             "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    turns = [{"role": "system", "content": "Be brief."}, *hi, {"role": "assistant", "content": "Hello!"}]
    status, _, out = raw(server, "POST", "/apply-template", {"messages": turns, "add_generation_prompt": False})
    assert status == 200 and out["prompt"] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                               "<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"), out
    for body, param in [({}, "messages"), ({"messages": []}, "messages"), ({"messages": [{"content": "x"}]},
                        "messages[0]"), ({"messages": hi, "tools": {}}, "tools"),
                        ({"messages": hi, "add_generation_prompt": "yes"}, "add_generation_prompt")]:
        status, _, err = raw(server, "POST", "/apply-template", body)
        assert status == 400 and err["error"]["param"] == param, (body, err)
    assert raw(server, "GET", "/apply-template")[0] == 405


def test_auth_and_body_limit():
    s = Server("--api-key", "k1,k2", "--max-body", "4")
    try:
        assert raw(s, "GET", "/health")[0] == 200  # open
        status, _, err = raw(s, "GET", "/v1/models")
        assert status == 401 and err["error"]["type"] == "authentication_error" and err["error"]["code"] == "invalid_api_key"
        assert raw(s, "GET", "/v1/models", headers={"Authorization": "Bearer nope"})[0] == 401
        assert raw(s, "GET", "/metrics")[0] == 401
        assert raw(s, "GET", "/v1/models", headers={"Authorization": "Bearer k1"})[0] == 200
        assert raw(s, "GET", "/v1/models", headers={"X-Api-Key": "k2"})[0] == 200
        with pytest.raises(openai.AuthenticationError):
            client(s, "wrong").models.list()
        assert client(s, "k2").chat.completions.create(model="m", messages=CHAT, max_tokens=2).usage.completion_tokens == 2
        big = {"messages": [{"role": "user", "content": "x" * 5000}]}
        status, _, err = raw(s, "POST", "/v1/chat/completions", big, headers={"X-Api-Key": "k1"})
        assert status == 413 and "max-body" in err["error"]["message"]
    finally:
        assert s.stop() == 0


def test_metrics_add_up():
    s = Server("-np", "2")
    try:
        c = client(s)
        usage = []
        for i in range(4):
            r = c.completions.create(model="m", prompt=f"Count to {i}:", max_tokens=3 + i, temperature=0)
            usage.append(r.usage)
        r = c.chat.completions.create(model="m", messages=CHAT, max_tokens=4)
        usage.append(r.usage)
        m = parse_metrics(s.metrics())
        finished = sum(v for k, v in m.items() if k.startswith("lowrank_requests_finished_total{"))
        assert finished == 5
        assert m["lowrank_generation_tokens_total"] == sum(u.completion_tokens for u in usage)
        assert m["lowrank_prompt_tokens_total"] == sum(u.prompt_tokens for u in usage)
        assert m["lowrank_time_to_first_token_seconds_count"] == 5
        assert m["lowrank_e2e_request_latency_seconds_count"] == 5
        assert m["lowrank_inter_token_latency_seconds_count"] == sum(u.completion_tokens - 1 for u in usage)
        assert m["lowrank_slots"] == 2 and m["lowrank_slots_busy"] == 0
        # The slots' caches take RAM for the few positions written, not their contexts.
        assert 0 < m["lowrank_kv_cache_resident_bytes"] < m["lowrank_kv_cache_bytes"] / 8, m
    finally:
        assert s.stop() == 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_load_200_requests_at_concurrency_16():
    s = Server("-np", "8", "--queue", "32")
    try:
        def one(i):
            words = 2 + (i * 37) % 31  # prompts of 7 to 97 tokens, 4 to 20 tokens out
            r = client(s).completions.create(model="m", prompt="lorem ipsum dolor " * words, max_tokens=4 + (i * 11) % 17,
                                             temperature=0.7, seed=i)
            return r.usage.completion_tokens

        with ThreadPoolExecutor(16) as ex:
            warm = list(ex.map(one, range(48)))
            rss_warm = rss_kib(s.pid())
            rest = list(ex.map(one, range(48, 200)))
        rss_end = rss_kib(s.pid())
        assert len(warm) + len(rest) == 200 and all(n >= 1 for n in warm + rest)
        m = parse_metrics(s.metrics())
        assert m['lowrank_requests_finished_total{finish_reason="cancelled"}'] == 0
        assert m["lowrank_requests_rejected_total"] == 0
        assert rss_end <= rss_warm * 1.03 + 4096, f"resident memory grew from {rss_warm} to {rss_end} KiB"
    finally:
        assert s.stop() == 0


def test_sigterm_finishes_running_requests_then_exits_0():
    s = Server("-np", "1", "--grace", "30")
    out = {}

    def one():
        out["r"] = client(s).completions.create(model="m", prompt="Once upon a time", max_tokens=200, temperature=0,
                                                extra_body={"ignore_eos": True})

    t = threading.Thread(target=one)
    t.start()
    assert wait_for(lambda: gauges(s)[0] == 1)
    s.proc.send_signal(signal.SIGTERM)
    # Draining: /health says so (a load balancer's readiness check), new requests are refused.
    assert wait_for(lambda: raw(s, "GET", "/health")[0] == 503, timeout=10)
    status, _, body = raw(s, "GET", "/health")
    assert status == 503 and body["error"]["code"] == "shutting_down", body
    status, _, body = raw(s, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert status == 503, body
    assert s.proc.wait(timeout=60) == 0
    s.stop()
    t.join(timeout=60)
    assert out["r"].usage.completion_tokens == 200 and out["r"].choices[0].finish_reason == "length"


def test_a_second_signal_cancels_running_requests_then_exits_0():
    s = Server("-np", "1", "--grace", "60")

    def one():
        try:
            client(s).completions.create(model="m", prompt="Once upon a time", max_tokens=2000, temperature=0,
                                         extra_body={"ignore_eos": True})
        except openai.APIError:
            pass  # cancelled: the connection may close before a response

    t = threading.Thread(target=one)
    t.start()
    assert wait_for(lambda: gauges(s)[0] == 1)
    s.proc.send_signal(signal.SIGINT)
    assert wait_for(lambda: raw(s, "GET", "/health")[0] == 503, timeout=10)
    t0 = time.time()
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(timeout=30) == 0
    assert time.time() - t0 < 10  # not the 60 s grace, nor the 2000 tokens
    assert "second signal: cancelling running requests" in s.read_log()
    s.stop()
    t.join(timeout=60)


def test_a_port_in_use_is_refused(server):
    r = subprocess.run([BIN, "serve", "-m", MODEL, "--port", str(server.port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"cannot listen on 127.0.0.1:{server.port}" in r.stderr
    assert raw(server, "GET", "/health")[0] == 200  # the first server carries on


@pytest.mark.parametrize("cache_ram", ["8192", "0"])
def test_a_system_prompt_is_shared_across_slots(cache_ram):
    """Requests sharing a long system prompt: the first evaluates it, each other one takes it from
    the prompt cache (stored once, --cache-ram) or from another slot (--cache-ram 0), and answers
    as it does alone."""
    s = Server("-np", "3", "--cache-ram", cache_ram)
    try:
        c = client(s)
        system = "You answer in one word. " + "The river mill stands by the stone bridge. " * 40
        qs = ["Name a color.", "Name a fruit.", "Name a city."]
        msgs = [[{"role": "system", "content": system}, {"role": "user", "content": q}] for q in qs]
        with ThreadPoolExecutor(3) as ex:
            rs = list(ex.map(lambda m: c.chat.completions.create(model="m", messages=m, max_tokens=6, temperature=0),
                             msgs))
        cached = sorted(r.usage.prompt_tokens_details.cached_tokens for r in rs)
        assert cached[0] == 0 and cached[1] > 300 and cached[2] > 300, cached
        m = parse_metrics(s.metrics())
        assert m["lowrank_prompt_cache_prefixes"] == (1 if cache_ram != "0" else 0)
        assert (m["lowrank_prompt_cache_bytes"] > 0) == (cache_ram != "0")
        # Each answer is the one a server without the prompt cache gives, one request at a time.
        lone = Server("-np", "2", "--cache-ram", "0")
        try:
            for r, msg in zip(rs, msgs):
                alone = client(lone).chat.completions.create(model="m", messages=msg, max_tokens=6, temperature=0)
                assert alone.choices[0].message.content == r.choices[0].message.content
        finally:
            assert lone.stop() == 0
    finally:
        assert s.stop() == 0


def test_a_bad_cache_ram_is_refused():
    need_model()
    r = subprocess.run([BIN, "serve", "-m", MODEL, "--cache-ram", "-1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--cache-ram" in r.stderr, r.stderr


def test_the_kv_pool_holds_what_it_says():
    """--kv-pool: a pool of 16 MiB holds one request reaching ~430 positions (23 KiB each) at a
    time; the others wait and are all answered, the pool's use stays within it, and a request
    that could never fit is a 400 naming --kv-pool."""
    s = Server("-np", "4", "-c", "1024", "--kv-pool", "16")
    try:
        c = client(s)
        with ThreadPoolExecutor(4) as ex:
            rs = list(ex.map(lambda i: c.completions.create(model="m", prompt="lorem ipsum dolor " * (40 + i),
                                                            max_tokens=300, temperature=0), range(4)))
        assert all(r.usage.completion_tokens >= 1 for r in rs)
        m = parse_metrics(s.metrics())
        assert m["lowrank_kv_pool_bytes"] == 16 << 20
        assert 0 < m["lowrank_kv_pool_used_bytes"] <= 16 << 20, m
        status, _, err = raw(s, "POST", "/v1/completions", {"prompt": "lorem " * 150, "max_tokens": 600})
        assert status == 400 and "--kv-pool" in err["error"]["message"], err
    finally:
        assert s.stop() == 0
