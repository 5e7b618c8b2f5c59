"""The OpenAI-compatible server started with `-sp 2 --shift-parallel` (CPU
engine; prefills run in SP, decodes in full TP): a completion that equals
the offline TP=1 engine's greedy output, a streamed chat completion, the
per-mode step counters on /metrics, a bad request that fails alone while
the server keeps serving, and a soak of ~100 mixed requests with client
cancellations."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from harness.engine import run_engine
from harness.models import make_model
from harness.server import post, samples, serve

pytestmark = pytest.mark.e2e

THRESHOLD = 8


@pytest.fixture(scope="module")
def model(models_dir):
    return make_model(models_dir, "llama", heads=8, kv_heads=2)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "server.log"
    with serve(model, ["-sp", "2", "--shift-parallel", "--shift-parallel-threshold",
                       str(THRESHOLD), "--max-model-len", "512", "--enforce-eager",
                       "--dtype", "float32", "--seed", "0"], log, ranks=2) as base:
        yield base, log


def test_server_runs_sp2_with_shift(server):
    _, log = server
    text = log.read_text()
    assert "Ulysses SP: rank 0 is SP rank 0 of 2" in text
    assert "Worker_SP1" in text
    assert "Shift parallelism: full-TP model (TP=2) loaded beside the SP model" in text


def shift_counters(base: str) -> dict[tuple[str, str], float]:
    return {(what, labels["mode"]): value for what in ("steps", "tokens")
            for labels, value in samples(base, f"vllm:shift_parallel_{what}_total")}


def test_metrics_count_steps_per_mode(server, model):
    """A 20-token prompt (> threshold) prefills in one SP step; its 4 more
    tokens come from 4 one-token decode steps in full TP."""
    from transformers import AutoTokenizer

    base, _ = server
    prompt = " ".join(f"w{i}" for i in range(40, 60))
    n = len(AutoTokenizer.from_pretrained(model)(prompt)["input_ids"])
    assert n > THRESHOLD
    before = shift_counters(base)
    assert set(before) == {(w, m) for w in ("steps", "tokens") for m in ("sp", "full_tp")}
    body = json.load(post(base + "/v1/completions", {
        "model": str(model), "prompt": prompt, "max_tokens": 5, "temperature": 0.0,
        "ignore_eos": True}))
    assert body["usage"]["completion_tokens"] == 5
    deadline = time.time() + 30           # stats reach the frontend after the output
    while True:
        after = shift_counters(base)
        delta = {k: after[k] - before[k] for k in after}
        if delta[("steps", "full_tp")] >= 4 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert delta == {("steps", "sp"): 1, ("tokens", "sp"): n,
                     ("steps", "full_tp"): 4, ("tokens", "full_tp"): 4}, delta


def test_completion_matches_offline_tp1(server, model):
    from transformers import AutoTokenizer

    base, _ = server
    prompt = "w5 w9 w33 w7 w101 w2"
    body = json.load(post(base + "/v1/completions", {
        "model": str(model), "prompt": prompt, "max_tokens": 6, "temperature": 0.0,
        "ignore_eos": True}))
    assert body["usage"]["completion_tokens"] == 6
    tok = AutoTokenizer.from_pretrained(model)
    ids = tok(prompt)["input_ids"]
    ref = run_engine(model, [ids], max_tokens=6, prompt_logprobs=False)
    assert body["choices"][0]["text"].split() == tok.decode(ref.tokens[0]).split()


def test_streamed_chat(server, model):
    base, _ = server
    resp = post(base + "/v1/chat/completions", {
        "model": str(model), "stream": True, "max_tokens": 5, "temperature": 0.0,
        "ignore_eos": True, "messages": [{"role": "user", "content": "w1 w2 w3 w4"}]})
    chunks, done = [], False
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            done = True
            break
        delta = json.loads(data)["choices"][0]["delta"]
        if delta.get("content"):
            chunks.append(delta["content"])
    assert done and len(chunks) >= 2, chunks
    assert len("".join(chunks).split()) == 5


def test_bad_request_fails_alone(server, model):
    base, _ = server
    with pytest.raises(urllib.error.HTTPError) as err:
        post(base + "/v1/completions", {"model": str(model), "prompt": "w5 w6",
                                        "max_tokens": 5000})
    assert err.value.code == 400
    body = json.load(post(base + "/v1/completions", {
        "model": str(model), "prompt": "w5 w6", "max_tokens": 3, "temperature": 0.0,
        "ignore_eos": True}))
    assert body["usage"]["completion_tokens"] == 3


def metric(base: str, name: str, **labels: str) -> float:
    """Sum of a gauge or counter on /metrics over its label sets (those
    with ``labels``, e.g. finished_reason="abort", if given)."""
    return sum(value for have, value in samples(base, name)
               if all(have.get(k) == v for k, v in labels.items()))


def finished_by_length(base: str) -> float:
    """Requests the engine ran to max_tokens (all of ours: ignore_eos).  An
    aborted request is not counted (vLLM 0.26 counts no aborts here)."""
    return metric(base, "vllm:request_success_total", finished_reason="length")


def soak_request(base: str, model, i: int, rng) -> tuple[str, int, int]:
    """One request of the soak: (kind, tokens asked, tokens received)."""
    prompt = " ".join(f"w{rng.randrange(3, 400)}" for _ in range(rng.randrange(2, 160)))
    want = rng.randrange(1, 24)
    stream, cancel = i % 2 == 0, i % 10 == 4            # 10% cancelled, all of them streamed
    body = {"model": str(model), "prompt": prompt, "max_tokens": want, "temperature": 0.0,
            "ignore_eos": True}
    if not stream:
        return "plain", want, json.load(post(base + "/v1/completions", body))["usage"]["completion_tokens"]
    body.update(stream=True, stream_options={"include_usage": True})
    if cancel:
        want = 300                                      # still running when the client leaves
        body["max_tokens"] = want
    resp = post(base + "/v1/completions", body)
    got = 0
    with resp:
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


def test_soak(server, model):
    """~100 mixed requests, 16 at a time, half streamed, 10% dropped by the
    client mid-stream (CI's small version of the GPU soak): no errors, no
    hang (a watchdog bounds it), every finished request has the tokens it
    asked for, and afterwards the server is healthy with no request left
    running and every KV-cache block free again."""
    import random
    from concurrent.futures import ThreadPoolExecutor, wait

    base, _ = server
    before = finished_by_length(base)
    rng = random.Random(0)
    rngs = [random.Random(rng.random()) for _ in range(100)]
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(soak_request, base, model, i, rngs[i]) for i in range(100)]
        done, not_done = wait(futures, timeout=900)        # the watchdog
        assert not not_done, f"{len(not_done)} requests hung"
    results = [f.result() for f in futures]                # re-raises any request's error
    kinds = {k: sum(1 for r in results if r[0] == k) for k in ("plain", "stream", "cancelled")}
    assert kinds == {"plain": 50, "stream": 40, "cancelled": 10}, kinds
    short = [(k, want, got) for k, want, got in results if k != "cancelled" and got != want]
    assert not short, short
    assert urllib.request.urlopen(base + "/health", timeout=30).status == 200
    deadline = time.time() + 60                            # aborts reach the engine asynchronously
    while True:
        left = (metric(base, "vllm:num_requests_running"), metric(base, "vllm:num_requests_waiting"),
                metric(base, "vllm:kv_cache_usage_perc"))
        ran = finished_by_length(base) - before
        if (left == (0, 0, 0) and ran >= 90) or time.time() > deadline:
            break
        time.sleep(1)
    assert left == (0, 0, 0), f"running, waiting, KV-cache use after the soak: {left}"
    # The 90 others ran to max_tokens; the 10 cancelled (300 tokens asked)
    # were aborted, except any that finished before the disconnect reached
    # the engine (2 did once, on a loaded CI machine): most must have been.
    assert 90 <= ran <= 95, f"{ran} requests ran to max_tokens: want 90, and at most 5 of " \
                            "the 10 cancelled ones finishing before their abort"
