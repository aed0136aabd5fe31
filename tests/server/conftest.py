"""Fixtures of the server tests: the real `lowrank serve` binary on 127.0.0.1
(a free port), the default model, every wait bounded in time."""
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest

BIN = os.environ.get("LOWRANK_BIN", os.path.join(os.path.dirname(__file__), "../../build/lowrank"))
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lowrank", "models")
MODEL = os.environ.get("LOWRANK_MODEL") or os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")


def need_model():
    if not os.path.exists(MODEL):
        pytest.skip(f"the default model is not cached ({MODEL}; scripts/fetch-model.sh)")


class Server:
    """A running `lowrank serve`; stop() sends SIGTERM and returns its exit code."""

    def __init__(self, *args, model=None, timeout=60):
        need_model()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="lowrank-serve-", suffix=".log", delete=False)
        cmd = [BIN, "serve", "-m", model or MODEL, "--port", "0", "-t", "2", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.read_log()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m:
                self.port = int(m.group(1))
            if "lowrank serve: ready" in text:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"lowrank serve exited {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        else:
            self.proc.kill()
            raise RuntimeError("lowrank serve was not ready in time:\n" + self.read_log())
        self.url = f"http://127.0.0.1:{self.port}"

    def read_log(self):
        with open(self.log.name) as f:
            return f.read()

    def pid(self):
        return self.proc.pid

    def metrics(self, headers=None):
        req = urllib.request.Request(self.url + "/metrics", headers=headers or {})
        return urllib.request.urlopen(req, timeout=10).read().decode()

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            os.unlink(self.log.name)


@pytest.fixture(scope="module")
def server():
    s = Server("-np", "4", "--queue", "64")
    yield s
    assert s.stop() == 0
