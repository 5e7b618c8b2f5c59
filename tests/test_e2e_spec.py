"""Speculative decoding under SP and Shift on the real vLLM CPU engine.

N-gram prompt lookup (``--speculative-config '{"method": "ngram", ...}'``)
has no draft model: its k drafts per request are verified in one target
step of k+1 tokens per request, which SP pads and splits like any other
step and Shift runs in SP or full TP by its size.  So one
``-tp 2 -sp 2 --shift-parallel`` engine covers SP (prefill and large verify
steps at TP=2 x SP=2) and full TP=4 (small verify steps) over one KV cache;
it must equal TP=1 with the same speculation in greedy tokens and logprobs,
and both must accept drafts.  Greedy speculation never changes the tokens:
TP=1 without it gives the same ones.  Drafter models (draft_model, EAGLE,
MTP) stay refused under SP (test_ulysses_config).
"""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.engine import run_engine
from harness.workload import PROMPTS

pytestmark = pytest.mark.e2e

NGRAM = dict(speculative_config=dict(method="ngram", num_speculative_tokens=3,
                                     prompt_lookup_max=3, prompt_lookup_min=2))
# Repetitive prompts (lookup finds their n-grams; the tiny random model's
# greedy continuations repeat too), one longer than the 64-token step, and
# two of the workload's, which give lookup little to find.
PROMPTS_SPEC = [([11, 12, 13, 14, 15] * 12)[:57], ([30, 31, 32, 33] * 20)[:77],
                ([40, 41, 42] * 30)[:70], PROMPTS[1], PROMPTS[0]]
ENGINE = dict(max_tokens=24, max_num_batched_tokens=64, block_size=16)


def run(model, **kw):
    return run_engine(model, PROMPTS_SPEC, **ENGINE, **kw)


def test_ngram_speculation_under_shift(llama):
    plain = run(llama)
    ref = run(llama, **NGRAM)
    got = run(llama, tp=2, sp=2, shift_parallel=True, shift_parallel_threshold=8, **NGRAM)
    assert ref.tokens == plain.tokens, "greedy speculation changed TP=1's tokens"
    assert_same(ref, got, what="ngram, TP=2xSP=2 shift vs TP=1")
    for r in (ref, got):
        assert r.spec["drafted"] > 0 and r.spec["accepted"] > 0, r.spec
    assert got.spec["accepted"] == ref.spec["accepted"], (got.spec, ref.spec)
    for rank in got.shift:
        assert rank["served"]["sp"] >= 2 and rank["served"]["full_tp"] >= 5, rank
