"""Expert parallelism on the real CPU engine.  Upstream's own layout first,
the spread every EP row of ours is judged against: `-tp 2
--enable-expert-parallel` (each rank holds half the experts and runs only
the routes to them: patch cpu-moe-honours-expert-map; without it the CPU
kernel indexed its weights by global expert ids and the worker died).  Then
EP over the SP ranks (ulysses_moe): one Shift engine at TP=2 x SP=2 covers
the SP model's dispatch over all four ranks (TP x SP, with the TP split),
the full-TP model's plain EP, and their sharing one set of experts; DP x SP
with EP is test_e2e_scaleout's `-dp 2 -sp 2`."""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.models import make_model
from harness.workload import check_prefix_cache, run

EXPERTS = 4

pytestmark = pytest.mark.e2e


def test_upstream_tp2_expert_parallel(models_dir, family_ref):
    """Qwen3-MoE (4 experts, top-2) at `-tp 2 --enable-expert-parallel`:
    two experts a rank, the workload (chunked prefill, prefix-cache hits)
    equal to transformers, as TP=1 is (test_e2e_sp)."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    got = run(model, tp=2, enable_expert_parallel=True)
    assert_same(family_ref(model), got, what="Qwen3-MoE -tp 2 with EP vs transformers")
    check_prefix_cache(got)
    check_placement(got, 2)


def check_placement(r, ranks: int) -> None:
    """Every MoE layer holds EXPERTS / ranks experts on each GPU, each expert
    on exactly one GPU, and Shift's full-TP model the very tensors of the SP
    model's (the routed experts' storage counted once over both models is
    the SP layer's: 1.0; a copy would make it 2.0).  Replicated over the SP
    ranks, as without this placement, a GPU would hold EXPERTS / TP."""
    assert len(r.experts) == ranks, r.experts
    by_layer: dict[str, list[int]] = {}
    for rank in r.experts:
        assert rank["layers"], rank
        for layer in rank["layers"]:
            assert layer["of"] == EXPERTS and len(layer["held"]) == EXPERTS // ranks, layer
            assert layer["together"] == 1.0, layer
            by_layer.setdefault(layer["layer"], []).extend(layer["held"])
    for name, held in by_layer.items():
        assert sorted(held) == list(range(EXPERTS)), (name, held)


def test_shift_tp2_sp2_expert_parallel(models_dir, family_ref):
    """`-tp 2 -sp 2 --shift-parallel --enable-expert-parallel`, threshold 8
    so that both models serve: one expert a GPU, the workload equal to
    transformers in both modes, prefix-cache hits across them."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    got = run(model, tp=2, sp=2, enable_expert_parallel=True, shift_parallel=True,
              shift_parallel_threshold=8)
    assert_same(family_ref(model), got, what="Qwen3-MoE shift TP=2xSP=2 with EP vs transformers")
    check_prefix_cache(got)
    served = [rank["served"] for rank in got.shift]
    assert all(s["sp"] >= 4 and s["full_tp"] >= 10 for s in served), served
    check_placement(got, 4)
