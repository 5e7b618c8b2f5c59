"""Ulysses SP and Shift on a hybrid Gated-DeltaNet model (Qwen3-Next: GDN
linear attention and gated full attention, MoE) on the real vLLM CPU engine:
every layout gives TP=1's greedy tokens and prompt logprobs, or in
bfloat16 those of the upstream layout it computes like.

bfloat16, as the CPU GDN kernels take nothing else, with the recurrent
state in float32 (``mamba_ssm_cache_dtype``, harness.models.GDN_F32) on
every release: 0.26's CPU chunk kernel takes nothing else, and on 0.32 a
bf16 state rounds once more per step, which put Shift 1.5% beyond its bound
(the families' and speculative tests run 0.32's hybrids with the bf16 state).
In bfloat16 the layouts that all-reduce over TP ranks sum in another
order than TP=1, and on this random model a near-tie flips some greedy
continuations; and the CPU GDN kernels may round otherwise with fewer
heads per rank (on an AMX host upstream's own TP=4, one linear key head
per rank, departs from TP=1: docs/reliability.md).  So
each layout is held to the upstream layouts whose per-rank products it
computes: SP=2 (TP=1's projections, TP=2's heads per rank) to TP=1 bit for
bit on 0.26, as it is on every host seen (0.32: TP=1's tokens, logprobs
within 1e-3); Shift at TP=2 x SP=2, whose SP steps run
TP=2's projections on TP=4's GDN heads per rank and whose decodes are
upstream's TP=4, no further from TP=2 than TP=4 is and no further from
TP=4 than TP=2 is (harness.compare.assert_between).

The workload is harness.workload's: odd lengths (steps padded to a multiple
of SP), a prompt longer than the 64-token step (chunked prefill, the GDN
state carried from chunk to chunk), mixed prefill/decode steps, and prompts
that hit the prefix cache (in Mamba 'align' mode: cached GDN states at
block boundaries).  Each layout's engine is started once and shared.
"""

from __future__ import annotations

import pytest

from harness.compare import assert_between, assert_no_further, assert_same
from harness.models import GDN_F32, make_qwen3_next
from harness.repo import VERSION
from harness.workload import check_expert_placement, check_prefix_cache, run

pytestmark = pytest.mark.e2e


def check_hits(r):
    """0.26: the workload's prefix-cache check.  0.32's Mamba 'align' mode
    restores a GDN state only at the layout's own block boundaries (vLLM
    sizes the block so that its KV page holds a layer's state per GPU, so
    the size differs by layout): fewer hits, on other prompts per layout
    (tokens cached of [LONG] again and THEN's two: TP=1 and TP=2 [96, 96, 0],
    TP=4 and Shift [128, 0, 64]).  There: the repeated long prompt and one
    of THEN's prompts restore a state."""
    if VERSION == "0.26.0":
        check_prefix_cache(r)
    else:
        c = r.cached_tokens
        assert c[-3] >= 64 and max(c[-2:]) >= 64, c


@pytest.fixture(scope="module")
def model(models_dir):
    return make_qwen3_next(models_dir)


@pytest.fixture(scope="module")
def tp1(model):
    r = run(model, **GDN_F32)
    check_hits(r)
    return r


# The most two upstream bfloat16 layouts of this model may differ before
# their greedy tokens depart (prompt and generated logprobs), on the AVX2
# kernel path the suite pins on every host (harness/cpu_path.py): TP=2 0.38
# and TP=4 0.36 from TP=1 (AVX-512 host, 2026-11-26); a TP=2 whose ranks
# read each other's GDN decay parameters (A_log, dt_bias) 1.42.  A figure of
# upstream's kernels, so it holds only on the pinned path: on an AMX host's
# own path upstream's TP=2 was 1.16 from TP=1.
BF16_SPREAD = 0.75


@pytest.fixture(scope="module")
def tp2(model):
    return run(model, tp=2, **GDN_F32)


@pytest.fixture(scope="module")
def tp4(model):
    """Upstream's TP=4: one linear key head, two value heads per rank."""
    return run(model, tp=4, **GDN_F32)


def test_tp2_is_a_fair_bound(tp1, tp2):
    """Upstream's TP=2 stays within a bf16-sized distance of TP=1, departs
    only at near-ties, and keeps some prompts' tokens whole."""
    check_hits(tp2)
    kept = [i for i, (x, y) in enumerate(zip(tp1.tokens, tp2.tokens)) if x == y]
    assert kept, (tp1.tokens, tp2.tokens)
    assert_no_further(tp1, BF16_SPREAD, tp2, what="TP=2 vs TP=1")


# SP=2 against TP=1: bit for bit on 0.26.  0.32's CPU GDN kernel sums a
# float32 state in another order with half the heads per rank (on the pinned
# AVX2 path: 4.7e-4 at most, 2026-11-27, AVX-512 host), the tokens the same.
SP2_ATOL = 0.0 if VERSION == "0.26.0" else 1e-3


def test_sp2(model, tp1):
    got = run(model, sp=2, **GDN_F32)
    assert_same(tp1, got, atol=SP2_ATOL, what="SP=2 vs TP=1")
    check_hits(got)


def test_shift_tp2_sp2(model, tp2, tp4):
    """Shift at TP=2 x SP=2, threshold 8: prefill and mixed steps run SP
    (each GPU: TP=2's projections, 1 of 4 linear key heads and 2 of 8 value
    heads, one KV head of attention replicated to both SP ranks), decodes
    full TP=4, so GDN states written in one mode are read in the other;
    both models' layers hold the same conv and recurrent state tensors (the
    SP view's state is laid out as full-TP rank t*SP+s's).

    Block size: vLLM sizes the attention block so that a page holds a GDN
    layer's state per GPU; here and at TP=4 that is 16 tokens on 0.26 (TP=2: 32),
    so prefix hits restore states at TP=4's boundaries.

    From 0.32 with expert parallelism (ulysses_moe): one of 4 experts a GPU,
    the shared expert beside them, in both models."""
    ep = VERSION != "0.26.0"
    got = run(model, tp=2, sp=2, shift_parallel=True, shift_parallel_threshold=8,
              enable_expert_parallel=ep, **GDN_F32)
    assert_between(tp2, tp4, got, what="shift TP=2xSP=2 between TP=2 and TP=4")
    if ep:
        check_expert_placement(model, got, 4)
    check_hits(got)
    assert len(got.shift) == 4
    for rank in got.shift:
        assert rank["layers"] == 4 and rank["state_layers"] == 2, rank
        assert rank["same_tensors"], rank
        assert rank["served"]["sp"] >= 4 and rank["served"]["full_tp"] >= 10, rank
    assert len({tuple(sorted(rank["served"].items())) for rank in got.shift}) == 1, got.shift
