"""--shift-parallel and --shift-parallel-threshold: flags, config hash,
one-line errors before any worker starts, and the threshold's contract with
CUDA-graph padding (the scheduler's per-mode counts equal the workers'
choice)."""

from __future__ import annotations

import pytest

from harness.config import cli_rejects, config_hash, engine_config, error_line
from harness.models import make_model
from harness.repo import VERSION


def test_cli_flags_and_help():
    from vllm.config import ParallelConfig
    from vllm.config.utils import get_attr_docs
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", "m", "-sp", "2", "--shift-parallel",
                              "--shift-parallel-threshold", "128"])
    ea = EngineArgs.from_cli_args(args)
    assert (ea.shift_parallel, ea.shift_parallel_threshold) == (True, 128)
    plain = EngineArgs.from_cli_args(parser.parse_args(["--model", "m"]))
    assert plain.shift_parallel is False
    assert plain.shift_parallel_threshold == ParallelConfig.shift_parallel_threshold
    docs = get_attr_docs(ParallelConfig)
    assert "full TP" in docs["shift_parallel"] and "one shared KV cache" in docs["shift_parallel"]
    assert "multiple of SP" in docs["shift_parallel_threshold"]


def test_llm_kwargs_and_hash(llama):
    sp = engine_config(llama, sequence_parallel_size=2)
    shift = engine_config(llama, sequence_parallel_size=2, shift_parallel=True)
    other = engine_config(llama, sequence_parallel_size=2, shift_parallel=True,
                          shift_parallel_threshold=64)
    assert shift.parallel_config.shift_parallel and shift.parallel_config.world_size == 2
    hashes = {config_hash(c.parallel_config) for c in (sp, shift, other)}
    assert len(hashes) == 3


@pytest.mark.parametrize("kw,needle", [
    (dict(shift_parallel=True), "needs --sequence-parallel-size > 1"),
    (dict(sequence_parallel_size=2, shift_parallel=True, shift_parallel_threshold=0),
     "must be a whole number >= 1"),
    (dict(sequence_parallel_size=2, shift_parallel=True, shift_parallel_threshold=-5),
     "must be a whole number >= 1"),
    (dict(sequence_parallel_size=2, shift_parallel_threshold=64),
     "only applies with --shift-parallel"),
    (dict(sequence_parallel_size=2, pipeline_parallel_size=2, shift_parallel=True),
     "does not support pipeline parallelism"),
    (dict(sequence_parallel_size=2, shift_parallel=True, enable_lora=True),
     "does not support LoRA"),
])
def test_bad_input_rejected(llama, kw, needle):
    with pytest.raises(Exception) as excinfo:
        engine_config(llama, **kw)
    assert "--shift-parallel" in error_line(excinfo, needle)


@pytest.mark.parametrize("ep", [False, True])
def test_data_parallel_on_a_moe_model_rejected(models_dir, llama, ep):
    """A MoE layer's collectives span the DP replicas, with EP or without
    (upstream splits its experts' weights over DP x TP ranks), while each
    replica picks its mode by its own step: refused for MoE models.  A
    dense model's replicas share no collective, and SP with DP serves MoE
    models (test_e2e_scaleout): both build."""
    moe = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    kw = dict(sequence_parallel_size=2, data_parallel_size=2, enable_expert_parallel=ep)
    with pytest.raises(Exception) as excinfo:
        engine_config(moe, shift_parallel=True, **kw)
    line = error_line(excinfo, "does not support data parallelism on a MoE model")
    assert "Qwen3MoeForCausalLM" in line and "-dp without --shift-parallel" in line, line
    assert engine_config(moe, **kw).parallel_config.data_parallel_size == 2
    dense = engine_config(llama, sequence_parallel_size=2, data_parallel_size=2,
                          shift_parallel=True)
    assert dense.parallel_config.shift_parallel


def test_threshold_at_or_above_the_batch_budget_warns(llama, monkeypatch):
    """A threshold >= --max-num-batched-tokens is legal (plain full TP with
    an idle SP model) but rarely meant, so the startup log says so."""
    from vllm.distributed import shift

    said = []
    monkeypatch.setattr(shift.logger, "warning", lambda msg, *a: said.append(msg % a))
    engine_config(llama, sequence_parallel_size=2, shift_parallel=True,
                  shift_parallel_threshold=64, max_num_batched_tokens=2048)
    assert said == []
    engine_config(llama, sequence_parallel_size=2, shift_parallel=True,
                  max_num_batched_tokens=512)            # the default threshold (1024)
    assert len(said) == 1 and "every step runs in full TP" in said[0], said


@pytest.mark.parametrize("sp,threshold", [(2, 256), (2, 7), (4, 30), (2, 1), (2, 4096)])
def test_padding_never_crosses_the_threshold(llama, sp, threshold):
    """The workers pick the mode from the padded step size, the scheduler
    (/metrics) from the scheduled one.  With the threshold rounded up to a
    multiple of SP and added to the capture sizes, the two always agree."""
    from vllm.distributed import shift

    cfg = engine_config(llama, sequence_parallel_size=sp, shift_parallel=True,
                        shift_parallel_threshold=threshold, max_num_batched_tokens=4096)
    from vllm.distributed import ulysses_config

    gpu_sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    sizes = shift.capture_sizes(cfg, ulysses_config.filter_capture_sizes(cfg, gpu_sizes))
    t = shift.effective_threshold(cfg.parallel_config)
    assert t % sp == 0 and t >= threshold
    if t < max(sizes):
        assert t in sizes
    # the full-TP model's steps are not padded to SP: one request, one token
    assert all(s % sp == 0 for s in sizes if s > t) and (1 in sizes) == (t >= 1)

    def padded(n):          # what the runners do: a multiple of SP above the threshold
        n = n if n <= t else -(-n // sp) * sp        # (ulysses.pad_tokens), then
        fits = [s for s in sizes if s >= n]          # a captured size if one fits
        return fits[0] if fits else n

    for n in range(1, 4097):
        worker_full_tp = padded(n) <= t
        mode, tokens = shift.step_stats(cfg, n)
        assert (mode == "full_tp") == worker_full_tp, (n, padded(n), t)
        assert tokens == n
    assert shift.step_stats(cfg, 0) is None
    assert shift.step_stats(engine_config(llama, sequence_parallel_size=sp), 5) is None


@pytest.mark.skipif(tuple(int(x) for x in VERSION.split(".")) < (0, 34),
                    reason="prefill graph sizes apart from the shared ones are new in vLLM 0.34")
@pytest.mark.parametrize("prefill", [{"max_prefill_cudagraph_capture_tokens": 2048},
                                     {"prefill_cudagraph_capture_token_sizes":
                                      [1, 3, 100, 512, 1000]}])
def test_prefill_graph_sizes_set_apart_keep_the_threshold(llama, prefill):
    """0.34 resolves prefill graph sizes of their own where the user sets them
    or their cap (its deprecation warning asks for that) or Blackwell widens
    them, never through the shared sizes' path: the threshold is added there
    too, so the contract above holds on the sizes the V2 runner's prefill
    graphs pad to; a second resolution keeps them."""
    from vllm.config import CUDAGraphMode
    from vllm.distributed import shift

    sp = 2
    cfg = engine_config(llama, sequence_parallel_size=sp, shift_parallel=True,
                        shift_parallel_threshold=300, max_num_batched_tokens=2048,
                        max_num_seqs=64, compilation_config=prefill)
    cc = cfg.compilation_config
    cfg.model_config.enforce_eager = False         # vLLM's sizing on a GPU
    cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = None, None
    cfg._set_cudagraph_sizes()
    sizes = cc.prefill_cudagraph_capture_token_sizes
    t = shift.effective_threshold(cfg)
    assert t == 300 and t in sizes, sizes
    # above the threshold the V2 runner keeps the sizes SP divides (ulysses.keep_unpadded)
    kept = [s for s in sizes if s <= t or s % sp == 0]

    def padded(n):
        n = n if n <= t else -(-n // sp) * sp
        return next((s for s in kept if s >= n), n)

    for n in range(1, 2049):
        mode, _ = shift.step_stats(cfg, n)
        assert (mode == "full_tp") == (padded(n) <= t), (n, padded(n))
    cfg._set_cudagraph_sizes()
    assert cc.prefill_cudagraph_capture_token_sizes == sizes


def test_cli_rejects_shift_without_sp(llama):
    """`vllm serve --shift-parallel` without SP exits before any worker starts."""
    out = cli_rejects(llama, ["--shift-parallel"])
    assert "it needs --sequence-parallel-size > 1" in out, out[-3000:]


# FlashInfer's fused all-reduce + RMSNorm applies up to a size of activations
# that shrinks with the group: Hopper's table is {2: 64, 4: 2} MiB.  Scaled
# to the test Llama (hidden 128, bf16: 256 bytes a token) so that TP=2's
# limit (4096 tokens) is above the 2048-token batch and TP=4's (256) below.
FUSION_MIB = {2: 1.0, 4: 0.0625}


@pytest.fixture
def hopper_fusion(monkeypatch):
    """The compile ranges vLLM sets on Hopper with FlashInfer: the CPU
    platform has no fusion sizes and cannot build the pass, so the table
    is given and the pass asked for (engine_config sets it before the
    config computes its ranges)."""
    from vllm.config.compilation import PassConfig

    monkeypatch.setattr(PassConfig, "default_fi_allreduce_fusion_max_size_mb",
                        staticmethod(lambda: FUSION_MIB))
    return dict(compilation_config={"pass_config": {"fuse_allreduce_rms": True}})


def test_full_tp_model_fuses_like_plain_tp(llama, hopper_fusion):
    """FlashInfer's fused all-reduce + RMSNorm keeps a workspace per group
    of ranks (patch flashinfer-allreduce-workspace-per-group): the full-TP
    model, which reduces over TP*SP ranks, asks for the fused pass as a
    plain TP=4 model does, gets the full-TP group's workspace, and compiles
    the ranges plain TP=4 compiles, one of which ends where the fusion
    stops (without it the pass applies to no range: lease 9's full-TP
    graphs had no fused op)."""
    from vllm.distributed import ulysses

    cfg = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2,
                        shift_parallel=True, **hopper_fusion)
    plain = engine_config(llama, tensor_parallel_size=4, **hopper_fusion)
    full = ulysses.full_tp_config(cfg)
    assert full.parallel_config.tensor_parallel_size == 4
    assert full.compilation_config.pass_config.fuse_allreduce_rms
    assert plain.compilation_config.compile_ranges_endpoints == [256, 2048]
    assert full.compilation_config.compile_ranges_endpoints == [256, 2048]
    assert cfg.compilation_config.compile_ranges_endpoints == [2048]   # the SP model's
    assert full.compilation_config is not cfg.compilation_config    # its own layer table
    assert (config_hash(full.parallel_config)
            != config_hash(cfg.parallel_config))                 # its own compile cache


def test_shift_fuses_allreduce_by_default_without_tp(llama, monkeypatch):
    """vLLM turns the fused all-reduce + RMSNorm on by default at TP > 1 on
    Hopper.  Under Shift the full-TP model reduces over TP*SP ranks, so at
    SP=2 without TP (2 GPUs) the default is on too (patch
    config-shift-fuses-allreduce-by-default) and the full-TP model's copy
    of the config keeps it; plain SP=2 and TP=1 have nothing to fuse."""
    from vllm.config.vllm import enable_allreduce_rms_fusion
    from vllm.platforms import current_platform
    from vllm.utils import flashinfer

    shift = engine_config(llama, sequence_parallel_size=2, shift_parallel=True)
    sp = engine_config(llama, sequence_parallel_size=2)
    tp1 = engine_config(llama)
    # Hopper with FlashInfer, for the default's own test only (the CPU
    # platform would make every config above differently).
    monkeypatch.setattr(flashinfer, "has_flashinfer", lambda: True)
    monkeypatch.setattr(current_platform, "is_cuda", lambda: True)
    monkeypatch.setattr(current_platform, "is_device_capability", lambda c: c == 90)
    monkeypatch.setattr(current_platform, "is_device_capability_family", lambda c: False)
    assert [enable_allreduce_rms_fusion(c) for c in (shift, sp, tp1)] == [True, False, False]


@pytest.mark.skipif(tuple(int(x) for x in VERSION.split(".")) >= (0, 34),
                    reason="the V1 proposer place_drafter wraps is gone from vLLM 0.34 "
                           "(its V2 speculator: the next test)")
def test_drafter_under_shift_builds_with_its_own_config(llama, monkeypatch, hopper_fusion):
    """Under Shift a drafter runs in the full-TP layout (its all-reduces
    span TP*SP ranks, through the full-TP group's FlashInfer workspace): the
    config it is built from asks for the fused all-reduce and compiles the
    range it applies to at TP*SP; its layers join the runner's table, and
    the runner's own ranges stay the SP model's."""
    from contextlib import nullcontext

    from vllm.distributed import shift, ulysses
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    cfg = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2,
                        shift_parallel=True, **hopper_fusion)
    seen = []

    class Proposer(SpecDecodeBaseProposer):
        def __init__(self):             # only what place_drafter and load_model touch
            self.vllm_config = cfg

        def _create_draft_vllm_config(self):    # upstream's: a replace() of the runner's
            return self.vllm_config

        def load_model(self, target):   # as upstream's _get_model: the config it builds with
            cc = self._create_draft_vllm_config().compilation_config
            table = cfg.compilation_config.static_forward_context
            seen.append((cc.pass_config.fuse_allreduce_rms, cc.compile_ranges_endpoints,
                         cc.static_forward_context is table))
            self._draft_attn_layer_names = []

    monkeypatch.setattr(ulysses, "as_full_tp", nullcontext)     # no process groups here
    drafter = shift.place_drafter(Proposer(), cfg)
    drafter.load_model(object())
    assert seen == [(True, [256, 2048], True)]
    assert drafter.vllm_config is cfg and cfg.compilation_config.compile_ranges_endpoints == [2048]


@pytest.mark.skipif(tuple(int(x) for x in VERSION.split(".")) < (0, 34),
                    reason="vLLM 0.34's V2 speculators (the V1 proposer: the test above)")
def test_speculator_under_shift_builds_and_runs_in_full_tp(llama, monkeypatch, hopper_fusion):
    """H5, V2: under Shift a DraftModelSpeculator builds its model with
    _DRAFTING set (no full-TP twin of the drafter), from the runner's table
    and a config whose compile ranges fuse at TP*SP, borrowing the full-TP
    model; the runner's config is back after the load; its drafter layers
    are recorded for bind_kv_cache; propose, capture and
    init_cudagraph_manager run inside as_full_tp.  n-gram's speculator and
    any speculator without Shift are left as they are."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from vllm.distributed import shift, ulysses
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    cfg = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2,
                        shift_parallel=True, **hopper_fusion)
    seen, inside = [], []

    @contextmanager
    def full_tp():
        inside.append(True)
        try:
            yield
        finally:
            inside.pop()

    full_tp_model = object()
    monkeypatch.setattr(ulysses, "as_full_tp", full_tp)     # no process groups here
    monkeypatch.setattr(shift, "_STATE", SimpleNamespace(model=full_tp_model,
                                                         drafter_layers=set()))

    class Speculator(DraftModelSpeculator):
        def __init__(self):             # only what place_drafter and load_model touch
            self.vllm_config = cfg

        def load_draft_model(self, target, names):
            raise AssertionError("not reached: load_model is the test's")

        def load_model(self, target):   # as upstream's: builds from self.vllm_config
            cc = self.vllm_config.compilation_config
            table = cfg.compilation_config.static_forward_context
            seen.append((cc.pass_config.fuse_allreduce_rms, cc.compile_ranges_endpoints,
                         cc.static_forward_context is table, target is full_tp_model,
                         shift._DRAFTING, bool(inside)))
            self.draft_attn_layer_names = {"draft_model.layers.0.attn"}

        def propose(self, *args, **kwargs):
            return bool(inside)

        def capture(self):
            return bool(inside)

        def init_cudagraph_manager(self, mode):
            return bool(inside)

    drafter = shift.place_drafter(Speculator(), cfg)
    drafter.load_model(object())
    assert seen == [(True, [256, 2048], True, True, True, True)]
    assert drafter.vllm_config is cfg and cfg.compilation_config.compile_ranges_endpoints == [2048]
    assert not shift._DRAFTING
    assert shift._STATE.drafter_layers == {"draft_model.layers.0.attn"}
    assert [drafter.propose(), drafter.capture(), drafter.init_cudagraph_manager(None)] == \
        [True, True, True]
    # n-gram lookup has no model to place; without Shift nothing is placed
    ngram = SimpleNamespace(propose=lambda: bool(inside))
    assert shift.place_drafter(ngram, cfg) is ngram and ngram.propose() is False
    plain = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2)
    other = Speculator()
    assert shift.place_drafter(other, plain) is other and other.propose() is False
