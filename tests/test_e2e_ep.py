"""Expert parallelism on the real CPU engine: EP over the SP ranks
(ulysses_moe).  One Shift engine at TP=2 x SP=2 covers the SP model's
dispatch over all four ranks (TP x SP, with the TP split), the full-TP
model's plain EP, and their sharing one set of experts, more experts than
GPUs; n-gram speculation's verify steps on the same layout (the suite's
n-gram row); DP x SP with EP is test_e2e_scaleout's `-dp 2 -sp 2`,
upstream's DP x TP with EP of GLM-4.5 (a block our patches make
sequence-parallel) its `-dp 2 -tp 2`, whose ranks hold one
expert of four each: the CPU kernel's expert map (patch
cpu-moe-honours-expert-map; without it the kernel indexed its weights by
global expert ids and the worker died) runs there, as in every EP row
here; Llama 4's and GPT-OSS's rows are test_e2e_families'."""

from __future__ import annotations

import pytest

from harness.compare import assert_same
from harness.engine import run_engine
from harness.models import make_model
from harness.workload import BLOCK, check_expert_placement, check_prefix_cache, run

pytestmark = pytest.mark.e2e


def test_shift_tp2_sp2_expert_parallel(models_dir, family_ref):
    """`-tp 2 -sp 2 --shift-parallel --enable-expert-parallel`, threshold 8
    so that both models serve: 8 experts, two a GPU (so a GPU's second local
    expert runs too), the workload equal to transformers in both modes,
    prefix-cache hits across them."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2, experts=8)
    got = run(model, tp=2, sp=2, enable_expert_parallel=True, shift_parallel=True,
              shift_parallel_threshold=8)
    assert_same(family_ref(model), got, what="Qwen3-MoE shift TP=2xSP=2 with EP vs transformers")
    check_prefix_cache(got)
    served = [rank["served"] for rank in got.shift]
    assert all(s["sp"] >= 4 and s["full_tp"] >= 10 for s in served), served
    check_expert_placement(model, got, 4)


def test_transformers_backend_under_shift_expert_parallel(models_dir, family_ref):
    """The same layout on vLLM's Transformers modeling backend (`--model-impl
    transformers`: the Hugging Face modules around vLLM's attention and MoE
    layers): its attention layers take a TP rank's heads (patch
    transformers-backend-heads-per-tp-rank; before it the first step died in
    the attention's reshape), its MoE dispatches over the EP group, and
    both modes equal transformers."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2, experts=8)
    got = run(model, tp=2, sp=2, enable_expert_parallel=True, shift_parallel=True,
              shift_parallel_threshold=8, model_impl="transformers")
    assert "Resolved architecture: TransformersMoEForCausalLM" in got.log, got.log[-2000:]
    assert_same(family_ref(model), got,
                what="Qwen3-MoE, Transformers backend, shift TP=2xSP=2 with EP vs transformers")
    check_prefix_cache(got)
    served = [rank["served"] for rank in got.shift]
    assert all(s["sp"] >= 4 and s["full_tp"] >= 10 for s in served), served
    check_expert_placement(model, got, 4)


def test_moe_block_that_does_not_split_tokens_is_refused(models_dir):
    """Mixtral's MoE block does not split its tokens over ranks (upstream's
    sequence-parallel MoE), so under SP with EP it would dispatch TP copies
    of them: refused in one line, naming the class, when the model is
    built."""
    model = make_model(models_dir, "mixtral")
    with pytest.raises(RuntimeError) as excinfo:
        run(model, sp=2, enable_expert_parallel=True)
    assert "MixtralForCausalLM" in str(excinfo.value)
    assert "drop --enable-expert-parallel" in str(excinfo.value)


def test_ngram_under_shift_expert_parallel(models_dir):
    """n-gram speculation under Shift with EP, the suite's n-gram row: the
    verify steps (several tokens a request, padded to SP) pick their mode by
    size and dispatch over the EP group like any other step, with the
    target's KV heads replicated (2 over TP x SP = 4), and the drafts are
    TP=1's.  Repetitive prompts, so that lookup finds n-grams."""
    model = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    prompts = [([11, 12, 13, 14, 15] * 12)[:57], ([30, 31, 32, 33] * 20)[:77], [7, 8, 9]]
    spec = dict(speculative_config=dict(method="ngram", num_speculative_tokens=3,
                                        prompt_lookup_max=3, prompt_lookup_min=2),
                max_num_seqs=8, max_tokens=24, max_num_batched_tokens=64, block_size=BLOCK)
    ref = run_engine(model, prompts, **spec)
    got = run_engine(model, prompts, tp=2, sp=2, shift_parallel=True,
                     shift_parallel_threshold=8, enable_expert_parallel=True, **spec)
    assert_same(ref, got, what="ngram, TP=2xSP=2 shift with EP vs TP=1")
    assert got.spec == ref.spec and got.spec["accepted"] > 0, (got.spec, ref.spec)
    served = [rank["served"] for rank in got.shift]
    assert all(s["sp"] >= 2 and s["full_tp"] >= 5 for s in served), served
    check_expert_placement(model, got, 4)
