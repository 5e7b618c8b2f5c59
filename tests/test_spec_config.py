"""Speculative decoding with SP and Shift in the engine config: the methods
served, one-line refusals of the rest before any worker starts, and the
CUDA-graph sizes and Shift threshold as multiples of lcm(SP, k+1), so that
vLLM's own rounding for verify steps (k+1 tokens per request) keeps every
padded step on a multiple of SP and never carries it across the threshold."""

from __future__ import annotations

import inspect
import json
import math

import pytest

from harness.config import cli_rejects, engine_config, error_line
from harness.drafters import (
    make_eagle,
    make_eagle3,
    make_mimo,
    make_mimo_config_mtp2,
    make_qwen3_5_mtp,
    make_qwen3_next_mtp,
)
from harness.models import make_qwen3_next, make_vl_model
from harness.repo import VERSION

# vLLM 0.34 deleted the V1 runner: its V2 speculators say whether SP lays
# them out (SpeculatorConfig.supports_sp, patch config-spec-decode-with-sp,
# read by ulysses_config.lays_out_sp); up to 0.33 a method list does.
V1 = tuple(int(x) for x in VERSION.split(".")) < (0, 34)
v2_only = pytest.mark.skipif(V1, reason="vLLM 0.34's V2 speculators")
# What SP lays out on 0.34: every other speculator must be refused.
V2_SERVED = ["draft_model", "eagle", "eagle3", "mtp", "ngram", "ngram_gpu", "suffix"]


def ngram(k: int) -> dict:
    return dict(method="ngram", num_speculative_tokens=k, prompt_lookup_max=3)


def spec_for(method: str, llama, models_dir) -> tuple:
    """(target, speculative_config) of one method on the tests' models."""
    if method == "draft_model":
        return llama, dict(method=method, model=str(llama), num_speculative_tokens=2)
    if method == "eagle3":
        return llama, dict(method=method, model=str(make_eagle3(models_dir, llama)),
                           num_speculative_tokens=2)
    if method == "eagle":
        return llama, dict(method=method, model=str(make_eagle(models_dir, llama)),
                           num_speculative_tokens=2)
    if method == "mtp":
        return make_mimo(models_dir), dict(method=method, num_speculative_tokens=1)
    if method == "suffix":
        return llama, dict(method=method, num_speculative_tokens=3)
    return llama, dict(ngram(3), method=method)


@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle3", "mtp",
                                    pytest.param("ngram_gpu", marks=v2_only),
                                    pytest.param("suffix", marks=v2_only),
                                    pytest.param("eagle", marks=v2_only)])
@pytest.mark.parametrize("shift", [False, True])
def test_methods_accepted(llama, models_dir, method, shift):
    target, spec = spec_for(method, llama, models_dir)
    cfg = engine_config(target, tensor_parallel_size=2, sequence_parallel_size=2,
                        shift_parallel=shift, speculative_config=spec)
    assert cfg.speculative_config.method == method
    if method not in ("ngram", "ngram_gpu", "suffix"):
        # The drafter runs over the target's GPUs, in its rank layout.
        draft = cfg.speculative_config.draft_parallel_config
        assert (draft.sequence_parallel_size, draft.shift_parallel) == (2, shift)
        assert draft.world_size == cfg.parallel_config.world_size
    if V1:   # SP lays out the V1 runner's drafters: V2 is not chosen.
        assert "speculative decoding with sequence_parallel_size > 1" in \
            cfg._get_v2_model_runner_unsupported_features()
    else:    # the speculator it resolved to is one SP lays out
        from vllm.distributed import ulysses_config

        assert ulysses_config.lays_out_sp(type(cfg.speculative_config.speculator_config))


@pytest.mark.parametrize("kw,needle", [
    pytest.param(dict(speculative_config=dict(method="ngram_gpu", num_speculative_tokens=2,
                                              prompt_lookup_max=3)),
                 "not 'ngram_gpu' yet",
                 marks=pytest.mark.skipif(not V1, reason="served on vLLM 0.34")),
    (dict(tensor_parallel_size=2, speculative_config=dict(
        method="draft_model", model="{llama}", num_speculative_tokens=2,
        draft_tensor_parallel_size=1)),
     "draft_tensor_parallel_size=1"),
    (dict(pipeline_parallel_size=2, speculative_config=dict(
        method="draft_model", model="{llama}", num_speculative_tokens=2)),
     "does not support pipeline parallelism yet"),
    pytest.param(dict(speculative_config=dict(ngram(2), enable_adaptive_verification=True)),
                 "adaptive verification", marks=v2_only),
    pytest.param(dict(shift_parallel=True, speculative_config=dict(
        method="draft_model", model="{llama}", num_speculative_tokens=2,
        draft_load_config=dict(load_format="sharded_state"))),
                 "cannot load a 'sharded_state' drafter", marks=v2_only),
])
def test_refused_in_one_line(llama, kw, needle):
    spec = kw.get("speculative_config", {})
    if spec.get("model") == "{llama}":
        spec["model"] = str(llama)
    if isinstance(spec.get("draft_load_config"), dict):
        from vllm.config import LoadConfig

        spec["draft_load_config"] = LoadConfig(**spec["draft_load_config"])
    with pytest.raises(Exception) as excinfo:
        engine_config(llama, sequence_parallel_size=2, **kw)
    line = error_line(excinfo, needle)
    assert "sequence_parallel_size" in line or "--shift-parallel" in line, line


@v2_only
@pytest.mark.parametrize("shift", [False, True])
def test_multi_module_mtp_refused_naming_it(models_dir, shift):
    """An MTP checkpoint with two modules at k=2 resolves to vLLM 0.34's
    MultiModuleMTPSpeculator, whose config brings its own speculator: the
    one line names the method and the class, and the way out."""
    target = make_mimo_config_mtp2(models_dir)
    with pytest.raises(Exception) as excinfo:
        engine_config(target, sequence_parallel_size=2, shift_parallel=shift,
                      speculative_config=dict(method="mtp", num_speculative_tokens=2))
    line = error_line(excinfo, "does not lay out the 'mtp' speculator")
    assert "MultiModuleMTPSpeculatorConfig" in line and "-sp 1" in line, line
    for method in V2_SERVED:
        assert method in line, (method, line)


@v2_only
def test_plugin_speculator_refused_by_name(llama, models_dir, monkeypatch):
    """A plugin's config that subclasses EAGLE's with a speculator of its
    own is refused until it says supports_sp itself; one that only
    re-configures EAGLE's speculator inherits EAGLE's flag."""
    from vllm.v1.worker.gpu.spec_decode import speculator_config as sc
    from vllm.v1.worker.gpu.spec_decode.eagle.config import EagleSpeculatorConfig

    class MyEagle(EagleSpeculatorConfig):
        speculator_class = "my_plugin.speculator.MySpeculator"

    class MyEagleOptions(EagleSpeculatorConfig):
        pass

    monkeypatch.setitem(sc._CUSTOM_CONFIGS, "my_eagle", MyEagle)
    monkeypatch.setitem(sc._CUSTOM_CONFIGS, "my_eagle_options", MyEagleOptions)
    head = str(make_eagle(models_dir, llama))
    with pytest.raises(Exception) as excinfo:
        engine_config(llama, sequence_parallel_size=2, speculative_config=dict(
            method="my_eagle", model=head, num_speculative_tokens=2))
    line = error_line(excinfo, "does not lay out the 'my_eagle' speculator (MyEagle)")
    assert "sequence_parallel_size > 1" in line, line
    cfg = engine_config(llama, sequence_parallel_size=2, speculative_config=dict(
        method="my_eagle_options", model=head, num_speculative_tokens=2))
    assert type(cfg.speculative_config.speculator_config) is MyEagleOptions


@v2_only
def test_supports_sp_table():
    """H3's rule over every speculator config vLLM ships (the method table,
    and the configs a checkpoint or option resolves to): exactly the served
    set is admitted, so a new upstream config shows up here as a diff, not
    as a silent admission.  The rule reads the flag from the class that
    declares the speculator_class, never inherited past it."""
    import importlib
    import pkgutil

    from vllm.distributed import ulysses_config
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.worker.gpu.spec_decode import speculator_config as sc

    # every SpeculatorConfig subclass in vLLM's speculator config modules
    pkg = importlib.import_module("vllm.v1.worker.gpu.spec_decode")
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.endswith("config"):
            importlib.import_module(info.name)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    shipped = {c for c in subclasses(sc.SpeculatorConfig) if c.__module__.startswith("vllm.")}
    admitted = sorted(c.__name__ for c in shipped if ulysses_config.lays_out_sp(c))
    assert admitted == sorted([
        "Eagle3SpeculatorConfig", "EagleSpeculatorConfig", "MTPSpeculatorConfig",
        "NgramGPUSpeculatorConfig", "NgramSpeculatorConfig", "StandaloneARSpeculatorConfig",
        "SuffixSpeculatorConfig"]), admitted
    refused = {c.__name__ for c in shipped} - set(admitted)
    assert {"MultiModuleMTPSpeculatorConfig", "Gemma4MTPSpeculatorConfig",
            "DFlashSpeculatorConfig", "DSparkSpeculatorConfig",
            "ExtractHiddenStatesSpeculatorConfig"} <= refused, refused
    by_method = {m: ulysses_config.lays_out_sp(resolve_obj_by_qualname(q))
                 for m, q in sc._CONFIG_BY_METHOD.items()}
    assert sorted(m for m, ok in by_method.items() if ok) == V2_SERVED, by_method
    assert ulysses_config.sp_speculative_methods() == V2_SERVED
    # inherited past its owner, the flag would admit Gemma-4's own speculator
    from vllm.v1.worker.gpu.spec_decode.gemma4.config import Gemma4MTPSpeculatorConfig

    assert Gemma4MTPSpeculatorConfig.supports_sp
    assert not ulysses_config.lays_out_sp(Gemma4MTPSpeculatorConfig)


def config_only_drafter(llama, root, method: str):
    """A DFlash/DSpark-style drafter's config for ``llama``, config only."""
    from harness.config import write_config

    arch = {"dflash": "DFlashDraftModel", "dspark": "DSparkDraftModel"}.get(method)
    draft = json.loads((llama / "config.json").read_text())
    draft.update(architectures=[arch], num_hidden_layers=1, block_size=3,
                 dflash_config=dict(target_layer_ids=[0, 1], mask_token_id=0))
    return write_config(root / method, draft)


@v2_only
@pytest.mark.parametrize("method", ["dflash", "dspark", "extract_hidden_states"])
def test_new_methods_refused_naming_them(llama, tmp_path, method):
    """The methods new in vLLM 0.34 (and hidden-state extraction), refused
    in one line naming the method, while the engine config is built (a
    config-only drafter: no weights are read)."""
    spec = dict(method=method, model=str(config_only_drafter(llama, tmp_path, method)),
                num_speculative_tokens=2)
    if method == "extract_hidden_states":
        spec = dict(method=method, num_speculative_tokens=1)
    with pytest.raises(Exception) as excinfo:
        engine_config(llama, sequence_parallel_size=2, speculative_config=spec)
    line = error_line(excinfo, f"does not lay out the '{method}' speculator")
    assert "sequence_parallel_size > 1" in line and "-sp 1" in line, line


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5"])
def test_hybrid_target_speculates_with_its_mtp(models_dir, family, shift):
    """Qwen3-Next's MTP layer (attention and MoE, no GDN), and Qwen3.5's over
    its multimodal class, runs in the target's layout like any drafter."""
    if family == "qwen3_next":
        target = make_qwen3_next_mtp(models_dir, make_qwen3_next(models_dir))
    else:
        target = make_qwen3_5_mtp(models_dir, make_vl_model(models_dir, "qwen3_5_vl",
                                                              dtype="bfloat16"))
    cfg = engine_config(target, sequence_parallel_size=2, shift_parallel=shift,
                        speculative_config=dict(method=f"{family}_mtp",
                                                num_speculative_tokens=1))
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


def test_cli_refuses_an_unserved_method(llama, tmp_path):
    if V1:
        args, needle = '{"method": "ngram_gpu", "num_speculative_tokens": 2}', \
            "not 'ngram_gpu' yet"
    else:
        args = json.dumps(dict(method="dflash", num_speculative_tokens=2,
                               model=str(config_only_drafter(llama, tmp_path, "dflash"))))
        needle = "does not lay out the 'dflash' speculator"
    out = cli_rejects(llama, ["-sp", "2", "--speculative-config", args])
    assert needle in out, out[-3000:]


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


@v2_only
@pytest.mark.parametrize("sp", [2, 4])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("method", ["draft_model", "eagle3"])
def test_graph_sizes_kept_are_multiples_of_sp(llama, models_dir, monkeypatch, sp, k, method):
    """H2 (patch spec-decode-speculators-layout): every graph manager, the
    target's and each speculator's, keeps only descriptors whose size SP
    padding leaves as it is (``ulysses.keep_unpadded``), since a step that
    takes a graph is not padded again.  Over the engine's resolved prefill
    token sizes and its request sizes times each manager's query length
    (the target's k+1, the draft model's prefill k+2, the drafters' decode
    1, over upstream's own draft decode grid): under SP exactly the
    multiples of SP are kept (and some are not: a 1-token graph); under
    Shift everything up to the threshold is kept, the threshold among them;
    at SP=1 nothing is dropped."""
    from types import SimpleNamespace

    from vllm.config.compilation import decode_cudagraph_capture_grid
    from vllm.distributed import ulysses

    target, spec = spec_for(method, llama, models_dir)
    spec["num_speculative_tokens"] = k
    cfg = engine_config(target, sequence_parallel_size=sp, shift_parallel=True,
                        shift_parallel_threshold=64, speculative_config=spec,
                        max_num_batched_tokens=1024, max_num_seqs=64)
    graph_sizes(cfg, k)
    cc = cfg.compilation_config
    token_sizes = list(cc.prefill_cudagraph_capture_token_sizes or cc.cudagraph_capture_sizes)
    requests = list(cc.decode_cudagraph_capture_request_sizes or range(1, 65))
    grid = decode_cudagraph_capture_grid(cfg.scheduler_config.max_num_seqs)
    sizes = sorted({*token_sizes, *(n * q for n in requests for q in (k + 1, k + 2)),
                    *grid})
    descs = [SimpleNamespace(num_tokens=n) for n in sizes]

    def kept(sp_world: int, unsliced: int = 0) -> list[int]:
        monkeypatch.setattr(ulysses, "_SP", SimpleNamespace(world_size=sp_world)
                            if sp_world > 1 else None)
        monkeypatch.setattr(ulysses, "_UNSLICED_UP_TO", unsliced)
        return [d.num_tokens for d in ulysses.keep_unpadded(descs)]

    under_sp = kept(sp)
    assert under_sp == [n for n in sizes if n % sp == 0], (sp, sizes, under_sp)
    assert 1 in sizes and 1 not in under_sp
    t = cfg.parallel_config.shift_parallel_threshold
    from vllm.distributed import shift

    t = shift.effective_threshold(cfg)
    under_shift = kept(sp, unsliced=t)
    assert [n for n in under_shift if n <= t] == [n for n in sizes if n <= t]
    assert all(n % sp == 0 for n in under_shift if n > t), under_shift
    assert t in token_sizes and t in under_shift, (t, token_sizes)
    assert kept(1) == sizes                        # SP=1 (a Shift drafter in full TP)


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("method", ["draft_model", "eagle3"])
def test_resolved_sizes_survive_a_second_resolution(llama, models_dir, method, shift):
    """0.34 passes a resolved config through ``replace`` (a draft model's
    config; the key of FlashInfer's autotune cache at warm-up, with any
    speculator), which resolves the CUDA-graph sizes again;
    upstream refuses a second resolution that changes the sizes it
    recorded, and those include the drafter's one-token decode graphs, which
    are no multiples of SP.  So resolving again leaves every size as it
    was, under SP and Shift."""
    target, spec = spec_for(method, llama, models_dir)
    cfg = engine_config(target, sequence_parallel_size=2, shift_parallel=shift,
                        speculative_config=spec, max_num_batched_tokens=1024,
                        max_num_seqs=64)
    graph_sizes(cfg, spec["num_speculative_tokens"])
    cc = cfg.compilation_config
    names = [n for n in ("cudagraph_capture_sizes", "max_cudagraph_capture_size",
                         "prefill_cudagraph_capture_token_sizes",
                         "decode_cudagraph_capture_request_sizes") if hasattr(cc, n)]
    first = {n: getattr(cc, n) for n in names}
    cfg._set_cudagraph_sizes()
    assert {n: getattr(cc, n) for n in names} == first
