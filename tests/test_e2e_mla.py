"""Multi-head latent attention (MLA: DeepSeek-V3, Kimi K2) under SP and
Shift on the real CPU engine, float32: every layout equals transformers on
the workload, as TP=1 does.

A tiny random DeepSeek-V3 (harness.models ``deepseek_v3``): q LoRA, a
latent of 576 per token (the CPU decode kernel's only size), 4 query heads,
YaRN positions as DeepSeek-V3 publishes them, a dense first layer, then MoE
with a shared expert and grouped top-k; SP=2 runs a DeepSeek-V2-Lite-shaped
one instead (``deepseek_v2``: no q LoRA), in the same number of engines.
Upstream's own TP=2 is the spread, and it equals transformers too (it did
not before the fix ``cpu-rope-rotates-strided-heads``: 0.78 in prompt
logprobs with dense layers alone).  SP=2 attends with 2 heads a GPU over
the gathered latent; Shift at TP=2 x SP=2 with expert parallelism runs its
SP steps with one head a GPU and TP=2's projections, its decodes in full
TP=4, over one latent cache, one of the 4 experts a GPU.

The engine runs vLLM's reference CPU MLA backend (pinned: an AMX host would
pick its AMX backend) with blocks of 16 (the decode kernel's); the CPU
platform turns chunked prefill and the prefix cache off for MLA, so the
workload's long prompt is one step and its later batches hit nothing.
"""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.drafters import make_deepseek_mtp
from harness.engine import run_engine
from harness.models import make_model
from harness.workload import LONG, PROMPTS, check_expert_placement, run

pytestmark = pytest.mark.e2e

MLA = dict(block_size=16, attention_config={"backend": "CPU_MLA"})


@pytest.fixture(scope="module")
def model(models_dir):
    return make_model(models_dir, "deepseek_v3", heads=4, kv_heads=4, hidden=256)


def test_upstream_tp2(model, family_ref):
    assert_same(family_ref(model), run(model, tp=2, **MLA), what="DeepSeek-V3 TP=2 vs HF")


def test_sp2_without_q_lora(models_dir, family_ref):
    """SP=2 on DeepSeek-V2-Lite's attention (no q LoRA: the queries from
    q_proj on the hidden state, YaRN with V2-Lite's mscale) in its own
    class, DeepseekV2ForCausalLM, greedy top-k MoE.  The q-LoRA model's SP
    steps are the Shift rows'."""
    lite = make_model(models_dir, "deepseek_v2", heads=4, kv_heads=4, hidden=256)
    assert_same(family_ref(lite), run(lite, sp=2, **MLA), what="DeepSeek-V2-Lite SP=2 vs HF")


def test_shift_sp2(model, family_ref):
    """Shift at SP=2 without EP: SP steps on TP=1's projections and MoE,
    decodes in full TP=2 on views of the same weights."""
    got = run(model, sp=2, shift_parallel=True, shift_parallel_threshold=8, **MLA)
    assert_same(family_ref(model), got, what="DeepSeek-V3 shift SP=2 vs HF")
    check_modes(got, 2)


def test_shift_tp2_sp2_expert_parallel(model, family_ref):
    got = run(model, tp=2, sp=2, shift_parallel=True, shift_parallel_threshold=8,
              enable_expert_parallel=True, **MLA)
    assert_same(family_ref(model), got, what="DeepSeek-V3 shift TP=2xSP=2 with EP vs HF")
    check_modes(got, 4)
    check_expert_placement(model, got, 4)


def test_mtp_under_shift(models_dir):
    """DeepSeek's MTP layer (MLA and MoE) drafting k=1 for its target under
    Shift at TP=2 x SP=2 with EP: the drafter's layer runs in the target's
    layout (the SP exchange, or full TP in full-TP steps); tokens and the
    drafted and accepted counts are TP=1's with the same MTP.  Its target
    has plain rotary positions: with YaRN's no draft of this random pair is
    accepted on the workload, and equal counts of none would check little."""
    target = make_model(models_dir, "deepseek_v3", heads=4, kv_heads=4, hidden=256, yarn=False)
    mtp = make_deepseek_mtp(models_dir, target)
    prompts = [([11, 12, 13, 14, 15] * 12)[:57], PROMPTS[1], [7, 8, 9], LONG]
    kw = dict(MLA, max_tokens=16, max_num_seqs=8,
              speculative_config=dict(method="mtp", num_speculative_tokens=1))
    ref = run_engine(mtp, prompts, **kw)
    got = run_engine(mtp, prompts, tp=2, sp=2, shift_parallel=True, shift_parallel_threshold=8,
                     enable_expert_parallel=True, **kw)
    assert_same(ref, got, what="DeepSeek MTP, TP=2xSP=2 shift with EP vs TP=1")
    assert got.spec == ref.spec and ref.spec["accepted"] > 0, (got.spec, ref.spec)
    served = [rank["served"] for rank in got.shift]
    assert all(s["sp"] >= 1 and s["full_tp"] >= 10 for s in served), served


def check_modes(r, world: int) -> None:
    """Both modes served steps on every rank alike, and the full-TP model's
    MLA layers hold the SP model's latent cache tensors."""
    assert len(r.shift) == world, r.shift
    for rank in r.shift:
        assert rank["layers"] == 2 and rank["same_tensors"], rank
        assert rank["served"]["sp"] >= 3 and rank["served"]["full_tp"] >= 10, rank
    assert len({tuple(sorted(rank["served"].items())) for rank in r.shift}) == 1, r.shift
