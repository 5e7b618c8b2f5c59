"""Ulysses SP on the real vLLM CPU engine (V1 runner, gloo): every layout
gives the greedy tokens and prompt logprobs of TP=1, and in float32 TP=1
gives Hugging Face transformers' greedy tokens (an oracle that shares no code
with vLLM).

SP=2 compiled with Inductor runs in test_e2e_shift (its prefill steps run
the SP model's compiled graphs, with the exchange op inside).

Prompts: odd lengths (steps padded to a multiple of SP), one longer than a
chunk (chunked prefill with a 64-token budget), and a second batch that
shares prefixes with the first (prefix caching on; the hits are checked).
"""

from __future__ import annotations

import random

import pytest
from conftest import VERSION
from harness.compare import assert_same, hf_greedy
from harness.engine import run_engine
from harness.models import make_model

pytestmark = pytest.mark.e2e

rng = random.Random(7)
LONG = [rng.randrange(3, 500) for _ in range(150)]
PROMPTS = [[rng.randrange(3, 500) for _ in range(7)], [rng.randrange(3, 500) for _ in range(33)],
           LONG, [5]]
THEN = [LONG[:96] + [11, 12, 13, 14, 15, 16, 17, 18, 19], LONG[:64] + [rng.randrange(3, 500) for _ in range(21)]]
# The smallest block each release's CPU attention takes: vLLM 0.32's needs a
# multiple of 32, 0.26's sliding-window kernel (Mistral) fails on 32.
# THEN's shared prefixes (96 and 64 tokens) are whole blocks either way.
BLOCK = 16 if VERSION == "0.26.0" else 32
ENGINE = dict(max_num_batched_tokens=64, block_size=BLOCK, max_tokens=10)


def run(model, tp=1, sp=1, **kw):
    # [LONG] again without prompt logprobs fills the cache that THEN reads.
    return run_engine(model, PROMPTS, then=[[LONG], THEN], tp=tp, sp=sp, **{**ENGINE, **kw})


def check_prefix_cache(r):
    assert all(c >= 64 for c in r.cached_tokens[-len(THEN):]), r.cached_tokens


def test_tp1_matches_transformers(llama, llama_ref):
    prompts = PROMPTS + [LONG] + THEN
    assert llama_ref.tokens == hf_greedy(llama, prompts, ENGINE["max_tokens"])


CORE = pytest.mark.core   # also run on every other release the series is ported to


@pytest.mark.parametrize("tp,sp", [pytest.param(1, 2, marks=CORE), (2, 1),
                                   pytest.param(2, 2, marks=CORE), (1, 4)])
def test_llama_layouts(llama, llama_ref, tp, sp):
    """kv_heads=2: with TP=2, SP=2 each TP rank has one KV head, which is
    replicated to both SP ranks; with SP=4 each KV head goes to two."""
    got = run(llama, tp=tp, sp=sp)
    assert_same(llama_ref, got, what=f"TP={tp} SP={sp} vs TP=1")
    check_prefix_cache(got)


@pytest.mark.parametrize("kv_heads", [1, 4])
def test_kv_head_counts(models_dir, kv_heads):
    """kv=1: the single KV head is replicated to every SP rank; kv=4: each
    SP rank caches two of them."""
    model = make_model(models_dir, "llama", heads=8, kv_heads=kv_heads)
    assert_same(run(model), run(model, sp=2), what=f"kv_heads={kv_heads} SP=2 vs TP=1")


def test_qwen3_qk_norm(models_dir):
    model = make_model(models_dir, "qwen3", heads=8, kv_heads=2)
    ref = run(model)
    assert ref.tokens == hf_greedy(model, PROMPTS + [LONG] + THEN, ENGINE["max_tokens"])
    assert_same(ref, run(model, sp=2), what="Qwen3 SP=2 vs TP=1")


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_other_decoders(models_dir, arch):
    """Qwen2 (qkv bias) and Mistral (its own model class in vLLM).  vLLM's
    Qwen2 takes head_dim = hidden/heads, so hidden = 8 heads x 32."""
    model = make_model(models_dir, arch, heads=8, kv_heads=2, hidden=256)
    assert_same(run(model), run(model, sp=2), what=f"{arch} SP=2 vs TP=1")


def test_qwen3_moe(models_dir):
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    ref = run(model)
    assert_same(ref, run(model, sp=2), what="Qwen3-MoE SP=2 vs TP=1")
