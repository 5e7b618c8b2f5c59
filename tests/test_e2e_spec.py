"""Speculative decoding under SP and Shift on the real vLLM CPU engine.

Greedy speculation never changes the tokens, so every layout with a
drafter must give TP=1's tokens *without* speculation (``plain``), and its
drafts must be the ones TP=1 with the same drafter makes: equal draft and
accept counters, or (a draft model equal to its target) every draft
accepted.  A drafter that computed anything else in SP or full TP would
propose other tokens.

Where the drafter runs (``shift.place_drafter``): with the SP exchange
under ``-sp`` (its steps padded to SP, its ``hidden_states`` input sliced
like the tokens), in full TP under ``--shift-parallel`` (borrowing the
full-TP model's embedding and LM head); the target's verify steps (k+1
tokens per request) pick their mode by size like any step.  One layout per
method, so that together they cover both placements, the TP=2 x SP=2
layout with the target's KV heads replicated (n-gram), compiled graphs of
both models and the head (EAGLE-3), the borrowed modules and the aux hidden
states from both target models:

* n-gram (no model), ``-tp 2 -sp 2 --shift-parallel``: test_e2e_ep's row
  on Qwen3-MoE with EP (the same layout, its experts dispatched too);
* suffix lookup (no model; arctic-inference's suffix tree),
  ``-sp 2 --shift-parallel``;
* draft model (the target itself), ``-sp 2`` and ``-sp 2 --shift-parallel``:
  SP drafter and full-TP drafter, each with its own embedding;
* EAGLE-3 head, ``-sp 2 --shift-parallel`` compiled by Inductor (the
  full-TP drafter at TP=2, compiled); an EAGLE (v1) head, the same proposer,
  ``-sp 2`` (the SP drafter);
* MTP (MiMo's layer), ``-sp 2 --shift-parallel``;
* MTP on a hybrid target (Qwen3-Next's layer over its Gated-DeltaNet
  layers, bfloat16), ``-sp 2`` and ``-sp 2 --shift-parallel``: SP drafter
  and full-TP drafter, and the GDN layers' verify steps in both modes
  (held between upstream's TP=1 and TP=2 with the same MTP);
* MTP on Qwen3.5 (its multimodal class, M-RoPE positions), ``-sp 2`` and
  ``-sp 2 --shift-parallel``, held the same way.
"""

from __future__ import annotations

import pytest

from harness import suffix
from harness.compare import assert_between, assert_same
from harness.drafters import (
    make_eagle,
    make_eagle3,
    make_mimo,
    make_qwen3_5_mtp,
    make_qwen3_next_mtp,
)
from harness.engine import run_engine
from harness.models import GDN, make_qwen3_next, make_vl_model
from harness.workload import BLOCK, LONG, PROMPTS

pytestmark = pytest.mark.e2e

# Repetitive prompts (lookup finds their n-grams; the tiny random model's
# greedy continuations repeat too), one longer than the 64-token step, and
# two of the workload's, which give lookup little to find.
PROMPTS_SPEC = [([11, 12, 13, 14, 15] * 12)[:57], ([30, 31, 32, 33] * 20)[:77],
                ([40, 41, 42] * 30)[:70], PROMPTS[1], PROMPTS[0]]
ENGINE = dict(max_tokens=24, max_num_batched_tokens=64, block_size=BLOCK)


def run(model, spec: dict | None = None, **kw):
    if spec is not None:
        # (A drafter needs room in the step for one token per request.)
        kw.update(speculative_config=spec, max_num_seqs=8)
    return run_engine(model, PROMPTS_SPEC, **ENGINE, **kw)


@pytest.fixture(scope="module")
def plain(llama):
    """TP=1 without speculation: the tokens every layout must give."""
    return run(llama)


def check_served(got, sp_steps: int, full_tp_steps: int):
    for rank in got.shift:
        assert rank["served"]["sp"] >= sp_steps, rank
        assert rank["served"]["full_tp"] >= full_tp_steps, rank
        assert rank["same_tensors"], rank


def test_suffix_lookup_under_shift(llama, plain, models_dir):
    """Suffix lookup proposes from the prompt and earlier outputs, as
    n-gram does, by a suffix tree (vLLM's "suffix" method)."""
    spec = dict(method="suffix", num_speculative_tokens=3)
    env = suffix.env(suffix.site(models_dir))
    ref = run(llama, spec, env=env)
    assert ref.tokens == plain.tokens, "greedy speculation changed TP=1's tokens"
    assert ref.spec["accepted"] > 0, ref.spec
    got = run(llama, spec, sp=2, shift_parallel=True, shift_parallel_threshold=8, env=env)
    assert_same(plain, got, what="suffix, SP=2 shift vs TP=1 without speculation")
    assert got.spec == ref.spec, (got.spec, ref.spec)
    check_served(got, 2, 5)


def test_draft_model_under_sp_and_shift(llama, plain):
    """The target as its own draft model, k=2: every draft must be accepted,
    which holds only if the drafter computes what the target does, with
    the SP exchange under -sp, in full TP under Shift."""
    spec = dict(method="draft_model", model=str(llama), num_speculative_tokens=2)
    for kw in (dict(), dict(shift_parallel=True, shift_parallel_threshold=18)):
        got = run(llama, spec, sp=2, **kw)
        what = f"draft model, SP=2 {'shift ' if kw else ''}vs TP=1 without speculation"
        assert_same(plain, got, what=what)
        assert got.spec["drafted"] > 0 and got.spec["accepted"] == got.spec["drafted"], \
            (what, got.spec)
    check_served(got, 2, 5)


def test_eagle3_under_shift_compiled(llama, plain, models_dir, tmp_path):
    """The Shift engine is compiled as a CPU user gets it: the SP model, the
    full-TP model and the EAGLE head each get their own compile artefacts
    (one per config hash and model tag)."""
    head = make_eagle3(models_dir, llama)
    spec = dict(method="eagle3", model=str(head), num_speculative_tokens=2)
    ref = run(llama, spec)
    assert ref.tokens == plain.tokens, "greedy speculation changed TP=1's tokens"
    assert ref.spec["accepted"] > 0, ref.spec
    got = run(llama, spec, sp=2, shift_parallel=True, shift_parallel_threshold=12,
              enforce_eager=False,
              env={"TORCHDYNAMO_DISABLE": "0", "VLLM_CACHE_ROOT": str(tmp_path)})
    assert_same(plain, got, what="EAGLE-3, SP=2 shift compiled vs TP=1 eager "
                                 "without speculation")
    assert got.spec == ref.spec, (got.spec, ref.spec)
    check_served(got, 2, 5)
    artefacts = list((tmp_path / "torch_compile_cache").glob("*/*/rank_0_0/model"))
    assert len(artefacts) == 3, artefacts


def test_eagle_under_sp(llama, plain, models_dir):
    """An EAGLE (v1) head: vLLM's other EAGLE model class, the same
    proposer; it borrows the target's embedding and LM head."""
    spec = dict(method="eagle", model=str(make_eagle(models_dir, llama)),
                num_speculative_tokens=2)
    ref = run(llama, spec)
    assert ref.tokens == plain.tokens, "greedy speculation changed TP=1's tokens"
    assert ref.spec["accepted"] > 0, ref.spec
    got = run(llama, spec, sp=2)
    assert_same(plain, got, what="EAGLE, SP=2 vs TP=1 without speculation")
    assert got.spec == ref.spec, (got.spec, ref.spec)


def test_mtp_under_shift(models_dir):
    """MiMo's MTP layer (k=1) borrows the target's embedding and LM head:
    under Shift the full-TP model's."""
    mimo = make_mimo(models_dir)
    spec = dict(method="mtp", num_speculative_tokens=1)
    plain = run(mimo)
    ref = run(mimo, spec)
    assert ref.tokens == plain.tokens and ref.spec["accepted"] > 0, ref.spec
    got = run(mimo, spec, sp=2, shift_parallel=True, shift_parallel_threshold=8)
    assert_same(plain, got, what="MTP, SP=2 shift vs TP=1 without speculation")
    assert got.spec == ref.spec, (got.spec, ref.spec)
    check_served(got, 2, 5)


def test_mtp_on_hybrid_under_sp_and_shift(models_dir):
    """Qwen3-Next's MTP layer drafting for its hybrid target, k=1.

    The references are upstream's TP=1 and TP=2 *with* the same MTP.  In
    bfloat16 vLLM's own TP=1 gives other tokens with it than without (its
    verify steps run the GDN's multi-token kernel, which rounds otherwise,
    and this random model has near-ties: 2 of 5 prompts in a workload like
    this one), so TP=1 without speculation holds nothing here.  SP=2
    computes TP=1's projections on TP=2's GDN heads per rank (on an AVX2 or
    AVX-512 host it equals TP=1 to the bit); under Shift every verify step
    of <= 12 tokens runs full TP=2.  Each is held no further from TP=1 than
    TP=2 is and no further from TP=2 than TP=1 is (test_e2e_hybrid says
    why: a CPU GDN kernel may round otherwise with fewer heads per rank).

    The engine core runs in-process (harness.engine): with its own
    process it starts stepping as soon as the first request reaches it, so which
    prompts share the first steps varies from run to run, and in bfloat16
    another batch is another rounding (vLLM's own TP=1 gave two
    continuations of prompt 3 that way).  In-process every prompt is
    scheduled before the first step, and TP=1 repeats itself to the bit
    with vLLM's defaults: chunked prefill (the 150-token prompt's chunks
    share steps with four requests' verify steps) and async scheduling.
    Prefix caching is off: with speculation, vLLM 0.26's CPU engine cannot
    keep a hybrid's cached states (its 'align' step is a Triton kernel)."""
    model = make_qwen3_next_mtp(models_dir, make_qwen3_next(models_dir))
    check_hybrid_mtp(model, "qwen3_next_mtp", "hybrid MTP")


def test_mtp_on_qwen3_5_under_sp_and_shift(models_dir):
    """Qwen3.5's MTP layer (k=1) over its multimodal class, text prompts: the drafter
    takes the target's hidden states and M-RoPE positions (three rows), sliced with the
    tokens for the SP drafter under -sp, whole for the full-TP drafter under Shift.  Held
    between upstream's TP=1 and TP=2 with the same MTP, as Qwen3-Next's above; its drafts
    are accepted only where each got its own token's hidden state (the quiet layer predicts
    from it, so the positions are run, not judged, by acceptance).  Its processor needs the
    tokenizer, though the prompts are token ids."""
    model = make_qwen3_5_mtp(models_dir, make_vl_model(models_dir, "qwen3_5_vl",
                                                         dtype="bfloat16"))
    check_hybrid_mtp(model, "mtp", "Qwen3.5 MTP", skip_tokenizer_init=False,
                     limit_mm_per_prompt={"image": 1, "video": 0})


def check_hybrid_mtp(model, method: str, name: str, **engine):
    """A hybrid target with its MTP layer (k=1) at SP=2 and under Shift at SP=2, each held
    between upstream's TP=1 and TP=2 with the same MTP, its drafts accepted."""
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS_SPEC[2], PROMPTS[3], LONG]

    def go(**kw):
        return run_engine(model, prompts, max_tokens=24, max_num_batched_tokens=64,
                          max_model_len=192, enable_prefix_caching=False,
                          block_size=BLOCK, max_num_seqs=8,
                          speculative_config=dict(method=method, num_speculative_tokens=1),
                          **GDN, **engine, **kw)

    ref, tp2 = go(), go(tp=2)
    assert ref.spec["accepted"] > 0 and tp2.spec["accepted"] > 0, (ref.spec, tp2.spec)
    for kw in (dict(), dict(shift_parallel=True, shift_parallel_threshold=12)):
        got = go(sp=2, **kw)
        what = f"{name}, SP=2 {'shift ' if kw else ''}between TP=1 and TP=2"
        assert_between(ref, tp2, got, what=what)
        assert got.spec["accepted"] > 0, (what, got.spec)
    check_served(got, 2, 5)
