"""The OpenAI-compatible server started with `-sp 2 --shift-parallel` (CPU
engine; prefills run in SP, decodes in full TP): a completion that equals
the offline TP=1 engine's greedy output, a streamed chat completion, the
per-mode step counters on /metrics, and a bad request that fails alone while
the server keeps serving."""

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

import pytest
from harness.engine import cpu_env, run_engine
from harness.models import make_model

pytestmark = pytest.mark.e2e

THRESHOLD = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 120):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


@pytest.fixture(scope="module")
def model(models_dir):
    return make_model(models_dir, "llama", heads=8, kv_heads=2)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {**os.environ, **cpu_env(2), "VLLM_LOGGING_LEVEL": "INFO"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
             "-sp", "2", "--shift-parallel", "--shift-parallel-threshold", str(THRESHOLD),
             "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "512",
             "--enforce-eager", "--dtype", "float32", "--seed", "0"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
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
        yield base, log
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_server_runs_sp2_with_shift(server):
    _, log = server
    text = log.read_text()
    assert "Ulysses SP: rank 0 is SP rank 0 of 2" in text
    assert "Worker_SP1" in text
    assert "Shift parallelism: full-TP model (TP=2) loaded beside the SP model" in text


def shift_counters(base: str) -> dict[tuple[str, str], float]:
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        for what in ("steps", "tokens"):
            if line.startswith(f"vllm:shift_parallel_{what}_total{{"):
                mode = line.split('mode="')[1].split('"')[0]
                out[(what, mode)] = float(line.rsplit(" ", 1)[1])
    return out


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
