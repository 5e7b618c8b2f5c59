"""Ulysses SP on the real vLLM CPU engine (V1 runner, gloo): every layout
gives the greedy tokens and prompt logprobs of TP=1, and in float32 TP=1
gives Hugging Face transformers' greedy tokens (an oracle that shares no code
with vLLM).

The Llama layouts are compared with a TP=1 vLLM engine (the ``llama_ref``
fixture); Bloom and Mistral, each under Shift at SP=2 (and Qwen3-MoE in
test_e2e_shift, whose SP steps run its MoE layers on SP slices), with
transformers run on the same workload (``family_ref``): TP=1 equals
transformers, so a second vLLM engine per family would only repeat it.
GPT-OSS runs in bfloat16 on the CPU engine, where transformers is no close
reference: its TP=1 engine is.

Where the cases that once ran here run now (each engine covers more):
TP=2 x SP=2 (one KV head per TP rank, replicated to both SP ranks) is
test_e2e_shift's Shift engine at that layout, whose prefill and mixed
steps run it (its decodes run full TP; SP decodes run at SP=2 and SP=4
here); each SP rank caching several KV heads is Bloom's (4 each) and
GPT-OSS's Shift SP steps (2 each, test_e2e_families); Qwen3's decoder
(QK norm) is Qwen3-VL's in test_e2e_families and Qwen3-MoE's attention in
test_e2e_shift.

SP=2 compiled with Inductor runs in test_e2e_spec's EAGLE-3 row (under
Shift at SP=2: its prefill steps run the SP model's compiled graphs, with
the exchange op inside).

The workload (harness.workload): odd lengths (steps padded to a multiple of
SP), one longer than a chunk (chunked prefill with a 64-token budget), and a
second batch that shares prefixes with the first (prefix caching on; the
hits are checked).
"""

from __future__ import annotations

import pytest

from harness.compare import assert_same, hf_greedy
from harness.models import make_model
from harness.workload import BATCHES, ENGINE, check_prefix_cache, check_shift, run

pytestmark = pytest.mark.e2e


def test_tp1_matches_transformers(llama, llama_ref):
    prompts = [p for batch in BATCHES for p in batch]
    assert llama_ref.tokens == hf_greedy(llama, prompts, ENGINE["max_tokens"])


def test_tp1_logprobs_match_transformers(llama, llama_ref, family_ref):
    """The transformers reference the other families are judged by equals
    vLLM's TP=1 in logprobs too, within the tolerance the layouts get."""
    assert_same(llama_ref, family_ref(llama), what="transformers vs TP=1")


@pytest.mark.parametrize("tp,sp", [(1, 2), (1, 4)])
def test_llama_layouts(llama, llama_ref, tp, sp):
    """kv_heads=2: with SP=2 each SP rank caches one KV head; with SP=4
    each KV head goes to two.  (Upstream's TP=2, the control, runs as the
    bfloat16 tests' bound; TP=2 x SP=2 is test_e2e_shift's core case.)
    The prefills of the batches without prompt logprobs gather only their
    sampled rows over SP (runners-gather-sampled-rows), the rest the whole
    step: the same tokens either way."""
    got = run(llama, tp=tp, sp=sp)
    assert_same(llama_ref, got, what=f"TP={tp} SP={sp} vs TP=1")
    check_prefix_cache(got)
    assert len(got.gathers) == tp * sp
    assert all(g["rows"] > 0 and g["whole"] > 0 for g in got.gathers), got.gathers
    # One thread a rank, forked or spawned (harness.engine.cpu_env): a forked
    # rank once ran as many as the host has cores (load 64 on 16 cores).
    assert all(g["threads"] == 1 for g in got.gathers), got.gathers


def test_mistral_window_under_shift(models_dir, family_ref):
    """Mistral: vLLM's own class (its attention over Llama's) with one
    sliding window of 32 over every layer, which the 150-token prompt
    outruns, under Shift at SP=2: the window in the SP model's prefills and
    in the full-TP model's decodes, against transformers'."""
    model = make_model(models_dir, "mistral", heads=8, kv_heads=2, hidden=256, window=32)
    got = run(model, sp=2, shift_parallel=True, shift_parallel_threshold=8)
    assert_same(family_ref(model), got, what="Mistral (window 32) Shift (SP=2) vs transformers")
    check_shift(got, world=2)


def test_alibi_slopes_follow_their_heads(models_dir, family_ref):
    """Bloom: one ALiBi slope per head.  Each GPU must attend with its own
    heads' slopes, as plain TP over TP*SP would: an SP rank chunk sp_rank of
    its TP rank's, Shift's full-TP model those of its full-TP rank; with the
    TP rank's first slopes SP rank 1 computes other scores and the tokens
    differ.  Under Shift at SP=2 the prefills run the SP model (the prompt
    logprobs) and the decodes the full-TP one."""
    model = make_model(models_dir, "bloom", heads=8, kv_heads=8, hidden=256)
    got = run(model, sp=2, shift_parallel=True, shift_parallel_threshold=8)
    assert_same(family_ref(model), got, what="Bloom Shift (SP=2) vs transformers")
    check_shift(got, world=2)
    check_prefix_cache(got)
