"""Ulysses SP next to vLLM's own scale-out axes on the real CPU engine:
pipeline parallelism (SP inside each stage) through vLLM's multi-node launch
with two node ranks on loopback (SP inside a node, PP across nodes), and data
parallelism (`vllm serve -dp 2 -sp 2 --enable-expert-parallel` of a MoE
model: two SP replicas on one node, requests spread over both, the experts
split over all four ranks), and upstream's `-dp 2 -tp 2` with EP of a MoE
block our patches make sequence-parallel (GLM-4.5), each equal to TP=1.  The servers' reference is
transformers' greedy tokens and logprobs (TP=1 equals transformers:
test_e2e_sp).

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
import re

import pytest

from harness.client import post, samples
from harness.compare import hf_run
from harness.models import make_model
from harness.net import free_port
from harness.server import serve
from harness.workload import PROMPTS

pytestmark = pytest.mark.e2e


SERVED = [p[:30] for p in PROMPTS if len(p) >= 7] * 2 + [[7, 8, 9], [400, 3]]
SERVE_ARGS = ["--max-model-len", "512", "--enforce-eager", "--dtype", "float32", "--seed", "0"]


@pytest.fixture(scope="module")
def served_ref(llama):
    """SERVED in transformers: the tokens and logprobs every server must give."""
    return hf_run(llama, [SERVED], max_tokens=8, prompt_logprobs=False)


@pytest.fixture(scope="module")
def moe(models_dir):
    return make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)


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
    (a headless second node with `--data-parallel-start-rank`, or hybrid load
    balancing) adds upstream's engine handshake to the per-node rank layout
    shown here and the replicas' layout of test_data_parallel_sp."""
    common = ["-pp", "2", "-sp", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
              "--master-port", str(free_port()), *SERVE_ARGS]
    with serve(llama, common + ["--node-rank", "0"], tmp_path / "server.log", ranks=4,
               headless=[common + ["--node-rank", "1"]]) as base:
        tokens, logprobs = complete_all(base, llama)
    assert_served_like(served_ref, tokens, logprobs, "two nodes, PP=2 x SP=2 vs the reference")


def serve_two_replicas_with_ep(model, layout: list[str], tmp_path, what: str) -> dict[str, float]:
    """`vllm serve -dp 2 LAYOUT --enable-expert-parallel` on four ranks: SERVED
    answered like transformers, one expert of four a rank, both replicas
    serving; the requests each replica finished.  One API server, which
    balances over both replicas (vLLM starts one a replica by default: a
    process more to start, and nothing these rows check)."""
    ref = hf_run(model, [SERVED], max_tokens=8, prompt_logprobs=False)
    args = ["-dp", "2", *layout, "--enable-expert-parallel", "--api-server-count", "1",
            "--data-parallel-rpc-port", str(free_port()), *SERVE_ARGS]
    with serve(model, args, tmp_path / "server.log", ranks=4) as base:
        tokens, logprobs = complete_all(base, model)
        served = served_per_engine(base)
    assert_served_like(ref, tokens, logprobs, f"{what} with EP vs the reference")
    held = re.findall(r"Local/global number of experts: (\d+)/(\d+)",
                      (tmp_path / "server.log").read_text())
    assert held and set(held) == {("1", "4")}, held     # (one line an engine)
    assert set(served) == {"0", "1"} and all(served.values()), served
    return served


def test_data_parallel_sp(moe, tmp_path):
    """vLLM's data parallelism with an SP=2 engine per replica (`-dp 2 -sp 2
    --enable-expert-parallel`, 4 ranks on one node, internal load balancing)
    of Qwen3-MoE: each replica builds its own SP groups, the expert-parallel
    group is all four ranks (one expert each), its MoE layers dispatch the
    tokens of both replicas' SP ranks and hand each its own back (the
    all_gatherv and reduce_scatterv of patch
    cpu-communicator-gathers-unequal-parts: upstream's CPU communicator had
    neither, and MoE with -dp failed at its first step), and the server
    answers like TP=1 from both replicas.  DP across nodes (hybrid load
    balancing: 8 ranks, 3 minutes on the 2-core CI machine) adds upstream's
    handshake between the nodes, not run here."""
    served = serve_two_replicas_with_ep(moe, ["-sp", "2"], tmp_path, "MoE, DP=2 x SP=2")
    assert sum(served.values()) == len(SERVED), served


def test_upstream_data_parallel_tp_expert_parallel(models_dir, tmp_path):
    """Upstream's own DP x TP with EP (`-dp 2 -tp 2 --enable-expert-parallel`,
    no SP) of GLM-4.5: the layout whose MoE block the patch
    glm4-moe-sequence-parallel-moe makes sequence-parallel (upstream's
    use_sequence_parallel_moe: each TP rank dispatches its 1/TP of the
    tokens, the shared expert unsharded on them, the rows gathered back over
    TP), one expert of 4 a rank; the server answers like transformers from
    both replicas.  Granite 4.0-H's block (granitemoehybrid-sequence-
    parallel-moe) reads the same flag, which SP with EP turns on too: it
    runs under Shift with EP in test_e2e_mamba."""
    model = make_model(models_dir, "glm4_moe")
    serve_two_replicas_with_ep(model, ["-tp", "2"], tmp_path, "glm4_moe, DP=2 x TP=2")
