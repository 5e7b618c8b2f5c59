"""The OpenAI-compatible server started with `-sp 2 --shift-parallel` and
n-gram speculative decoding (CPU engine; prefills run in SP, decodes and
their verify steps in full TP): a completion that equals transformers'
greedy output (as TP=1's: test_e2e_sp), drafts proposed and accepted on
/metrics for a repetitive prompt, a streamed chat completion, the per-mode
step counters on /metrics, a bad request that fails alone while the server
keeps serving, and a soak of ~100 mixed requests with client
cancellations."""

from __future__ import annotations

import json
import time
import urllib.error

import pytest

from harness.client import Soak, post, run_soak, samples
from harness.compare import hf_greedy
from harness.server import serve

pytestmark = pytest.mark.e2e

THRESHOLD = 8
NGRAM = ('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, '
         '"prompt_lookup_min": 2}')


@pytest.fixture(scope="module")
def model(llama):
    return llama


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "server.log"
    with serve(model, ["-sp", "2", "--shift-parallel", "--shift-parallel-threshold",
                       str(THRESHOLD), "--speculative-config", NGRAM,
                       "--max-model-len", "512", "--enforce-eager",
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


def test_completion_matches_transformers(server, model):
    from transformers import AutoTokenizer

    base, _ = server
    prompt = "w5 w9 w33 w7 w101 w2"
    body = json.load(post(base + "/v1/completions", {
        "model": str(model), "prompt": prompt, "max_tokens": 6, "temperature": 0.0,
        "ignore_eos": True}))
    assert body["usage"]["completion_tokens"] == 6
    tok = AutoTokenizer.from_pretrained(model)
    ids = tok(prompt)["input_ids"]
    ref = hf_greedy(model, [ids], 6)
    assert body["choices"][0]["text"].split() == tok.decode(ref[0]).split()


def spec_counters(base: str) -> tuple[float, float]:
    return tuple(sum(v for _, v in samples(base, f"vllm:spec_decode_num_{what}_total"))
                 for what in ("draft_tokens", "accepted_tokens"))


def test_speculation_matches_transformers(server, model):
    """A prompt that repeats itself: n-gram lookup drafts from it, the
    full-TP verify steps accept some, and the text is transformers' greedy
    output all the same."""
    from transformers import AutoTokenizer

    base, _ = server
    prompt = " ".join(["w27 w28 w29 w30"] * 12)
    before = spec_counters(base)
    body = json.load(post(base + "/v1/completions", {
        "model": str(model), "prompt": prompt, "max_tokens": 16, "temperature": 0.0,
        "ignore_eos": True}))
    tok = AutoTokenizer.from_pretrained(model)
    ref = hf_greedy(model, [tok(prompt)["input_ids"]], 16)
    assert body["choices"][0]["text"].split() == tok.decode(ref[0]).split()
    deadline = time.time() + 30           # stats reach the frontend after the output
    while True:
        drafted, accepted = (a - b for a, b in zip(spec_counters(base), before))
        if accepted > 0 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert drafted > 0 and accepted > 0, (drafted, accepted)


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


def test_soak(server, model):
    """100 mixed requests, 16 at a time, half streamed, 10% dropped by the
    client mid-stream (CI's small version of the GPU soak, the same client:
    harness.client.run_soak): no errors, no hang (a watchdog bounds it),
    every finished request has the tokens it asked for, and afterwards the
    server is healthy with no request left running and every KV-cache block
    free again."""
    base, _ = server
    soak = Soak(requests=100, concurrency=16, prompt_words=(2, 160), max_tokens=(1, 24),
                cancel_tokens=300, word=lambda i: f"w{i}", vocab=(3, 400))
    summary = run_soak(base, str(model), soak)
    assert summary["kinds"] == {"plain": 50, "stream": 40, "cancelled": 10}, summary
    assert not summary["problems"], summary["problems"]
