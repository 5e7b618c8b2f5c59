"""Mamba-2 hybrids under SP and Shift on the real CPU engine (ulysses_mamba):
Nemotron-H (Mamba-2, attention and MLP layers), Granite 4.0-H (Mamba-2 and
attention layers, each with MoE and a shared expert), Falcon-H1 (attention
and Mamba-2 side by side in every layer), Zamba2 (Mamba-2 layers, two of
them each after a transformer block shared between layers, with per-layer
LoRA adapters and KV caches), each equal to TP=1 on the workload (chunked
prefill carries the conv and SSM states from chunk to chunk), each at SP=2
and under Shift at TP=2 x SP=2.

Groups: Nemotron-H's 4 split over the GPUs (two a GPU at SP=2, one at
TP=2 x SP=2); Granite's, Falcon's and Zamba2's one group is repeated to every GPU
(upstream replicates it to every TP rank; SP sends it to each SP rank of
its heads).  Shift at TP=2 x SP=2 writes states in SP steps that full-TP
steps read, and back: both models' Mamba layers hold the same state
tensors.
"""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.models import make_mamba2
from harness.workload import check_expert_placement, run

pytestmark = pytest.mark.e2e

SHIFT = dict(shift_parallel=True, shift_parallel_threshold=8)


FAMILIES = {"nemotron_h": 4, "granitemoehybrid": 1, "falcon_h1": 1, "zamba2": 1}  # -> groups
NAMES = {"nemotron_h": "Nemotron-H", "granitemoehybrid": "Granite 4.0-H", "falcon_h1": "Falcon-H1",
         "zamba2": "Zamba2"}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, models_dir):
    """A family's checkpoint and its TP=1 run, shared by its layouts."""
    model = make_mamba2(models_dir, request.param, groups=FAMILIES[request.param])
    return request.param, model, run(model, **_upstream(request.param))


def _upstream(arch: str) -> dict:
    """Zamba2 without prefix caching: vLLM 0.32's fails at TP=1 on the
    workload in Mamba "align" mode (an index past the chunk states in the
    prefill's conv path), and 0.33 no longer offers it for Zamba2."""
    return dict(enable_prefix_caching=False) if arch == "zamba2" else {}


def _ep(arch: str) -> dict:
    """Granite 4.0-H's MoE runs expert parallel over every GPU."""
    return dict(enable_expert_parallel=True) if arch == "granitemoehybrid" else {}


def test_sp2(family):
    arch, model, ref = family
    got = run(model, sp=2, **_ep(arch), **_upstream(arch))
    assert_same(ref, got, what=f"{NAMES[arch]} SP=2 vs TP=1")


def test_shift_tp2_sp2(family):
    """SP steps at TP=2 x SP=2, full-TP steps at TP=4, one set of states."""
    arch, model, ref = family
    got = run(model, tp=2, sp=2, **_ep(arch), **_upstream(arch), **SHIFT)
    assert_same(ref, got, what=f"{NAMES[arch]} shift TP=2xSP=2 vs TP=1")
    check_states_shared(got, 4)
    if _ep(arch):
        check_expert_placement(model, got, 4)


def check_states_shared(r, world: int) -> None:
    """Both modes served steps on every rank alike, and the full-TP model's
    layers (attention and Mamba-2) hold the SP model's cache tensors."""
    assert len(r.shift) == world, r.shift
    for rank in r.shift:
        assert rank["same_tensors"] and rank["state_layers"] >= 1, rank
        assert rank["served"]["sp"] >= 3 and rank["served"]["full_tp"] >= 10, rank
    assert len({tuple(sorted(rank["served"].items())) for rank in r.shift}) == 1, r.shift
