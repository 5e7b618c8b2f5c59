"""Start a real `vllm serve` (the unpacked CLI, as a user runs it) on
loopback for a test, wait until /health answers, and stop it with SIGINT
(SIGKILL after a minute) however the test ends.  Its output goes to a log
file, not a pipe: a chatty server must never block on a full pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.engine import KV_CACHE_BYTES, cpu_env, remove_stale_cpu_shm
from harness.net import free_port


def serve_command(model: Path) -> list[str]:
    """`vllm serve MODEL` as the tests start it: the unpacked CLI, each
    rank's small KV cache."""
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
            "--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]


def serve_env(ranks: int) -> dict[str, str]:
    return {**os.environ, **cpu_env(ranks), "VLLM_LOGGING_LEVEL": "INFO"}


@contextmanager
def serve(model: Path, args: list[str], log: Path, ranks: int,
          timeout: float = 600, headless: list[list[str]] = ()) -> Iterator[str]:
    """Yield the server's base URL.  ``ranks``: worker processes in all
    (for the CPU engine's core binding).  ``headless``: the extra arguments
    of each other "node" of a multi-node launch on loopback, started first
    as `vllm serve MODEL --headless ...` (log: ``<log>.node<i>``)."""
    with serve_nodes(model, [args], log, ranks, timeout, headless) as bases:
        yield bases[0]


@contextmanager
def serve_nodes(model: Path, servers: list[list[str]], log: Path, ranks: int,
                timeout: float = 600, headless: list[list[str]] = ()) -> Iterator[list[str]]:
    """``serve`` for launches where several nodes run an API server (vLLM's
    hybrid DP load balancing): one server per entry of ``servers``, all
    started together (they wait for each other), each on its own port
    (logs: ``<log>``, ``<log>.server<j>``); yields their base URLs."""
    remove_stale_cpu_shm()
    env = serve_env(ranks)
    cli = serve_command(model)
    ports = [free_port() for _ in servers]
    # The head (servers[0]) starts last, so it is stopped first (reversed
    # below): stopping, it tells the others to stop.
    launches = [(cli + [*a, "--headless"], log.with_name(f"{log.name}.node{i + 1}"))
                for i, a in enumerate(headless)]
    served = [(cli + [*a, "--port", str(port), "--host", "127.0.0.1"],
               log if j == 0 else log.with_name(f"{log.name}.server{j}"))
              for j, (a, port) in enumerate(zip(servers, ports))]
    launches += served[1:] + served[:1]
    logs = [path for _, path in launches]
    procs = []
    for cmd, path in launches:
        with open(path, "w") as out:
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))

    def tails() -> str:
        return "\n".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for p in logs)

    bases = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        deadline = time.time() + timeout
        waiting = list(bases)
        while waiting:
            exited = [p.returncode for p in procs if p.poll() is not None]
            if exited:
                pytest.fail(f"server exited ({exited}):\n{tails()}")
            try:
                if urllib.request.urlopen(waiting[0] + "/health", timeout=5).status == 200:
                    waiting.pop(0)
                    continue
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.time() > deadline:
                pytest.fail("server did not come up:\n" + tails())
            time.sleep(2)
        yield bases
    finally:
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for proc in reversed(procs):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
