"""Two `lowrank serve` replicas behind nginx on 127.0.0.1, configured as
docs/deploy.md says: requests are spread over both, and a replica stopped
under load (SIGTERM: it drains, /health turns 503, new requests get 503,
then its port closes) is routed around without a failed request. Every loop
is bounded in count and time."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import Server

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)

# The upstream block and location of docs/deploy.md, on test ports.
CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {dir}/access.log;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  upstream lowrank {{
    least_conn;
    server 127.0.0.1:{a} max_fails=1 fail_timeout=30s;
    server 127.0.0.1:{b} max_fails=1 fail_timeout=30s;
    keepalive 16;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://lowrank;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout http_502 http_503 non_idempotent;
      proxy_next_upstream_tries 2;
    }}
  }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=120):
    """(status, parsed JSON or text) of one request on its own connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body).encode() if body else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode("utf-8", "replace")
    c.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def finished(s):
    """Requests a replica finished, from its /metrics."""
    total = 0.0
    for line in s.metrics().splitlines():
        if line.startswith("lowrank_requests_finished_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


class Nginx:
    def __init__(self, a, b):
        assert NGINX, "nginx is not installed (scripts/install-deps.sh installs nginx-light)"
        self.dir = tempfile.mkdtemp(prefix="lowrank-nginx-")
        for attempt in range(3):  # the free port may be taken between the probe and nginx's bind
            self.port = free_port()
            conf = os.path.join(self.dir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(CONF.format(dir=self.dir, a=a.port, b=b.port, port=self.port))
            self.proc = subprocess.Popen([NGINX, "-e", os.path.join(self.dir, "error.log"), "-p", self.dir,
                                          "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            deadline = time.time() + 10
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    if request(self.port, "GET", "/health", timeout=5)[0] == 200:
                        return
                except OSError:
                    pass
                time.sleep(0.05)
            self.stop()
        raise RuntimeError("nginx did not start:\n" + open(os.path.join(self.dir, "error.log")).read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


BODY = {"prompt": "The river runs", "max_tokens": 8, "temperature": 0}


@pytest.fixture
def pair():
    a, b = Server("-np", "2", "--grace", "60"), Server("-np", "2", "--grace", "60")
    n = Nginx(a, b)
    yield a, b, n
    n.stop()
    for s in (a, b):
        s.stop()
    shutil.rmtree(n.dir, ignore_errors=True)


def test_requests_are_spread_and_a_stopped_replica_is_routed_around(pair):
    a, b, n = pair
    base_a, base_b = finished(a), finished(b)
    status, first = request(n.port, "POST", "/v1/completions", BODY)
    assert status == 200, first
    text = first["choices"][0]["text"]
    # least_conn with nothing open falls back to round robin: 12 requests one
    # after another go to both replicas.
    for _ in range(11):
        status, r = request(n.port, "POST", "/v1/completions", BODY)
        assert status == 200 and r["choices"][0]["text"] == text, r  # the same greedy text from either
    got_a, got_b = finished(a) - base_a, finished(b) - base_b
    assert got_a + got_b == 12
    assert got_a >= 4 and got_b >= 4, (got_a, got_b)

    # Under load at concurrency 4, replica a is stopped (it drains its running
    # requests, refuses new ones with 503, then closes its port): nginx passes
    # the refused and the refused-connection requests on to b.
    long = dict(BODY, max_tokens=24)
    results = []
    lock = threading.Lock()

    def one(_):
        s, r = request(n.port, "POST", "/v1/completions", long)
        with lock:
            results.append((s, r))

    def served(s, status):  # completions a replica's log says it answered with `status`
        return s.read_log().count(f"POST /v1/completions {status}")

    before_a = served(a, 200)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(one, i) for i in range(24)]
        deadline = time.time() + 60
        while time.time() < deadline and len(results) < 4:
            time.sleep(0.02)
        assert len(results) >= 4, "no request finished through nginx in 60 s"
        a.proc.send_signal(signal.SIGTERM)
        assert a.proc.wait(timeout=90) == 0
        for f in futures:
            f.result(timeout=300)
    failed = [(s, r) for s, r in results if s != 200]
    assert not failed, failed[:3]
    assert len(results) == 24
    assert len({r["choices"][0]["text"] for _, r in results}) == 1
    # a carried part of this load before it stopped (what it refused while
    # draining, nginx passed on to b).
    assert served(a, 200) > before_a
    print(f"replica a: {served(a, 200) - before_a} answered under load, {served(a, 503)} refused while draining")

    # With a gone, every request goes to b.
    before = finished(b)
    for _ in range(6):
        status, r = request(n.port, "POST", "/v1/completions", BODY)
        assert status == 200 and r["choices"][0]["text"] == text, r
    assert finished(b) - before == 6
    assert request(n.port, "GET", "/health")[0] == 200
