"""Speculative decoding with SP and Shift in the engine config: the methods
served, one-line refusals of the rest before any worker starts, and the
CUDA-graph sizes and Shift threshold as multiples of lcm(SP, k+1), so that
vLLM's own rounding for verify steps (k+1 tokens per request) keeps every
padded step on a multiple of SP and never carries it across the threshold."""

from __future__ import annotations

import inspect
import math

import pytest

from harness.config import cli_rejects, engine_config, error_line
from harness.drafters import make_eagle3, make_mimo, make_qwen3_next_mtp
from harness.models import make_qwen3_next
from harness.repo import VERSION

# vLLM 0.34 deleted the V1 runner, whose proposers SP lays the drafters out for; the V2
# speculators are not laid out under SP yet (docs/proposals/speculative-decoding-v2.md):
# there a drafter model under SP is refused in one line, and n-gram lookup runs on V2.
V1 = tuple(int(x) for x in VERSION.split(".")) < (0, 34)
NOT_ON_V2 = "needs vLLM <= 0.33.0 for now"


def ngram(k: int) -> dict:
    return dict(method="ngram", num_speculative_tokens=k, prompt_lookup_max=3)


@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle3", "mtp"])
@pytest.mark.parametrize("shift", [False, True])
def test_methods_accepted(llama, models_dir, method, shift):
    target, spec = llama, ngram(3)
    if method == "draft_model":
        spec = dict(method=method, model=str(llama), num_speculative_tokens=2)
    elif method == "eagle3":
        spec = dict(method=method, model=str(make_eagle3(models_dir, llama)),
                    num_speculative_tokens=2)
    elif method == "mtp":
        target, spec = make_mimo(models_dir), dict(method=method, num_speculative_tokens=1)
    kw = dict(tensor_parallel_size=2, sequence_parallel_size=2, shift_parallel=shift,
              speculative_config=spec)
    if not V1 and method != "ngram":
        with pytest.raises(Exception) as excinfo:
            engine_config(target, **kw)
        assert f"('{method}')" in error_line(excinfo, NOT_ON_V2)
        return
    cfg = engine_config(target, **kw)
    assert cfg.speculative_config.method == method
    if method != "ngram":
        # The drafter runs over the target's GPUs, in its rank layout.
        draft = cfg.speculative_config.draft_parallel_config
        assert (draft.sequence_parallel_size, draft.shift_parallel) == (2, shift)
        assert draft.world_size == cfg.parallel_config.world_size
    if V1:   # SP lays out the V1 runner's drafters: V2 is not chosen.
        assert "speculative decoding with sequence_parallel_size > 1" in \
            cfg._get_v2_model_runner_unsupported_features()


@pytest.mark.parametrize("kw,needle", [
    (dict(speculative_config=dict(method="ngram_gpu", num_speculative_tokens=2,
                                  prompt_lookup_max=3)),
     "not 'ngram_gpu' yet"),
    (dict(tensor_parallel_size=2, speculative_config=dict(
        method="draft_model", model="{llama}", num_speculative_tokens=2,
        draft_tensor_parallel_size=1)),
     "draft_tensor_parallel_size=1"),
    (dict(pipeline_parallel_size=2, speculative_config=dict(
        method="draft_model", model="{llama}", num_speculative_tokens=2)),
     "does not support pipeline parallelism yet"),
])
def test_refused_in_one_line(llama, kw, needle):
    spec = kw.get("speculative_config", {})
    if spec.get("model") == "{llama}":
        spec["model"] = str(llama)
        if not V1:      # the drafter model is refused first there
            needle = NOT_ON_V2
    with pytest.raises(Exception) as excinfo:
        engine_config(llama, sequence_parallel_size=2, **kw)
    line = error_line(excinfo, needle)
    assert "sequence_parallel_size" in line, line


@pytest.mark.parametrize("shift", [False, True])
def test_hybrid_target_speculates_with_its_mtp(models_dir, shift):
    """Qwen3-Next's MTP layer (attention and MoE, no GDN) runs in the
    target's layout like any drafter."""
    target = make_qwen3_next_mtp(models_dir, make_qwen3_next(models_dir))
    kw = dict(sequence_parallel_size=2, shift_parallel=shift,
              speculative_config=dict(method="qwen3_next_mtp", num_speculative_tokens=1))
    if not V1:
        with pytest.raises(Exception) as excinfo:
            engine_config(target, **kw)
        error_line(excinfo, NOT_ON_V2)
        return
    cfg = engine_config(target, **kw)
    assert cfg.speculative_config.method == "mtp"
    draft = cfg.speculative_config.draft_parallel_config
    assert (draft.sequence_parallel_size, draft.shift_parallel) == (2, shift)


def test_hybrid_target_refuses_other_methods(models_dir):
    """Untested on a Gated-DeltaNet target (vLLM's CPU engine cannot run
    n-gram there even at TP=1), so refused in one line."""
    target = make_qwen3_next_mtp(models_dir, make_qwen3_next(models_dir))
    with pytest.raises(Exception) as excinfo:
        engine_config(target, sequence_parallel_size=2, speculative_config=ngram(3))
    line = error_line(excinfo, "with its MTP layers (method 'mtp'), not 'ngram' yet")
    assert "Qwen3NextForCausalLM" in line and "-sp 1" in line, line


def test_cli_refuses_an_unserved_method(llama):
    out = cli_rejects(llama, ["-sp", "2", "--speculative-config",
                              '{"method": "ngram_gpu", "num_speculative_tokens": 2}'])
    assert "not 'ngram_gpu' yet" in out, out[-3000:]


def graph_sizes(cfg, k: int) -> list[int]:
    """vLLM's sizing on a GPU (the CPU config is eager), then the V1 runner's
    rounding for speculative decoding, which must change nothing."""
    from vllm.config import CUDAGraphMode

    cc = cfg.compilation_config
    cfg.model_config.enforce_eager = False
    cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = None, None
    cfg._set_cudagraph_sizes()
    sizes = list(cc.cudagraph_capture_sizes)
    adjust = getattr(cc, "adjust_cudagraph_sizes_for_spec_decode", None)
    if adjust is None:       # 0.34: no rounding in the config (the V2 runner's own)
        return sizes
    if len(inspect.signature(adjust).parameters) == 2:    # up to 0.32: also TP's size
        adjust(k + 1, cfg.parallel_config.tensor_parallel_size)
    else:
        adjust(k + 1)
    assert cc.cudagraph_capture_sizes == sizes, "vLLM's k+1 rounding moved the sizes"
    return sizes


@pytest.mark.parametrize("sp", [2, 4])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("threshold", [7, 256, 1024])
def test_sizes_and_threshold_are_multiples_of_sp_and_k_plus_1(llama, sp, k, threshold):
    """Padding never crosses the threshold (as test_shift_config, with the
    runner's padding of verify steps): the worker's mode for the padded
    step equals the scheduler's for the scheduled one, every n."""
    from vllm.distributed import shift

    cfg = engine_config(llama, sequence_parallel_size=sp, shift_parallel=True,
                        shift_parallel_threshold=threshold, speculative_config=ngram(k),
                        max_num_batched_tokens=4096, max_num_seqs=256)
    sizes = graph_sizes(cfg, k)
    m = math.lcm(sp, k + 1)
    t = shift.effective_threshold(cfg)
    assert t % m == 0 and t >= threshold and (t in sizes or t > max(sizes)), (t, sizes)
    # above the threshold steps are split over SP; at or below it, full TP's, k+1 each
    assert sizes and all(s % m == 0 for s in sizes if s > t), (m, sizes)
    assert all(s % (k + 1) == 0 for s in sizes) and (k + 1 in sizes), sizes

    def padded(n):          # what the runners do: a multiple of SP above the threshold
        n = n if n <= t else -(-n // sp) * sp        # (ulysses.pad_tokens), then
        fits = [s for s in sizes if s >= n]          # a captured size if one fits
        return fits[0] if fits else n

    for n in range(1, 4097):
        mode, _ = shift.step_stats(cfg, n)
        assert (mode == "full_tp") == (padded(n) <= t), (n, padded(n), t)
