"""Start a real `vllm serve` (the unpacked CLI, as a user runs it) on
loopback, wait until /health answers, and stop it with SIGINT (SIGKILL after
a minute) however the caller ends.  Its output goes to a log file, not a
pipe: a chatty server must never block on a full pipe.  The one way a
server starts and stops, for the tests (``serve``, ``faults.Server``) and
the GPU harness (``benchmarks.server``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.engine import KV_CACHE_BYTES, cpu_env, remove_stale_cpu_shm
from harness.net import free_port

CLI = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]


def serve_command(model: Path) -> list[str]:
    """`vllm serve MODEL` as the tests start it: the unpacked CLI, each
    rank's small KV cache."""
    return [*CLI, str(model), "--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]


def serve_env(ranks: int) -> dict[str, str]:
    return {**os.environ, **cpu_env(ranks), "VLLM_LOGGING_LEVEL": "INFO"}


def start(cmd: list[str], log: Path, env: dict[str, str],
          echo: bool = False) -> subprocess.Popen:
    """``cmd`` in a session of its own (``stop`` ends all it started), its
    output to ``log`` (``echo``: after the command line)."""
    with open(log, "w") as out:
        if echo:
            out.write(" ".join(cmd) + "\n")
            out.flush()
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def healthy(base: str) -> bool:
    try:
        return urllib.request.urlopen(base + "/health", timeout=5).status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def wait_healthy(procs: list[subprocess.Popen], base: str, timeout: float,
                 tails: Callable[[], str], failed: Callable[[], str] = lambda: "") -> None:
    """Until ``base`` answers /health; AssertionError (with ``tails()``) when
    one of ``procs`` exits, ``failed()`` says why the start failed, or
    ``timeout`` passes."""
    deadline = time.time() + timeout
    while not healthy(base):
        exited = [p.returncode for p in procs if p.poll() is not None]
        why = (f"server exited ({exited})" if exited else failed()
               or (f"server did not come up in {timeout:.0f} s" if time.time() > deadline else ""))
        if why:
            raise AssertionError(f"{why}:\n{tails()}")
        time.sleep(1)


def stop(proc: subprocess.Popen) -> None:
    """SIGINT to the process's session, SIGKILL after a minute."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait()


@contextmanager
def serve(model: Path, args: list[str], log: Path, ranks: int,
          timeout: float = 600, headless: list[list[str]] = ()) -> Iterator[str]:
    """Yield the server's base URL.  ``ranks``: worker processes in all
    (for the CPU engine's core binding).  ``headless``: the extra arguments
    of each other "node" of a multi-node launch on loopback, started first
    as `vllm serve MODEL --headless ...` (log: ``<log>.node<i>``); the head
    is stopped first, and stopping tells the others to stop."""
    remove_stale_cpu_shm()
    env = serve_env(ranks)
    cli = serve_command(model)
    port = free_port()
    launches = [(cli + [*a, "--headless"], log.with_name(f"{log.name}.node{i + 1}"))
                for i, a in enumerate(headless)]
    launches.append((cli + [*args, "--port", str(port), "--host", "127.0.0.1"], log))
    procs = [start(cmd, path, env) for cmd, path in launches]

    def tails() -> str:
        return "\n".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for _, p in launches)

    try:
        try:
            wait_healthy(procs, f"http://127.0.0.1:{port}", timeout, tails)
        except AssertionError as e:
            import pytest  # here: the GPU harness imports this module without pytest

            pytest.fail(str(e))
        yield f"http://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            stop(proc)
