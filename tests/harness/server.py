"""Start a real `vllm serve` (the unpacked CLI, as a user runs it) on
loopback for a test, wait until /health answers, and stop it with SIGINT
(SIGKILL after a minute) however the test ends.  Its output goes to a log
file, not a pipe: a chatty server must never block on a full pipe."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from harness.engine import cpu_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 120):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


@contextmanager
def serve(model: Path, args: list[str], log: Path, ranks: int,
          timeout: float = 600) -> Iterator[str]:
    """Yield the server's base URL.  ``ranks``: worker processes in all
    (for the CPU engine's core binding)."""
    port = free_port()
    env = {**os.environ, **cpu_env(ranks), "VLLM_LOGGING_LEVEL": "INFO"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model), *args,
             "--port", str(port), "--host", "127.0.0.1"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                if urllib.request.urlopen(base + "/health", timeout=5).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.time() > deadline:
                pytest.fail("server did not come up:\n" + log.read_text()[-4000:])
            time.sleep(2)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
