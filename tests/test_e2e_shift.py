"""Shift Parallelism on the real vLLM CPU engine (V1 runner, gloo, float32):
whatever mode each step runs in, greedy tokens and prompt logprobs equal
TP=1's, and both models use one KV cache.

The workload is the SP tests' (harness.workload): prompts of odd lengths, one longer than the
64-token step budget (chunked prefill over three steps, mixed with the
others' decodes), and a second round that hits the prefix cache.  With a
threshold of 8 the prefill and mixed steps run in SP and the decode steps
in full TP, so requests prefilled in one mode decode in the other, and
cached blocks written in one mode are read in the other.  Each rank reports
how many steps it served in each mode; the tests check that the mode they
meant to exercise really ran.
"""

from __future__ import annotations

import re

import pytest

from harness.compare import assert_same, hf_run
from harness.engine import run_engine
from harness.models import make_model
from harness.workload import (
    ENGINE,
    LONG,
    check_expert_placement,
    check_prefix_cache,
    checkpoint_experts,
    run,
)

pytestmark = pytest.mark.e2e

BUDGET = 64      # max_num_batched_tokens in ENGINE: the largest step


def served(r, mode: str) -> list[int]:
    return [rank["served"][mode] for rank in r.shift]


def arranged(r) -> list[int]:
    """Each rank's count of merged layers laid out in blocks for the full-TP
    model to view (shift_weights.arrange; the CPU shares none, but the SP
    model runs on the arranged rows and reads their outputs back)."""
    return [int(n) for n in re.findall(r"Shift parallelism: (\d+) merged layers", r.log)]


def check_shift_run(r, world: int):
    assert len(r.shift) == world
    for rank in r.shift:
        assert rank["layers"] == 2 and rank["same_tensors"], rank   # one KV cache
    # Every rank took the same path through every step.
    assert len({tuple(sorted(rank["served"].items())) for rank in r.shift}) == 1, r.shift


# The core case, run on every release the series is ported to: full TP is
# 4 ranks, SP pairs inside each TP rank (one engine covers SP at
# TP=2 x SP=2 with one KV head per TP rank replicated to both SP ranks,
# full TP and the shared cache).  Shift at TP=1 x SP=2 is test_moe's
# layout, on the same workload with the same checks.
@pytest.mark.core
def test_auto_mode_switches_per_step(llama, llama_ref):
    """Threshold 8: prefill chunks and mixed steps in SP at TP=2 x SP=2,
    decodes in full TP=4."""
    got = run(llama, tp=2, sp=2, shift_parallel=True, shift_parallel_threshold=8)
    assert_same(llama_ref, got, what="shift TP=2xSP=2 vs TP=1")
    check_prefix_cache(got)
    check_shift_run(got, 4)
    assert min(served(got, "sp")) >= 4 and min(served(got, "full_tp")) >= 10, got.shift
    # 2 KV heads over 4 full-TP ranks: QKV keeps its copy, gate/up of both layers is arranged
    # and read in blocks, on every release's Llama MLP (``self.act_fn(x)``, and from 0.32
    # ``maybe_fused_act_quant(self.act_fn, x, ...)``), never gathered.
    assert arranged(got) == [2] * 4, arranged(got)
    assert [rank["reads"] for rank in got.shift] == [{"blocked": 2, "gathered": 0}] * 4, got.shift


def test_forced_full_tp(llama, llama_ref):
    """Threshold = the step budget: every step runs the full-TP model,
    chunked prefill and prefix-cache hits included."""
    got = run(llama, sp=2, shift_parallel=True, shift_parallel_threshold=BUDGET)
    assert_same(llama_ref, got, what="shift, all steps full TP, vs TP=1")
    check_prefix_cache(got)
    check_shift_run(got, 2)
    assert served(got, "sp") == [0, 0] and min(served(got, "full_tp")) >= 20, got.shift


def test_forced_sp(llama):
    """The smallest threshold (1, rounded up to SP=2) under steps that all
    have more tokens: four equal prompts prefill in one step and decode
    together, so the full-TP model is loaded but never serves a step.

    The engine core runs in-process (harness.engine): with its own
    process it starts stepping as soon as the first request reaches it,
    and on a slow machine the four requests then start one or two steps
    apart, so the last decode steps carry 1-2 tokens and rightly run in
    full TP (seen once in CI)."""
    prompts = [p[:40] for p in (LONG, LONG[40:], LONG[80:], LONG[100:])]
    got = run_engine(llama, prompts, sp=2, shift_parallel=True, shift_parallel_threshold=1,
                     **{**ENGINE, "max_num_batched_tokens": 256})
    # TP=1 equals transformers (test_e2e_sp): the reference without an engine.
    ref = hf_run(llama, [prompts], ENGINE["max_tokens"])
    assert_same(ref, got, what="shift, all steps SP, vs transformers")
    check_shift_run(got, 2)
    assert served(got, "full_tp") == [0, 0] and min(served(got, "sp")) >= 10, got.shift
    assert arranged(got) == [4, 4], arranged(got)     # QKV and gate/up of both layers


def test_moe(models_dir, family_ref):
    """Qwen3-MoE: the full-TP model's MoE layers are found by name through
    its own layer table (the forward context is switched with the mode).
    The reference is test_e2e_sp's for this model (transformers)."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    got = run(model, sp=2, shift_parallel=True, shift_parallel_threshold=8)
    assert_same(family_ref(model), got, what="Qwen3-MoE shift vs transformers")
    check_prefix_cache(got)
    check_shift_run(got, 2)
    assert min(served(got, "sp")) >= 4 and min(served(got, "full_tp")) >= 10, got.shift
    # Without --enable-expert-parallel every SP rank holds every expert
    # whole (its TP rank's share, here TP=1's) and the full-TP model its own
    # TP=2 shard beside them (1.5x the checkpoint's expert bytes a GPU): the
    # placement check fails.
    whole = checkpoint_experts(model)
    assert all(layer["held"] == [0, 1, 2, 3]
               and layer["bytes"] == whole[int(layer["layer"].split(".")[2])][1] * 3 // 2
               for rank in got.experts for layer in rank["layers"]), got.experts
    with pytest.raises(AssertionError):
        check_expert_placement(model, got, 2)
