"""An OpenAI-API client for a running server, standard library only, so the
GPU benchmarks (benchmarks/run.py, on a host without pytest) and the CPU
tests share it: requests, the /metrics parser, and the soak -- many mixed
requests, streamed and not, some dropped by the client mid-stream, with a
watchdog and the checks a soak must pass."""

from __future__ import annotations

import json
import random
import re
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass


def post(url: str, body: dict, timeout: float = 120):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def samples(base: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of one series on the server's /metrics: (labels, value)."""
    return parse_samples(urllib.request.urlopen(base + "/metrics", timeout=30).read().decode(),
                         name)


def parse_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of one series in a /metrics text: (labels, value)."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            out.append((dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head)), float(value)))
    return out


def metric(base: str, name: str, **labels: str) -> float:
    """Sum of a gauge or counter over its label sets (those with
    ``labels``, e.g. finished_reason="length", if given)."""
    return sum(value for have, value in samples(base, name)
               if all(have.get(k) == v for k, v in labels.items()))


def finished_by_length(base: str) -> float:
    """Requests the engine ran to max_tokens (all of the soak's: ignore_eos).
    An aborted request is not counted (vLLM 0.26 counts no aborts here)."""
    return metric(base, "vllm:request_success_total", finished_reason="length")


def settled(base: str, timeout: float = 60) -> tuple[float, float, float]:
    """Requests running, requests waiting and KV-cache use, once all three
    are 0 or after ``timeout`` (aborts reach the engine asynchronously)."""
    deadline = time.time() + timeout
    while True:
        left = (metric(base, "vllm:num_requests_running"),
                metric(base, "vllm:num_requests_waiting"),
                metric(base, "vllm:kv_cache_usage_perc"))
        if left == (0, 0, 0) or time.time() > deadline:
            return left
        time.sleep(1)


@dataclass
class Soak:
    """One soak's shape.  Request i is streamed when i is even; every tenth
    (i % 10 == 4) is streamed with ``cancel_tokens`` asked and dropped by
    the client after its first text, so half are plain, 40% streamed to the
    end, 10% cancelled."""

    requests: int
    concurrency: int
    prompt_words: tuple[int, int]         # prompt length range, in words
    max_tokens: tuple[int, int]           # asked output range
    cancel_tokens: int                    # asked by the cancelled ones: still running when dropped
    word: Callable[[int], str]            # i -> a word of the model's vocabulary
    vocab: tuple[int, int]                # word indices to draw from
    watchdog_s: float = 900
    timeout_s: float = 600                # one request


def soak_request(base: str, model: str, soak: Soak, i: int,
                 rng: random.Random) -> tuple[str, int, int]:
    """(kind, tokens asked, tokens received) of request i."""
    prompt = " ".join(soak.word(rng.randrange(*soak.vocab))
                      for _ in range(rng.randrange(*soak.prompt_words)))
    want = rng.randrange(*soak.max_tokens)
    stream, cancel = i % 2 == 0, i % 10 == 4
    body = {"model": model, "prompt": prompt, "max_tokens": want, "temperature": 0.0,
            "ignore_eos": True}
    if not stream:
        reply = json.load(post(base + "/v1/completions", body, soak.timeout_s))
        return "plain", want, reply["usage"]["completion_tokens"]
    body.update(stream=True, stream_options={"include_usage": True})
    if cancel:
        want = body["max_tokens"] = soak.cancel_tokens
    got = 0
    with post(base + "/v1/completions", body, soak.timeout_s) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            data = json.loads(line[len("data:"):])
            if cancel and data["choices"] and data["choices"][0]["text"]:
                return "cancelled", want, 0             # closes the connection mid-stream
            if data.get("usage"):
                got = data["usage"]["completion_tokens"]
    return "stream", want, got


def run_soak(base: str, model: str, soak: Soak, seed: int = 0) -> dict:
    """Drive the soak and settle: a summary whose "problems" list is empty
    when it passed.  Checks: no request failed or hung (the watchdog), the
    kinds are as planned, every finished request got the tokens it asked
    for, /health answers afterwards and no request is left running or
    waiting with KV-cache blocks still in use."""
    rng = random.Random(seed)
    rngs = [random.Random(rng.random()) for _ in range(soak.requests)]
    before = finished_by_length(base)
    t0 = time.time()
    pool = ThreadPoolExecutor(soak.concurrency)
    futures = [pool.submit(soak_request, base, model, soak, i, rngs[i])
               for i in range(soak.requests)]
    _, hung = wait(futures, timeout=soak.watchdog_s)
    # Not `with`: its exit would wait for hung requests and defeat the watchdog.
    pool.shutdown(wait=False, cancel_futures=True)
    seconds = time.time() - t0
    results, errors = [], []
    for f in futures:
        if f.done() and not f.cancelled():
            if f.exception() is not None:
                errors.append(repr(f.exception())[:300])
            else:
                results.append(f.result())
    kinds = {k: sum(1 for r in results if r[0] == k) for k in ("plain", "stream", "cancelled")}
    short = [(k, want, got) for k, want, got in results if k != "cancelled" and got != want]
    healthy = urllib.request.urlopen(base + "/health", timeout=30).status == 200
    left = settled(base)
    ran = finished_by_length(base) - before
    plan = {"plain": soak.requests // 2, "cancelled": (soak.requests + 5) // 10}
    plan["stream"] = soak.requests - plan["plain"] - plan["cancelled"]
    problems = []
    if hung:
        problems.append(f"{len(hung)} requests hung past the {soak.watchdog_s:.0f} s watchdog")
    if errors:
        problems.append(f"{len(errors)} requests failed: {errors[:3]}")
    if not hung and not errors and kinds != plan:
        problems.append(f"kinds {kinds}, planned {plan}")
    if short:
        problems.append(f"{len(short)} requests got fewer tokens than asked: {short[:5]}")
    if not healthy:
        problems.append("/health failed after the soak")
    if left != (0, 0, 0):
        problems.append(f"running, waiting, KV-cache use after the soak: {left}")
    finished = plan["plain"] + plan["stream"]
    # The cancelled ones were aborted, except any that finished before the
    # disconnect reached the engine (2 of 10 did once, on a loaded CI
    # machine): most must have been.
    if not finished <= ran <= finished + plan["cancelled"] // 2:
        problems.append(f"{ran:.0f} requests ran to max_tokens: want {finished}, and at most "
                        f"{plan['cancelled'] // 2} of the {plan['cancelled']} cancelled ones "
                        "finishing before their abort")
    return {"requests": soak.requests, "concurrency": soak.concurrency, "seconds": seconds,
            "kinds": kinds, "errors": errors, "hung": len(hung), "short": short[:20],
            "ran_to_length": ran, "left_running_waiting_kv": left, "healthy": healthy,
            "output_tokens": sum(got for k, _, got in results if k != "cancelled"),
            "problems": problems}
