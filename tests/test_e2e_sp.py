"""Ulysses SP on the real vLLM CPU engine (V1 runner, gloo): every layout
gives the greedy tokens and prompt logprobs of TP=1, and in float32 TP=1
gives Hugging Face transformers' greedy tokens (an oracle that shares no code
with vLLM).

The Llama layouts are compared with a TP=1 vLLM engine (the ``llama_ref``
fixture); the other model families (KV-head counts, Qwen3, Mistral, Bloom;
Qwen3-MoE in test_e2e_shift, whose SP steps run its MoE layers on SP
slices) with transformers run on the same workload (``family_ref``):
TP=1 equals transformers, so a second vLLM engine per family would only
repeat it, at a minute of CI each.  GPT-OSS runs in bfloat16 on the CPU
engine, where transformers is no close reference: its TP=1 engine is.

SP=2 compiled with Inductor runs in test_e2e_shift (its prefill steps run
the SP model's compiled graphs, with the exchange op inside).

The workload (harness.workload): odd lengths (steps padded to a multiple of
SP), one longer than a chunk (chunked prefill with a 64-token budget), and a
second batch that shares prefixes with the first (prefix caching on; the
hits are checked).
"""

from __future__ import annotations

import pytest

from harness.compare import assert_same, hf_greedy
from harness.models import make_model
from harness.workload import BATCHES, ENGINE, check_prefix_cache, run

pytestmark = pytest.mark.e2e


def test_tp1_matches_transformers(llama, llama_ref):
    prompts = [p for batch in BATCHES for p in batch]
    assert llama_ref.tokens == hf_greedy(llama, prompts, ENGINE["max_tokens"])


def test_tp1_logprobs_match_transformers(llama, llama_ref, family_ref):
    """The transformers reference the other families are judged by equals
    vLLM's TP=1 in logprobs too, within the tolerance the layouts get."""
    assert_same(llama_ref, family_ref(llama), what="transformers vs TP=1")


CORE = pytest.mark.core   # also run on every other release the series is ported to


# On the other releases, TP=2 x SP=2 alone: it holds SP=2's exchange
# inside each TP rank's pair, with the KV heads replicated on top.
@pytest.mark.parametrize("tp,sp", [(1, 2), pytest.param(2, 2, marks=CORE), (1, 4)])
def test_llama_layouts(llama, llama_ref, tp, sp):
    """kv_heads=2: with TP=2, SP=2 each TP rank has one KV head, which is
    replicated to both SP ranks; with SP=4 each KV head goes to two.
    (Upstream's TP=2, the control, runs as the bfloat16 tests' bound.)"""
    got = run(llama, tp=tp, sp=sp)
    assert_same(llama_ref, got, what=f"TP={tp} SP={sp} vs TP=1")
    check_prefix_cache(got)


@pytest.mark.parametrize("kv_heads", [4])
def test_kv_head_counts(models_dir, family_ref, kv_heads):
    """kv=4: each SP rank caches two of them.  (Fewer KV heads than SP
    ranks, each replicated, is the Llama's at TP=2 x SP=2 and SP=4.)"""
    model = make_model(models_dir, "llama", heads=8, kv_heads=kv_heads)
    got = run(model, sp=2)
    assert_same(family_ref(model), got, what=f"kv_heads={kv_heads} SP=2 vs transformers")
    check_prefix_cache(got)


def test_qwen3_qk_norm(models_dir, family_ref):
    model = make_model(models_dir, "qwen3", heads=8, kv_heads=2)
    got = run(model, sp=2)
    assert_same(family_ref(model), got, what="Qwen3 SP=2 vs transformers")
    check_prefix_cache(got)


def test_mistral(models_dir, family_ref):
    """Mistral, its own model class in vLLM.  (Qwen2, qkv bias, is
    Qwen2.5-VL's decoder in test_e2e_families.)"""
    model = make_model(models_dir, "mistral", heads=8, kv_heads=2, hidden=256)
    got = run(model, sp=2)
    assert_same(family_ref(model), got, what="Mistral SP=2 vs transformers")
    check_prefix_cache(got)


def test_alibi_slopes_follow_their_heads(models_dir, family_ref):
    """Bloom: one ALiBi slope per head.  Each SP rank must attend with its
    own heads' slopes (chunk sp_rank of its TP rank's), as plain TP over
    TP*SP would; with the TP rank's first slopes SP rank 1 computes other
    scores and the tokens differ."""
    model = make_model(models_dir, "bloom", heads=8, kv_heads=8, hidden=256)
    got = run(model, sp=2)
    assert_same(family_ref(model), got, what="Bloom SP=2 vs transformers")
    check_prefix_cache(got)
