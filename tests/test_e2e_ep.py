"""Expert parallelism on the real CPU engine.  Upstream's own layouts first,
the spread every EP row of ours is judged against: `-tp 2
--enable-expert-parallel` (each rank holds half the experts and runs only
the routes to them: patch cpu-moe-honours-expert-map; without it the CPU
kernel indexed its weights by global expert ids and the worker died).  MoE
under data parallelism, whose dispatch gathers over the replicas
(cpu-communicator-gathers-unequal-parts), is test_e2e_scaleout's
`-dp 2 -sp 2` on this model."""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.models import make_model
from harness.workload import check_prefix_cache, run

pytestmark = pytest.mark.e2e


def test_upstream_tp2_expert_parallel(models_dir, family_ref):
    """Qwen3-MoE (4 experts, top-2) at `-tp 2 --enable-expert-parallel`:
    two experts a rank, the workload (chunked prefill, prefix-cache hits)
    equal to transformers, as TP=1 is (test_e2e_sp)."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    got = run(model, tp=2, enable_expert_parallel=True)
    assert_same(family_ref(model), got, what="Qwen3-MoE -tp 2 with EP vs transformers")
    check_prefix_cache(got)
