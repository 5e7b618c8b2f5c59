"""Model families beyond Llama and Qwen under SP and Shift, on the real vLLM
CPU engine, each in the checkpoint class it is published as (Gemma 3 and
Qwen2.5-VL as their multimodal classes, with image prompts).

Each family runs two engines on the shared workload (harness.workload: odd
lengths, chunked prefill at a 64-token budget, mixed prefill/decode steps,
prefix-cache hits) plus image prompts: TP=1, the reference, and one
``-tp 2 -sp 2 --shift-parallel --shift-parallel-threshold 8`` engine.  That
one engine covers the three layouts: prefill and mixed steps run Ulysses
at TP=2 x SP=2 (one KV head per TP rank, fewer than SP: replicated before
the exchange), decode steps run plain TP=4 over the same GPUs, and
requests prefilled in one mode decode in the other on the one KV cache.
Greedy tokens and prompt logprobs must equal TP=1's (float32).

GPT-OSS runs in bfloat16 (vLLM's CPU kernels take nothing else) on TP=1,
TP=2, TP=2 x SP=2 and Shift at SP=2: each layout is held to the one whose
products it computes (TP x SP to TP=2, exactly: its SP exchange inside each
TP rank is SP=2's over TP=1) and Shift, whose prefills are TP=1's and whose
decodes are TP=2's, to TP=2's distance from TP=1.  Qwen3.5 (a
Gated-DeltaNet hybrid) runs Shift at TP=2 x SP=2 held between upstream's
TP=2 and TP=4, as test_e2e_hybrid explains.

Multimodal engines run with the multimodal processor cache off: vLLM
0.26's cached path calls the HF processor on a placeholder without its
image, which transformers 5.24's processors reject for Gemma 3 and
Qwen2.5-VL at any layout, TP=1 included ("Found 1 <start_of_image> tokens
in the text but no images were passed").
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.compare import assert_between, assert_no_further, assert_same
from harness.models import GDN, IMAGE_PLACEHOLDER, make_model, make_vl_model
from harness.repo import VERSION
from harness.workload import (
    BATCHES,
    check_expert_placement,
    check_prefix_cache,
    check_shift,
    run,
)

pytestmark = pytest.mark.e2e

SHIFT = dict(tp=2, sp=2, shift_parallel=True, shift_parallel_threshold=8)
MULTIMODAL = dict(mm_processor_cache_gb=0, limit_mm_per_prompt={"image": 2, "video": 0})
WORDS = " ".join(f"w{i}" for i in range(10, 40))


def _prompt(words: str, images: list[list[int]], ids: dict[str, int] | None) -> dict:
    """Text, or (``ids``: the word-level tokenizer's ids, for a checkpoint
    whose model type makes transformers load its own tokenizer class) the
    same prompt as token ids."""
    if ids is None:
        return {"text": words, "images": images}
    return {"ids": [ids[w] for w in words.replace("><", "> <").split()], "images": images}


def image_prompts(placeholder: str, ids: dict[str, int] | None = None) -> list[dict]:
    """Images inside the text, one or two per prompt, the two-image one
    longer than a chunk; the first two differ only in their pixels."""
    return [
        _prompt(f"w7 w8 {placeholder} w9 {WORDS}", [[1, 56, 56]], ids),
        _prompt(f"w7 w8 {placeholder} w9 {WORDS}", [[2, 56, 56]], ids),
        _prompt(f"w20 {placeholder} w21 {placeholder} w22 {WORDS} {WORDS}",
                [[3, 56, 56], [4, 112, 56]], ids),
    ]


def image_tail_batches(placeholder: str, ids: dict[str, int] | None = None) -> list[list[dict]]:
    """A text prompt, then the same text followed by an image: the second
    finds the text in the prefix cache, so its step holds only the image's
    few tokens -- under Shift's threshold, a full-TP step with image tokens."""
    text = " ".join(f"w{i}" for i in range(100, 132))
    return [[_prompt(f"{text} w1", [], ids)],
            [_prompt(f"{text} {placeholder}", [[5, 56, 56]], ids)]]


@pytest.fixture(scope="module", params=["gemma3_vl", "qwen2_5_vl", "qwen3_vl"])
def vl_runs(request, models_dir):
    arch = request.param
    model = make_vl_model(models_dir, arch)
    images = image_prompts(IMAGE_PLACEHOLDER[arch])
    batches = [BATCHES[0] + images] + BATCHES[1:] + image_tail_batches(IMAGE_PLACEHOLDER[arch])

    def go(**kw):
        return run(model, **MULTIMODAL, **kw, batches=batches)

    return arch, images, go(), go(**SHIFT)


def test_multimodal_checkpoint_under_shift(vl_runs):
    """Text and image prompts through the published multimodal class: the
    vision encoder runs as upstream runs it, the merged embeddings (and
    M-RoPE positions, for Qwen; deepstack features, for Qwen3-VL) are sliced
    like token ids, and the decoder runs under SP and full TP (image tokens
    in both modes), equal to TP=1."""
    arch, images, ref, got = vl_runs
    assert_same(ref, got, what=f"{arch}: TP=2xSP=2 shift vs TP=1")
    assert got.cached_tokens[-1] >= 16, got.cached_tokens     # the image's own step
    text = replace(got, cached_tokens=got.cached_tokens[:-2])     # less the image tail
    if arch == "gemma3_vl":
        check_window_hits(text, replace(ref, cached_tokens=ref.cached_tokens[:-2]))
    else:
        check_prefix_cache(text)
    check_shift(got)
    # The images reached the model: the processor expanded each
    # placeholder, and two prompts differing only in pixels score their
    # text after the image differently.
    first = len(BATCHES[0])
    one, other = ref.prompt_ids[first], ref.prompt_ids[first + 1]
    assert one == other and len(one) > len(images[0]["text"].split()), one
    tail = slice(len(one) - 10, len(one))
    assert ref.prompt_logprobs[first][tail] != ref.prompt_logprobs[first + 1][tail]
    assert max(len(p) for p in ref.prompt_ids) > 64           # a chunked image prompt


@pytest.fixture(scope="module", params=["glm4_moe", "llama4_vl"])
def text_runs(request, models_dir):
    """GLM-4.5 (partial rotary, QK norm, dense then grouped top-k MoE layers)
    and Llama 4 as published, the multimodal class, serving text (chunked
    local attention with chunk 32 < the long prompt, a NoPE layer, QK norm,
    MoE).  Llama 4's image path is not run: vLLM 0.26's CPU worker dies in
    the vision encoder's profile run at TP=1 ("corrupted size vs.
    prev_size"), so its engines take no images."""
    arch = request.param
    # With expert parallelism from 0.32 (ulysses_moe): one of 4 experts a GPU,
    # the shared expert beside them; Llama 4: top-1 routing weighted on the
    # input; GLM-4.5: grouped top-k (two groups of two, the best group's two).
    shift = dict(SHIFT, enable_expert_parallel=VERSION != "0.26.0")
    if arch == "llama4_vl":
        model = make_vl_model(models_dir, arch)
        kw = dict(limit_mm_per_prompt={"image": 0})
    else:
        model, kw = make_model(models_dir, arch), {}
    return arch, model, run(model, **kw), run(model, **kw, **shift)


def test_decoder_family_under_shift(text_runs):
    arch, model, ref, got = text_runs
    assert_same(ref, got, what=f"{arch}: TP=2xSP=2 shift vs TP=1")
    check_prefix_cache(got)
    check_shift(got)
    if VERSION != "0.26.0":
        check_expert_placement(model, got, 4)


def check_window_hits(got, tp1):
    """The prefix-cache check of a model with sliding-window layers (GPT-OSS:
    window 16, Gemma 3: 32).  0.26: the workload's.  From 0.32 upstream's own
    TP=1 hits only at the repeated long prompt (GPT-OSS cached [0, 0, 0, 0,
    128, 0, 0] with blocks of 32; with 64 the 64-token prefix hits, the
    96-token one not), so there: TP=1's hits, that one included."""
    if VERSION == "0.26.0":
        check_prefix_cache(got)
    else:
        assert got.cached_tokens == tp1.cached_tokens and max(got.cached_tokens) >= 128, (
            got.cached_tokens, tp1.cached_tokens)


@pytest.fixture(scope="module")
def gpt_oss(models_dir):
    """GPT-OSS: a learned attention sink per head, sliding and full layers,
    MoE; ONE KV head, fewer than TP (GPT-OSS's attention needs the patch
    gpt-oss-replicates-kv-heads-past-tp there: without it every layout
    below but TP=1 dies at start-up), replicated to every rank.  vLLM's CPU
    kernels run it in bfloat16 only (float32 fails on the sinks' pointer at
    TP=1), where layouts that sum in another order differ in tokens, so each
    layout is held to the one it computes like."""
    model = make_model(models_dir, "gpt_oss", heads=8, kv_heads=1, dtype="bfloat16")

    def go(**kw):
        return run(model, dtype="bfloat16", **kw)

    return {"tp1": go(), "tp2": go(tp=2)}, go, model


def test_gpt_oss_tp_sp_equals_tp2(gpt_oss):
    """TP=2 x SP=2 computes TP=2's products: equal to TP=2 to the bit, and
    so no further from TP=1 than TP=2 is.  Inside each TP rank this is
    SP=2 over that rank's weights: its one (replicated) KV head replicated
    again to both SP ranks, and each SP rank attends with its own heads'
    sinks (with the TP rank's first sinks the backend refuses the layer;
    other sinks change the bits).  Several KV heads per SP rank: Bloom's
    SP=2 (test_e2e_sp)."""
    runs, go, model = gpt_oss
    got = go(tp=2, sp=2)
    assert_same(runs["tp2"], got, atol=0.0, what="GPT-OSS TP=2xSP=2 vs TP=2")
    check_window_hits(got, runs["tp1"])


def test_gpt_oss_shift(gpt_oss):
    """Shift at SP=2: prefill and mixed steps in SP (TP=1's products),
    decodes in full TP=2, past the one KV head (the case that crashed on
    GPUs under -tp 2 -sp 2 --shift-parallel).  Prompt logprobs come from SP steps; the decode
    is TP=2's, so the run is held to TP=2's distance from TP=1.  From 0.32
    with expert parallelism (its experts summed over two ranks, as TP=2's
    partial products are)."""
    runs, go, model = gpt_oss
    ep = VERSION != "0.26.0"    # with expert parallelism from 0.32: two of 4 experts a GPU
    got = go(sp=2, shift_parallel=True, shift_parallel_threshold=8, enable_expert_parallel=ep)
    assert_no_further(runs["tp1"], runs["tp2"], got, what="GPT-OSS shift SP=2 vs TP=1")
    check_window_hits(got, runs["tp1"])
    check_shift(got, world=2)
    if ep:
        check_expert_placement(model, got, 2)


@pytest.fixture(scope="module")
def qwen3_5(models_dir):
    """Qwen3.5 as published: the multimodal class over a Gated-DeltaNet
    hybrid (bfloat16; the recurrent state as the release's CPU GDN kernels
    take it, harness.models.GDN).
    Prompts go as token ids: for this model type transformers loads its own
    tokenizer class, not the checkpoint's word-level one."""
    model = make_vl_model(models_dir, "qwen3_5_vl", dtype="bfloat16")
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    placeholder = IMAGE_PLACEHOLDER["qwen3_5_vl"]
    batches = ([BATCHES[0] + image_prompts(placeholder, vocab)] + BATCHES[1:]
               + image_tail_batches(placeholder, vocab))

    def go(**kw):
        return run(model, **GDN, **MULTIMODAL, **kw, batches=batches)

    return go(tp=2), go(tp=4), go


def test_qwen3_5_multimodal_hybrid_under_shift(qwen3_5):
    """Shift at TP=2 x SP=2: prefill in SP (the non-interleaved GDN
    projections split over TP, then their heads over SP; attention
    exchanged), decodes and the image-only step in full TP=4, over one
    state and KV cache.  Its SP steps compute TP=2's projections on TP=4's
    GDN heads per rank, its decodes are TP=4's: held no further from TP=2
    than TP=4 is and no further from TP=4 than TP=2 is, as Qwen3-Next's in
    test_e2e_hybrid."""
    tp2, tp4, go = qwen3_5
    got = go(**SHIFT)
    assert_between(tp2, tp4, got, what="Qwen3.5 shift TP=2xSP=2 between TP=2 and TP=4")
    assert got.cached_tokens[-1] >= 16, got.cached_tokens
    check_shift(got)
    # The images reached the model: the first two prompts differ only in
    # their pixels, and score their text after the image differently.
    first = len(BATCHES[0])
    tail = slice(len(got.prompt_ids[first]) - 10, len(got.prompt_ids[first]))
    assert got.prompt_logprobs[first][tail] != got.prompt_logprobs[first + 1][tail]
