"""Ulysses SP on a two-node Ray cluster, both nodes on this machine: Ray
nodes are raylets with their own addresses (127.0.0.2 and 127.0.0.3, both
loopback), and vLLM's Ray executor places ranks by Ray's node ids, so its
layout logic runs exactly as across machines (the bytes go over loopback).

PP=2 x SP=2 across the two nodes (SP inside each) on RayExecutorV2 equals
TP=1, as transformers, on the workload with 4 tokens a request (SHORT); this
is also the suite's PP x SP run on V2 (test_e2e_ray runs the other Ray
layouts on one node).  A TP x SP group that the placement group
had to split across the nodes is refused before any model is loaded, with
the bytes its all-to-alls would send (patch
ray-executors-keep-sp-groups-on-a-node).  Each node offers Ray 2 CPUs, so
a 4-rank engine fills both."""

from __future__ import annotations

import re

import pytest

from harness.compare import assert_same
from harness.ray_cluster import check_ray_ranks, ray_nodes
from harness.workload import SHORT, check_prefix_cache, run

pytestmark = pytest.mark.e2e

HEAD, OTHER = "127.0.0.2", "127.0.0.3"
# Ray's local-only mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) refuses a
# second node; with two addresses on loopback nothing leaves the machine.
# The engine's own sockets bind the head's address.
TWO_NODES = {"VLLM_HOST_IP": HEAD, "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def two_nodes():
    with ray_nodes((HEAD, 2), (OTHER, 2), env=TWO_NODES) as env:
        yield env


def test_pp_across_nodes_sp_within(llama, llama_short_ref, two_nodes):
    got = run(llama, sp=2, pipeline_parallel_size=2, distributed_executor_backend="ray",
              env={**two_nodes, "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "1"}, **SHORT)
    check_ray_ranks(got.log, "RayWorkerProc", tp=1, sp=2)
    # Local ranks count a node's ranks (V2 numbers them per Ray node id):
    # ranks 2, 3 start again at 0 on the second node.  (Ray's log prefixes
    # cannot tell: both nodes' log monitors read this machine's worker logs.)
    local = dict(re.findall(r"world_size=4 rank=(\d) local_rank=(\d)", got.log))
    assert local == {"0": "0", "1": "1", "2": "0", "3": "1"}, got.log[-3000:]
    assert_same(llama_short_ref, got, what="Ray, 2 nodes: PP=2 across x SP=2 within vs HF")
    check_prefix_cache(got)


@pytest.mark.parametrize("executor", ["v2", "compiled-graph"])
def test_sp_group_split_across_nodes_refused(llama, two_nodes, executor):
    env = {**two_nodes, "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "1" if executor == "v2" else "0"}
    with pytest.raises(RuntimeError) as excinfo:
        run(llama, tp=2, sp=2, distributed_executor_backend="ray", env=env, timeout=300)
    lines = [line for line in str(excinfo.value).splitlines()
             if "Ray placed the TP x SP group 0 (4 ranks each) on more than one node" in line]
    assert lines and "VLLM_SP_ALLOW_CROSS_NODE=1" in lines[0], str(excinfo.value)[-3000:]
    assert "Loading weights" not in str(excinfo.value)
