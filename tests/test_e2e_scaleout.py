"""Ulysses SP next to vLLM's own scale-out axes on the real CPU engine:
pipeline parallelism (SP inside each stage) and data parallelism through
`vllm serve -dp 2 -sp 2` (each replica a TP x SP group, requests spread
over both), each equal to TP=1.

Between pipeline stages the intermediate tensors carry the whole padded
step, not this SP rank's slice: the model wrapper gathers a stage's output
over SP and slices the next stage's input (ulysses.shard_model_tokens), so
the runners' stage buffers, dummy runs and graph capture stay upstream's."""

from __future__ import annotations

import concurrent.futures as cf
import json
import urllib.request

import pytest
from harness.compare import assert_same
from harness.engine import run_engine
from harness.server import post, serve
from test_e2e_sp import PROMPTS, check_prefix_cache, run

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("tp,sp", [(1, 2), (2, 1)])
def test_pipeline_stages(llama, llama_ref, tp, sp):
    """PP=2 with SP=2 inside each stage, and upstream's PP=2 x TP=2 (the
    same 4-rank grid without SP) as the control."""
    got = run(llama, tp=tp, sp=sp, pipeline_parallel_size=2)
    assert_same(llama_ref, got, what=f"PP=2 x TP={tp} x SP={sp} vs TP=1")
    check_prefix_cache(got)


def test_data_parallel_server(llama, tmp_path):
    """`vllm serve -dp 2 -sp 2` (internal load balancing, 4 ranks): ten
    concurrent greedy completions equal TP=1's, and both replicas served."""
    prompts = [p[:30] for p in PROMPTS if len(p) >= 7] * 2 + [[7, 8, 9], [400, 3]]
    with serve(llama, ["-dp", "2", "-sp", "2", "--max-model-len", "512", "--enforce-eager",
                       "--dtype", "float32", "--seed", "0"], tmp_path / "server.log",
               ranks=4) as base:

        def complete(ids):
            body = json.load(post(base + "/v1/completions", {
                "model": str(llama), "prompt": ids, "max_tokens": 8, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True}, timeout=300))
            return body["choices"][0]["token_ids"]

        with cf.ThreadPoolExecutor(len(prompts)) as pool:
            got = list(pool.map(complete, prompts))
        metrics = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    ref = run_engine(llama, prompts, max_tokens=8, prompt_logprobs=False)
    assert got == ref.tokens
    served = {}
    for line in metrics.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="length"' in line:
            engine = line.split('engine="')[1].split('"')[0]
            served[engine] = float(line.rsplit(" ", 1)[1])
    assert set(served) == {"0", "1"} and all(served.values()), served
    assert sum(served.values()) == len(prompts), served
