"""What a fault test needs around a real `vllm serve`: the server started
but not waited for (a rank may be killed before it is healthy), its worker
processes by rank, open streams that record how each one ended and when,
and the check that nothing outlives the server -- no process, no shared
memory segment, no listening port.  Every wait here is bounded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from harness.client import post
from harness.engine import remove_stale_cpu_shm
from harness.net import free_port
from harness.repo import VERSION
from harness.server import CLI, healthy, serve_command, serve_env, start, stop, wait_healthy

SHM = Path("/dev/shm")


class Server:
    """`vllm serve` in its own session, as a user starts it; not waited for.
    ``stop()`` (also on leaving a ``with``) interrupts it, then kills the
    whole session after a minute, so a failing test leaves nothing behind."""

    def __init__(self, model: Path, args: list[str], log: Path, ranks: int,
                 env: dict[str, str] | None = None, cpu: bool = True):
        """``cpu=False``: as a GPU user starts it (the GPU harness's dead rank), at vLLM's
        defaults: no CPU binding, no small KV cache."""
        self.model = model
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        remove_stale_cpu_shm()
        self.shm_before = set(os.listdir(SHM))
        cli = serve_command(model) if cpu else [*CLI, str(model)]
        self.proc = start([*cli, *args, "--port", str(self.port), "--host", "127.0.0.1"], log,
                          {**(serve_env(ranks) if cpu else os.environ), **(env or {})})
        # Every process the server started, with its title.  psutil's handles
        # check the start time, so a recycled pid is never mistaken for one.
        self.seen: dict[psutil.Process, str] = {}

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def healthy(self) -> bool:
        return healthy(self.base)

    def wait_healthy(self, timeout: float = 600) -> None:
        wait_healthy([self.proc], self.base, timeout, self.tail)
        self.processes()

    def processes(self) -> dict[str, psutil.Process]:
        """The server's live processes, by title (``VLLM::Worker_SP1_TP0``,
        ``VLLM::EngineCore``, ...); all are remembered for ``leftovers``."""
        out = {}
        try:
            procs = [psutil.Process(self.proc.pid)]
            procs += procs[0].children(recursive=True)
        except psutil.NoSuchProcess:
            return out
        for p in procs:
            try:
                title = " ".join(p.cmdline())[:80]
            except psutil.Error:
                continue
            self.seen[p] = title
            out[title] = p
        return out

    def worker(self, tag: str, timeout: float = 300) -> psutil.Process:
        """The worker whose title ends with ``tag`` (``SP1_TP0``, ``TP1``)."""
        deadline = time.time() + timeout
        while True:
            found = [p for t, p in self.processes().items()
                     if t.startswith("VLLM::Worker_") and t.split()[0].endswith(tag)]
            if found:
                return found[0]
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"no worker '{tag}': {sorted(self.processes())}\n"
                                     f"{self.tail()}")
            time.sleep(0.05)

    def wait_exit(self, timeout: float) -> int | None:
        """The server's exit code, or None if it still runs after ``timeout``."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        stop(self.proc)
        # A worker left stopped (SIGSTOP) by a test must not outlive it.
        for p in self.seen:
            try:
                p.kill()
            except psutil.Error:
                pass

    def leftovers(self, grace: float = 30, ignore: tuple[str, ...] = ()) -> list[str]:
        """After the server exited: its processes still alive, shared-memory
        segments it created and did not remove (but those whose names hold
        one of ``ignore``), its port still bound.  ``grace``: how long
        stragglers get to go."""
        deadline = time.time() + grace
        while True:
            alive = []
            for p, title in self.seen.items():
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        alive.append(f"process {p.pid} {title}")
                except psutil.Error:
                    pass
            shm = sorted(n for n in set(os.listdir(SHM)) - self.shm_before
                         if not any(i in n for i in ignore))
            with socket.socket() as s:
                # As a restarted server binds it: a closed connection's
                # TIME_WAIT does not hold the port, a listener does.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", self.port))
                    port = []
                except OSError:
                    port = [f"port {self.port} still bound"]
            found = alive + [f"/dev/shm/{n}" for n in shm] + port
            if not found or time.time() > deadline:
                return found
            time.sleep(1)


@dataclass
class Stream:
    """One streamed completion, read on a thread: its text so far, and how
    it ended -- "done" ([DONE] after its last token), "error" (an error
    event, an HTTP error or a broken connection; ``error`` says which) --
    and when (``ended``, time.time())."""

    tokens: int = 0
    text: str = ""
    end: str = ""
    error: str = ""
    ended: float = 0.0
    first: threading.Event = field(default_factory=threading.Event)


def open_stream(base: str, body: dict, timeout: float = 600) -> Stream:
    s = Stream()

    def read() -> None:
        try:
            with post(base + "/v1/completions", {**body, "stream": True}, timeout) as resp:
                for raw in resp:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:"):].strip()
                    if data == "[DONE]":
                        s.end = "done"
                        break
                    event = json.loads(data)
                    if "error" in event:
                        s.end, s.error = "error", f"error event: {event['error']}"[:300]
                        break
                    for choice in event.get("choices", []):
                        if choice.get("text"):
                            s.text += choice["text"]
                            s.tokens += 1
                            s.first.set()
            if not s.end:
                s.end, s.error = "error", "stream closed without [DONE]"
        except Exception as e:      # noqa: BLE001 -- how it ended is what is recorded
            s.end, s.error = "error", f"{type(e).__name__}: {e}"[:300]
        s.ended = time.time()
        s.first.set()

    threading.Thread(target=read, daemon=True).start()
    return s


def wait_ended(streams: list[Stream], timeout: float) -> list[Stream]:
    """The streams still open after ``timeout`` seconds (none: all ended)."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(not s.end for s in streams):
        time.sleep(0.2)
    return [s for s in streams if not s.end]


@dataclass
class Case:
    """One fuzz request.  ``prompts``: for a valid request, the prompt ids
    whose greedy continuation (``max_tokens`` of it, ``n`` times each) the
    reply must hold; None for a request that must get a 4xx, unless
    ``valid`` (served, its output not compared).  ``raw``: bytes sent as the
    body instead of ``body`` as JSON."""

    name: str
    body: dict
    prompts: list[list[int]] | None = None
    max_tokens: int = 4
    n: int = 1
    raw: bytes | None = None
    valid: bool = False        # True with prompts=None: served, n choices, not compared
    prefix: str = ""           # ... each choice starting with this (spaces ignored)
    path: str = "/v1/completions"

    def __post_init__(self):
        self.valid = self.valid or self.prompts is not None

    def expected(self, greedy: dict[tuple[int, ...], list[int]]) -> list[list[int]]:
        return [greedy[tuple(p)][:self.max_tokens] for p in self.prompts for _ in range(self.n)]


def fuzz_cases(model: Path, vocab: int, max_model_len: int, sp: int,
               repeat: int = 8) -> list[Case]:
    """The bad requests a server must refuse with a 4xx, each ``repeat``
    times, interleaved (a fixed shuffle) with valid ones: prompt lengths
    1 .. 2*SP+1 (every padding remainder), a prompt that fills the context
    exactly, ``n`` = 2, an unknown field, a stream, and once a batch of
    1000 tiny prompts in one call."""
    import random

    rng = random.Random(0)
    m = str(model)

    def ids(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    def req(prompt, max_tokens=4, **kw) -> dict:
        return {"model": m, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, **kw}

    bad = [
        Case("empty prompt", req("")),
        Case("empty prompt ids", req([])),
        Case("token id over the vocabulary", req([5, vocab + 7])),
        Case("negative token id", req([5, -1])),
        Case("prompt at max-model-len", req(ids(max_model_len), max_tokens=1)),
        Case("prompt one over max-model-len", req(ids(max_model_len + 1), max_tokens=1)),
        Case("prompt far over max-model-len", req(ids(8 * max_model_len), max_tokens=1)),
        Case("max_tokens 0", req(ids(3), max_tokens=0)),
        Case("max_tokens negative", req(ids(3), max_tokens=-5)),
        Case("n=2 with greedy sampling", req(ids(3), n=2)),
        Case("logprobs over the limit", req(ids(3), logprobs=1000)),
        Case("prompt_logprobs over the limit", req(ids(3), prompt_logprobs=1000)),
        Case("1 MB string", req("w5 " * ((1 << 20) // 3))),
        Case("invalid UTF-8", {}, raw=b'{"model": "' + m.encode()
             + b'", "prompt": "w5 \xff\xfe w6", "max_tokens": 4}'),
        Case("not JSON", {}, raw=b'{"model": '),
        Case("max_tokens not a number", req(ids(3), max_tokens="four")),
        Case("unknown model", {**req(ids(3)), "model": "no-such-model"}),
    ]
    p = ids(max_model_len - 4)
    beyond = Case("max_tokens beyond the context", req(p, max_tokens=max_model_len))
    valid = []
    if VERSION == "0.26.0":
        bad.append(beyond)
    else:
        # From 0.32 on upstream clamps max_tokens to the context left: the 4
        # greedy tokens of a prompt 4 short of it.
        valid.append(replace(beyond, prompts=[p]))
    for n in range(1, 2 * sp + 2):
        p = ids(n)
        valid.append(Case(f"prompt of {n} tokens", req(p), [p]))
    p = ids(max_model_len - 4)
    valid.append(Case("prompt filling the context", req(p), [p]))
    p = ids(3)
    valid.append(Case("best_of=2 with greedy sampling", req(p, best_of=2), [p]))
    # Not seeded: a seeded request whose prefill is chunked stops vLLM's CPU
    # engine at any layout (docs/reliability.md).
    valid.append(Case("n=2 sampled", req(ids(5), n=2, temperature=1.0), n=2, valid=True))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    valid.append(Case("a JSON schema", req(ids(4), max_tokens=8,
                                           structured_outputs={"json": schema}),
                      max_tokens=8, valid=True, prefix='{"a":'))
    p = ids(3)
    valid.append(Case("an unknown field", req(p, frobnicate=True), [p]))
    p = ids(4)
    valid.append(Case("streamed", req(p, stream=True), [p]))
    cases = bad * repeat + valid * repeat
    tiny = [ids(rng.randrange(1, 4)) for _ in range(40)]
    batch = [tiny[rng.randrange(len(tiny))] for _ in range(1000)]
    cases.append(Case("1000 prompts in one call", req(batch, max_tokens=2), batch, max_tokens=2))
    rng.shuffle(cases)
    return cases


def send(base: str, case: Case, timeout: float = 300) -> tuple[int, dict | str]:
    """(HTTP status, the reply: JSON, the joined streamed text, or text)."""
    data = case.raw if case.raw is not None else json.dumps(case.body).encode()
    req = urllib.request.Request(base + case.path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if case.body.get("stream"):
                texts, done = [], False
                for raw in resp:
                    line = raw.decode().strip()
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data:"):
                        event = json.loads(line[len("data:"):])
                        if "error" in event:
                            return 500, event
                        texts += [c["text"] for c in event["choices"]]
                return (200 if done else 599), {"choices": [{"index": 0, "text": "".join(texts)}]}
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def run_fuzz(base: str, cases: list[Case], concurrency: int,
             watchdog_s: float = 600) -> list[tuple[int, dict | str]]:
    """Every case, ``concurrency`` at a time; a hung one is a failure."""
    from concurrent.futures import ThreadPoolExecutor, wait

    pool = ThreadPoolExecutor(concurrency)
    futures = [pool.submit(send, base, c) for c in cases]
    _, hung = wait(futures, timeout=watchdog_s)
    pool.shutdown(wait=False, cancel_futures=True)
    assert not hung, f"{len(hung)} fuzz requests hung past {watchdog_s:.0f} s"
    return [f.result() for f in futures]


def message(reply: dict | str) -> str:
    """The error message of a 4xx reply ('' if it has none)."""
    if isinstance(reply, dict):
        err = reply.get("error", reply)
        msg = err.get("message") or err.get("detail") if isinstance(err, dict) else err
        return str(msg or "")
    return reply


def texts(reply: dict) -> list[str]:
    return [c["text"] for c in sorted(reply["choices"], key=lambda c: c["index"])]
