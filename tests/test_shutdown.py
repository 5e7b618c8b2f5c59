"""Upstream's process lifecycle where a rank dies: vLLM's process manager
takes with it the workers of an engine core that exits on its SIGTERM
(patch shutdown-kills-workers-of-an-exited-engine), and the executor's
start-up gives up the message queues' handshake once a worker died
(executor-init-fails-on-a-dead-worker; end to end: test_e2e_faults).

An engine core whose worker stalled for good restores SIGTERM's default
before it stops its workers (9 s with a stuck one); the API server's
SIGTERM then ends it at once, and the manager, finding no live engine core
to kill with its tree, left the stalled worker running after the server
(tests/test_e2e_faults.py's stalled-rank test met it in CI).  Here the
same order without an engine: a process with SIGTERM's default
disposition, its child stopped by SIGSTOP, shut down as the API server
shuts down its engine cores."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time

import psutil
import pytest
from vllm.v1.utils import shutdown


def _stalled_worker() -> None:
    time.sleep(600)


def _engine_core(pids) -> None:
    worker = multiprocessing.get_context("fork").Process(target=_stalled_worker)
    worker.start()
    os.kill(worker.pid, signal.SIGSTOP)
    pids.put(worker.pid)
    time.sleep(600)


def _gone(p: psutil.Process, within: float) -> bool:
    """Ended (a zombie counts: an orphan's reaper is not ours to wait for)."""
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_workers_of_an_engine_that_exits_on_sigterm_are_killed():
    ctx = multiprocessing.get_context("fork")
    pids = ctx.Queue()
    engine = ctx.Process(target=_engine_core, args=(pids,), name="EngineCore_0")
    engine.start()
    worker = psutil.Process(pids.get(timeout=60))
    try:
        shutdown([engine], timeout=2)
        assert not engine.is_alive() and engine.exitcode == -signal.SIGTERM, engine.exitcode
        assert _gone(worker, 5), f"the stopped worker {worker.pid} outlived its engine's shutdown"
    finally:
        with contextlib.suppress(psutil.Error):
            worker.kill()
        with contextlib.suppress(Exception):
            engine.kill()


def test_message_queue_handshake_gives_up_once_aborted():
    """The executor's wait for its message queues' handshake (patch
    executor-init-fails-on-a-dead-worker): a reader that died never
    subscribes, and once the executor's worker monitor has seen it die the
    writer stops waiting instead of blocking in zmq for good."""
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    writer = MessageQueue(n_reader=1, n_local_reader=1)
    dead = threading.Event()
    threading.Timer(0.5, dead.set).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="died before its message queue was ready"):
            writer.wait_until_ready(abort=dead.is_set)
        assert time.monotonic() - t0 < 5
    finally:
        # Closed here: a context the garbage collector finalizes in a cycle
        # can wait in term() for ever (engine-core-start-failure-exits-at-once).
        writer.local_socket.context.destroy(linger=0)
