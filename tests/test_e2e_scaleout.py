"""Ulysses SP next to vLLM's own scale-out axes on the real CPU engine:
pipeline parallelism (SP inside each stage), and data parallelism through
vLLM's multi-node launch with two node ranks on loopback (SP inside a node,
PP across nodes, and DP across them with hybrid load balancing, where each
node is a `vllm serve -dp 2 -sp 2` spreading requests over its two replicas),
each equal to TP=1.  The servers' reference is transformers' greedy tokens
and logprobs (TP=1 equals transformers: test_e2e_sp).

Between pipeline stages the intermediate tensors carry the whole padded
step, not this SP rank's slice: the model wrapper gathers a stage's output
over SP and slices the next stage's input (ulysses_model.shard_model_tokens), so
the runners' stage buffers, dummy runs and graph capture stay upstream's.

PP=2 x SP=2 on the offline workload (chunked prefill, prefix-cache hits)
runs on both Ray executors (test_e2e_ray's compiled-graph engine, and
test_e2e_ray_nodes' RayExecutorV2 engine, whose ranks are the
multiprocessing executor's workers); on the multiprocessing executor
itself it runs here, across two node ranks."""

from __future__ import annotations

import concurrent.futures as cf
import json

import pytest

from harness.client import post, samples
from harness.compare import hf_run
from harness.net import free_port
from harness.server import serve, serve_nodes
from harness.workload import PROMPTS

pytestmark = pytest.mark.e2e


SERVED = [p[:30] for p in PROMPTS if len(p) >= 7] * 2 + [[7, 8, 9], [400, 3]]
SERVE_ARGS = ["--max-model-len", "512", "--enforce-eager", "--dtype", "float32", "--seed", "0"]


@pytest.fixture(scope="module")
def served_ref(llama):
    """SERVED in transformers: the tokens and logprobs every server must give."""
    return hf_run(llama, [SERVED], max_tokens=8, prompt_logprobs=False)


def complete_all(base: str, model) -> tuple[list[list[int]], list[list[float]]]:
    """SERVED, all at once: greedy token ids and their logprobs."""
    def complete(ids):
        body = json.load(post(base + "/v1/completions", {
            "model": str(model), "prompt": ids, "max_tokens": 8, "temperature": 0.0,
            "ignore_eos": True, "return_token_ids": True, "logprobs": 1}, timeout=300))
        choice = body["choices"][0]
        return choice["token_ids"], choice["logprobs"]["token_logprobs"]

    with cf.ThreadPoolExecutor(len(SERVED)) as pool:
        got = list(pool.map(complete, SERVED))
    return [g[0] for g in got], [g[1] for g in got]


def served_per_engine(base: str) -> dict[str, float]:
    """Requests finished per engine (DP replica), from /metrics."""
    return {labels["engine"]: value for labels, value in samples(base, "vllm:request_success_total")
            if labels.get("finished_reason") == "length"}


def assert_served_like(ref, tokens, logprobs, what):
    assert tokens == ref.tokens, what
    worst = max(abs(a - b) for x, y in zip(ref.logprobs, logprobs) for a, b in zip(x, y))
    assert worst <= 2e-3, f"{what}: logprobs differ by {worst:.1e}"


def test_two_nodes(llama, served_ref, tmp_path):
    """vLLM's multi-node launch with two node ranks on one machine (the
    second `--headless`), SP=2 inside each node and PP=2 across them
    (`--nnodes 2 --node-rank R`): concurrent greedy completions equal
    TP=1's.  PP across nodes needs patch
    executor-node-ranks-by-local-world-size (a node's ranks are its
    launch's ranks per node, not its device count).  DP across node ranks
    runs in test_hybrid_load_balancing (a DP=2 headless second node adds
    only upstream's engine handshake to it)."""
    common = ["-pp", "2", "-sp", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
              "--master-port", str(free_port()), *SERVE_ARGS]
    with serve(llama, common + ["--node-rank", "0"], tmp_path / "server.log", ranks=4,
               headless=[common + ["--node-rank", "1"]]) as base:
        tokens, logprobs = complete_all(base, llama)
    assert_served_like(served_ref, tokens, logprobs, "two nodes, PP=2 x SP=2 vs the reference")


def test_hybrid_load_balancing(llama, served_ref, tmp_path):
    """vLLM's hybrid DP load balancing (`--data-parallel-hybrid-lb`): DP=4
    over two node ranks on loopback, two SP=2 replicas per node, each node
    its own API server spreading requests over its local replicas (8 ranks):
    each node is the single-node `vllm serve -dp 2 -sp 2` with internal load
    balancing, plus the DP ranks of a second node.  Both servers answer like
    TP=1, each from both of its own replicas and from no other.
    (External load balancing, one server per replica, is refused by vLLM
    0.26 for dense models: its advice is independent servers.)"""
    common = ["-dp", "4", "-sp", "2", "--data-parallel-hybrid-lb",
              "--data-parallel-size-local", "2", "--data-parallel-address", "127.0.0.1",
              "--data-parallel-rpc-port", str(free_port()), *SERVE_ARGS]
    with serve_nodes(llama, [common, common + ["--data-parallel-start-rank", "2"]],
                     tmp_path / "server.log", ranks=8) as bases:
        for base, replicas in zip(bases, [{"0", "1"}, {"2", "3"}]):
            tokens, logprobs = complete_all(base, llama)
            served = served_per_engine(base)
            assert_served_like(served_ref, tokens, logprobs,
                               f"hybrid LB via {base} vs the reference")
            assert set(served) == replicas and all(served.values()), served
            assert sum(served.values()) == len(SERVED), served
