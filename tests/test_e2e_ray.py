"""Ulysses SP on vLLM's Ray executors, on the real CPU engine: a local Ray
head on loopback (started for this module, `ray stop` after:
harness.ray_cluster), engines with `distributed_executor_backend="ray"`,
each equal to TP=1 (as transformers: test_e2e_sp) on the workload with 4
tokens a request (harness.workload.SHORT).

Both Ray executors: RayExecutorV2 (vLLM 0.26's default: Ray actors, the
multiprocessing executor's message queues) and the compiled-graph executor
(VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0), whose DAG feeds each PP stage's TP x SP
ranks (patch ray-executors-count-sp-ranks).  On CPU each rank's
placement-group bundle holds one of the CPUs Ray counts (patch
platform-cpu-runs-ray-executors); Ray is told 4 so that 4 ranks fit on a
2-core machine, where they share cores as under the multiprocessing executor.

PP=2 x SP=2 on V2 runs in test_e2e_ray_nodes, across two Ray nodes (the
same executor and layout, with the node placement on top)."""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.ray_cluster import LOOPBACK, check_ray_ranks, ray_nodes
from harness.workload import SHORT, check_prefix_cache, run

pytestmark = pytest.mark.e2e

RAY_CPUS = 4


@pytest.fixture(scope="module")
def ray_cluster():
    """A one-node Ray cluster on 127.0.0.1; yields the engine's env."""
    with ray_nodes(("127.0.0.1", RAY_CPUS), env=LOOPBACK) as env:
        yield env


# The heaviest layouts, no duplicates: TP x SP (the full-TP group's order)
# on V2, the default; PP x SP on the compiled-graph executor, whose DAG is
# built per stage.  (Plain SP=2 is inside both.)
# Not a core test: on the other releases CI's minutes go to the SP and
# Shift engines (Ray there: ci/test.sh --version V -k ray).
@pytest.mark.parametrize("executor,tp,sp,pp", [
    ("v2", 2, 2, 1),
    ("compiled-graph", 1, 2, 2),
])
def test_sp_on_ray(llama, llama_short_ref, ray_cluster, executor, tp, sp, pp):
    env = {**ray_cluster,
           "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "1" if executor == "v2" else "0"}
    got = run(llama, tp=tp, sp=sp, pipeline_parallel_size=pp,
              distributed_executor_backend="ray", env=env, **SHORT)
    check_ray_ranks(got.log, "RayWorkerProc" if executor == "v2" else "RayWorkerWrapper", tp, sp,
                    pp)
    assert_same(llama_short_ref, got, what=f"Ray ({executor}) PP={pp} x TP={tp} x SP={sp} vs HF")
    check_prefix_cache(got)
