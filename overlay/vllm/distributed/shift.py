# SPDX-License-Identifier: Apache-2.0
"""Shift Parallelism: each step runs either Ulysses SP or plain TP over the
same TP*SP GPUs, over one shared KV cache.

Why: Ulysses SP (``ulysses.py``) is fast on large steps -- long prefills,
heavy batches -- because each GPU works on 1/SP of the tokens and pays no
all-reduce on the others.  On small steps (decode at low traffic) it is slow:
every GPU reads its whole TP shard of the weights for a handful of tokens.
Plain TP over all TP*SP GPUs (the "full-TP" layout) reads 1/(TP*SP) of the
weights per GPU and wins there.  Both layouts put the *same* attention heads
on each GPU (the full-TP group is ordered for that, see ``ulysses.py``), so
the KV cache written in one mode is read unchanged in the other, and the
engine can pick the mode per step.

How:

* A second copy of the model, laid out as TP=TP*SP over the full-TP group,
  is built and loaded beside the SP model (``attach``), under the full-TP
  view of the process groups (``ulysses.as_full_tp``), with its own compile
  cache tag and its own table of layers by name.  Its attention layers are
  bound to the SP model's KV-cache tensors (``bind_kv_cache``): one
  allocation.
* The full-TP model's weights are views into the SP model's wherever its
  shard is one block of the SP shard (``shift_weights``): row-parallel
  linears, embeddings, the LM head, and merged QKV and gate/up projections,
  whose SP rows are laid out for it before they are processed (``arrange``,
  called by the loader before the SP model's weights are loaded).
* The SP model's ``forward`` dispatches on the step's (padded) token count:
  at most ``threshold`` runs the full-TP model.  Every rank of a replica
  pads the same scheduler output the same way, so all ranks choose the same
  mode and no collective diverges.  Only steps above the threshold are
  padded to a multiple of SP (the full-TP model's are not split over SP
  ranks: ``ulysses.set_unsliced_steps``, so one request decodes through a
  one-token graph, as under plain TP).  The threshold is rounded up to a
  multiple of SP and added to the CUDA-graph capture sizes, so padding never
  moves a step across it: "padded <= threshold" is "scheduled <= threshold",
  which is what the scheduler counts for ``/metrics``.
* Logits are computed once per step whatever the mode, by the full-TP
  model's LM head (the vocabulary split over all TP*SP GPUs, not repeated
  on each SP rank); both modes return the hidden states of the whole step,
  and sampling stays the runner's.
* A speculative drafter (draft model, EAGLE head, MTP layers) is built and
  run in the full-TP layout only (``place_drafter``): after its first pass
  over the step, every draft step holds one token per request, the small
  steps full TP is for, and a drafter that borrows the target's embedding
  or LM head borrows the full-TP model's, laid out as it is.  Its attention
  layers cache the heads full TP puts on each GPU, which are the SP
  model's: one KV cache still serves all three.  The target's verify steps
  ((k+1) tokens per request) are ordinary steps: their size picks the mode,
  drafts counted, and the threshold is a multiple of k+1 as well as of SP
  (``ulysses_config.capture_multiple``) so that CUDA graphs padded for
  speculation never carry a step across it.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed import shift_weights, ulysses, ulysses_config, ulysses_multimodal
from vllm.logger import init_logger

if TYPE_CHECKING:
    from vllm.config import ParallelConfig, VllmConfig

logger = init_logger(__name__)


MODE_SP, MODE_FULL_TP = "sp", "full_tp"


@dataclass
class _Shift:
    model: torch.nn.Module            # the full-TP model
    layers: dict[str, Any]            # its layers by name (attention, MoE)
    threshold: int                    # effective: a multiple of SP
    sp_layers: dict[str, Any] = field(default_factory=dict)   # the SP model's, by name
    drafter_layers: set[str] = field(default_factory=set)     # in the SP model's table
    shared_bytes: int = 0
    copied_bytes: int = 0
    reads: dict[str, int] = field(default_factory=dict)      # shift_weights.read_paths
    steps: dict[str, int] = field(default_factory=lambda: {MODE_SP: 0, MODE_FULL_TP: 0})


_STATE: _Shift | None = None
_BUILDING = False
_DRAFTING = False


# ---------------------------------------------------------------- config

def enabled(config: VllmConfig | ParallelConfig) -> bool:
    pc = getattr(config, "parallel_config", config)
    return bool(getattr(pc, "shift_parallel", False))


def effective_threshold(config: VllmConfig | ParallelConfig) -> int:
    """The threshold rounded up to a multiple of SP (and, with speculative
    decoding, of k+1: ``ulysses_config.capture_multiple``): every step above
    it is padded to such a multiple, so a threshold between two could not be
    honoured exactly."""
    return ulysses_config.shift_threshold(config)


def validate_parallel_config(pc: ParallelConfig) -> None:
    """Checks that need no model.  Raises ValueError with a one-line fix."""
    if _BUILDING:
        # The full-TP model's own config (SP folded into TP, shift still
        # on: see ulysses.full_tp_config), re-validated when a multimodal
        # model builds its language model from a copy of it.
        return
    threshold = pc.shift_parallel_threshold
    if not pc.shift_parallel:
        if threshold != type(pc).shift_parallel_threshold:   # the field's default
            raise ValueError("--shift-parallel-threshold only applies with --shift-parallel: "
                             "add --shift-parallel or drop the threshold")
        return
    if pc.sequence_parallel_size < 2:
        raise ValueError("--shift-parallel switches between Ulysses SP and full TP over the "
                         "same GPUs: it needs --sequence-parallel-size > 1 (e.g. -sp 2)")
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
        raise ValueError(f"--shift-parallel-threshold must be a whole number >= 1 (steps "
                         f"with at most that many tokens run in full TP), got {threshold!r}")
    if pc.pipeline_parallel_size > 1:
        raise ValueError("--shift-parallel does not support pipeline parallelism yet "
                         "(each stage would need its own mode switch): use -pp 1")


def verify_config(config: VllmConfig) -> None:
    """Checks that need the whole config, before any worker starts."""
    if not enabled(config):
        return
    if config.lora_config is not None:
        raise ValueError("--shift-parallel does not support LoRA yet: the full-TP model would "
                         "need its own adapters; drop --enable-lora or --shift-parallel")
    mc = config.model_config
    if mc is not None and mc.runner_type not in ("generate", "draft"):
        raise ValueError(f"--shift-parallel supports generative models only, not runner "
                         f"'{mc.runner_type}'")
    if mc is not None and mc.is_moe and config.parallel_config.data_parallel_size > 1:
        # Each replica picks its mode by its own step size, while a MoE
        # layer's collectives span the replicas (with or without EP): two
        # replicas in different modes would run mismatched collectives.
        raise ValueError(f"--shift-parallel does not support data parallelism on a MoE model "
                         f"({mc.architecture}) yet: each replica picks SP or full TP by its own "
                         "step, while the MoE layers gather tokens over all replicas; serve "
                         "one -dp 1 engine a replica, or -dp without --shift-parallel")
    if config.load_config.load_format in ("sharded_state", "tensorizer"):
        raise ValueError(f"--shift-parallel cannot load '{config.load_config.load_format}' "
                         "checkpoints: they hold one TP layout's shards, the full-TP model "
                         "needs another; use a plain checkpoint")
    budget = config.scheduler_config.max_num_batched_tokens
    t = effective_threshold(config)
    if budget is not None and budget <= t:
        # Legal (it is plain full TP with a spare SP model), but rarely meant:
        # the default threshold is large enough to meet a small batch budget.
        logger.warning("Shift parallelism: threshold %d >= --max-num-batched-tokens %d, so "
                       "every step runs in full TP and the SP model never runs; lower "
                       "--shift-parallel-threshold or raise --max-num-batched-tokens", t, budget)


def capture_sizes(config: VllmConfig, sizes: list[int]) -> list[int]:
    """Add the threshold to the CUDA-graph capture sizes (when in range), so
    a step at or below it never pads past it.  Sizes <= threshold are
    captured by the full-TP model, sizes above it by the SP model: each
    graph belongs to the one mode that replays it.

    At vLLM's default sizing the largest graph is SP x upstream's
    (``ulysses_config.default_max_capture_size``), which is right for the SP
    model only: an SP rank holds 1/SP of a step's tokens, a full-TP rank all
    of them.  So the full-TP model's graphs stop at 1/SP of the largest, the
    bound upstream keeps for plain TP, and steps between that and the
    threshold run eagerly in full TP (the threshold itself stays captured
    when SP graphs lie above it).  Captured up to 1024 tokens, the full-TP
    model of 70B FP8 at TP=2 x SP=2 took 3.17 GiB of graphs against plain
    TP=4's 1.15 (its all-reduces past 512 tokens overflow the custom
    all-reduce's 8 MiB buffer and are captured as NCCL kernels), memory vLLM
    does not count when it sizes the KV cache: Shift's start ran out of it
    on 4xH100 (benchmarks/results/2026-11-26-4gpu-70b-fp8-tier1/).  Sizes
    the user set are kept (so a config resolved again keeps its own)."""
    if not enabled(config) or not sizes:
        return sizes
    t = effective_threshold(config)
    cc = config.compilation_config
    if cc.max_cudagraph_capture_size is None and cc.cudagraph_capture_sizes is None:
        full_tp_max = max(sizes) // config.parallel_config.sequence_parallel_size
        sizes = [s for s in sizes if s <= full_tp_max or s > t] or sizes[:1]
    sizes = _with_threshold(sizes, t)
    full_tp = [s for s in sizes if s <= t]
    logger.info("Shift parallelism: threshold %d tokens; CUDA graphs: full TP for %s, "
                "SP for %s", t, _ranges(full_tp), _ranges([s for s in sizes if s > t]))
    return sizes


def prefill_capture_sizes(config: VllmConfig, sizes: list[int]) -> list[int]:
    """vLLM 0.34's prefill graphs (``prefill_cudagraph_capture_token_sizes``)
    take the sizes above (``capture_sizes``) unless the user sets them or
    their cap (as 0.34's deprecation warning asks) or the platform widens
    them (Blackwell's grid up to 8192 tokens): then add the threshold to
    them as well, so a step at or below it still never pads past it and the
    scheduler's per-mode counts stay the workers' choice."""
    if not enabled(config) or not sizes:
        return sizes
    return _with_threshold(sizes, effective_threshold(config))


def _with_threshold(sizes: list[int], t: int) -> list[int]:
    """The sorted sizes with the threshold among them when a larger one exists."""
    return sorted({*sizes, t}) if t < max(sizes) else sizes


def _ranges(sizes: list[int]) -> str:
    if not sizes:
        return "none"
    return f"{len(sizes)} sizes {sizes[0]}..{sizes[-1]}"


# ---------------------------------------------------------------- model

def arrange(model: torch.nn.Module, vllm_config: VllmConfig) -> None:
    """Called by the model loader with the SP model before its weights are
    loaded: merged layers lay their rows out so that the full-TP model can
    view them (``shift_weights.arrange``)."""
    if enabled(vllm_config) and not _BUILDING and not _DRAFTING:
        n = shift_weights.arrange(model)
        logger.info("Shift parallelism: %d merged layers (QKV, gate/up) of the SP model lay "
                    "their rows out in %d blocks for the full-TP model to view",
                    n, ulysses.sp_size())


def attach(model: torch.nn.Module, vllm_config: VllmConfig,
           load: Callable[[VllmConfig], torch.nn.Module]) -> torch.nn.Module:
    """Called by the model loader with the freshly loaded SP model.  Loads
    the full-TP model with ``load`` and makes ``model.forward`` pick the
    mode per step.  Returns ``model``."""
    global _STATE, _BUILDING
    if not enabled(vllm_config) or _BUILDING or _DRAFTING:
        return model
    from vllm.compilation.backends import set_model_tag

    before = _allocated()
    cfg = ulysses.full_tp_config(vllm_config)
    _BUILDING = True
    try:
        with ulysses.as_full_tp(), set_model_tag("shift_full_tp"):
            full = load(cfg)
    finally:
        _BUILDING = False
    state = _Shift(full, cfg.compilation_config.static_forward_context,
                   effective_threshold(vllm_config),
                   vllm_config.compilation_config.static_forward_context)
    load_format = getattr(cfg.load_config.load_format, "value", cfg.load_config.load_format)
    state.shared_bytes = shift_weights.share(model, full, check_values=load_format != "dummy")
    ulysses_multimodal.share_side_inputs(model, full)
    state.copied_bytes = _param_bytes(full) - state.shared_bytes
    state.reads = shift_weights.read_paths(model)
    _STATE = state
    ulysses.set_unsliced_steps(state.threshold)
    _dispatch(model, state)
    _guard_weight_updates(model, state)
    after = _allocated()
    extra = None if before is None or after is None else after - before
    logger.info("Shift parallelism: full-TP model (TP=%d) loaded beside the SP model: "
                "%.2f GiB of its weights are views of the SP model's, %.2f GiB are "
                "its own%s; threshold %d tokens; the SP model reads %d gate/up outputs "
                "in blocks and gathers %d merged outputs",
                cfg.parallel_config.tensor_parallel_size, state.shared_bytes / 2**30,
                state.copied_bytes / 2**30,
                f" (device memory +{extra / 2**30:.2f} GiB)" if extra is not None else "",
                state.threshold, state.reads["blocked"], state.reads["gathered"])
    return model


def _allocated() -> int | None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.memory_allocated()
    return None


def _param_bytes(model: torch.nn.Module) -> int:
    seen, total = set(), 0
    for p in itertools.chain(model.parameters(), model.buffers()):
        key = (p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape))
        if key not in seen:
            seen.add(key)
            total += p.numel() * p.element_size()
    return total


def _dispatch(model: torch.nn.Module, state: _Shift) -> None:
    sp_forward = model.forward
    full = state.model

    def forward(input_ids=None, positions=None, intermediate_tensors=None,
                inputs_embeds=None, **kwargs):
        if positions.shape[-1] <= state.threshold:
            state.steps[MODE_FULL_TP] += 1
            with _full_tp_step():
                return full(input_ids=input_ids, positions=positions,
                            intermediate_tensors=intermediate_tensors,
                            inputs_embeds=inputs_embeds, **kwargs)
        state.steps[MODE_SP] += 1
        return sp_forward(input_ids=input_ids, positions=positions,
                          intermediate_tensors=intermediate_tensors,
                          inputs_embeds=inputs_embeds, **kwargs)

    def compute_logits(hidden_states, *args, **kwargs):
        # The full-TP model's LM head splits the vocabulary over all TP*SP
        # GPUs (its weights are views of the SP model's), where the SP
        # model's repeats its TP shard on every SP rank: same logits, 1/SP
        # of the LM-head weights read and multiplied per GPU, whatever the
        # step's mode.
        with _full_tp_step():
            return full.compute_logits(hidden_states, *args, **kwargs)

    model.forward = forward
    model.compute_logits = compute_logits
    if hasattr(model, "set_aux_hidden_state_layers"):
        # EAGLE-3 reads the target's intermediate hidden states: both models
        # must return them, whichever mode a step runs in.
        set_aux = model.set_aux_hidden_state_layers

        def set_aux_hidden_state_layers(layers):
            set_aux(layers)
            full.set_aux_hidden_state_layers(layers)

        model.set_aux_hidden_state_layers = set_aux_hidden_state_layers


@contextmanager
def _full_tp_step():
    """Process groups and the forward context's layer table as the full-TP
    model was built with: its all-reduces run over the full-TP group and its
    attention/MoE custom ops find its own layers by name."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    assert _STATE is not None
    ctx = get_forward_context() if is_forward_context_available() else None
    saved = None if ctx is None else ctx.no_compile_layers
    if ctx is not None:
        ctx.no_compile_layers = _STATE.layers
    try:
        with ulysses.as_full_tp():
            yield
    finally:
        if ctx is not None:
            ctx.no_compile_layers = saved


WEIGHT_UPDATE_ERROR = ("shift parallelism keeps two layouts of the weights (SP and full TP) and "
                       "cannot update them in place yet: restart the engine with the new "
                       "weights, or serve without --shift-parallel")


def refuse_weight_updates() -> None:
    """Called at the top of the runners' in-place weight reload."""
    if _STATE is not None:
        raise RuntimeError(WEIGHT_UPDATE_ERROR)


def _guard_weight_updates(model: torch.nn.Module, state: _Shift) -> None:
    """Every other in-place update (weight-transfer engines, RL trainers)
    goes through ``model.load_weights``, which the initial load has already
    used: from now on it refuses, rather than update one layout only."""

    def load_weights(weights: Iterable[tuple[str, torch.Tensor]]):
        raise RuntimeError(WEIGHT_UPDATE_ERROR)

    model.load_weights = load_weights
    state.model.load_weights = load_weights


# ---------------------------------------------------------------- drafter

def place_drafter(drafter: Any, config: VllmConfig) -> Any:
    """Called by the runner with its speculative proposer (V1 runner, up to
    vLLM 0.33) or speculator (V2 runner, from 0.34): under Shift, one with a
    model builds it and runs it in the full-TP layout (see the module
    docstring), borrowing from the full-TP model.  The drafter's attention
    layers join the runner's own table (the forward context and the KV
    cache find them as upstream does); ``bind_kv_cache`` leaves them to
    upstream.  Returns the same object, so the runner's type checks hold.
    Without Shift, or for n-gram and suffix lookup, a no-op: under SP alone
    the drafter is laid out by the loader's hooks like the target."""
    if not enabled(config):
        return drafter
    try:    # the V1 runner's proposers, up to vLLM 0.33
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    except ImportError:
        SpecDecodeBaseProposer = None
    if SpecDecodeBaseProposer is not None and isinstance(drafter, SpecDecodeBaseProposer):
        return _place_proposer(drafter)
    try:    # the V2 runner's speculators, from vLLM 0.34
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
    except ImportError:
        return drafter
    if isinstance(drafter, DraftModelSpeculator):
        return _place_speculator(drafter)
    return drafter


def _place_proposer(drafter: Any) -> Any:
    """V1: the proposer's ``load_model``, ``propose``, ``dummy_run`` in full
    TP, its draft config with the full-TP fused all-reduce range."""
    load_model = drafter.load_model

    def load_in_full_tp(target: torch.nn.Module) -> None:
        with _drafting(), ulysses.as_full_tp():
            load_model(full_tp_model() or target)
        if _STATE is not None:
            _STATE.drafter_layers = set(drafter._draft_attn_layer_names)

    drafter.load_model = load_in_full_tp
    for name in ("propose", "dummy_run"):
        setattr(drafter, name, _in_full_tp(getattr(drafter, name)))
    drafter._create_draft_vllm_config = _with_fused_range(drafter._create_draft_vllm_config)
    return drafter


def _place_speculator(speculator: Any) -> Any:
    """V2 (a ``DraftModelSpeculator``: draft model, EAGLE/EAGLE-3, MTP): its
    ``load_model``, ``propose``, ``capture`` and ``init_cudagraph_manager`` in
    full TP.  V2 has no ``dummy_run`` (the runner's ``_dummy_run`` calls
    ``propose``) and no config factory: the draft config is built inline
    from ``speculator.vllm_config``, which ``load_model`` sees as a copy
    with the full-TP fused all-reduce range (the compile backend reads it
    at model construction); the runner later resolves the graph mode into
    the shared compilation config, so the copy lives only during the load.
    ``set_attn``, ``prepare_propose`` and the request hooks build metadata
    and touch buffers, no process group: they stay outside."""
    load_model = speculator.load_model

    def load_in_full_tp(target: torch.nn.Module) -> None:
        runner_config = speculator.vllm_config
        speculator.vllm_config = _with_fused_range(lambda: runner_config)()
        try:
            with _drafting(), ulysses.as_full_tp():
                load_model(full_tp_model() or target)
        finally:
            speculator.vllm_config = runner_config
        if _STATE is not None:
            _STATE.drafter_layers = set(speculator.draft_attn_layer_names)

    speculator.load_model = load_in_full_tp
    for name in ("propose", "capture", "init_cudagraph_manager"):
        setattr(speculator, name, _in_full_tp(getattr(speculator, name)))
    return speculator


@contextmanager
def _drafting():
    """While a drafter is built: ``arrange`` and ``attach`` leave it alone
    (no full-TP twin of the drafter, ``_STATE`` kept the target's)."""
    global _DRAFTING
    _DRAFTING = True
    try:
        yield
    finally:
        _DRAFTING = False


def _with_fused_range(create: Callable) -> Callable:
    """The drafter's config as upstream makes it, with the compile range a
    plain TP*SP drafter fuses its all-reduces in (ulysses.add_fused_allreduce_range):
    a copy, so the runner's own ranges stay the SP model's.  Its layer table
    is still the runner's (one dict, shared by the shallow copy)."""
    def call():
        cfg = copy.copy(create())
        cfg.compilation_config = copy.copy(cfg.compilation_config)
        ulysses.add_fused_allreduce_range(cfg)
        return cfg

    return call


def _in_full_tp(fn: Callable) -> Callable:
    def call(*args, **kwargs):
        with ulysses.as_full_tp():
            return fn(*args, **kwargs)

    return call


# ---------------------------------------------------------------- KV cache

def bind_kv_cache(kv_caches: dict[str, torch.Tensor]) -> None:
    """Called where the runners bind the KV cache to the SP model's layers:
    the full-TP model's layers of the same names get the same tensors."""
    if _STATE is None:
        return
    kv_caches = {n: t for n, t in kv_caches.items() if n not in _STATE.drafter_layers}
    missing = [name for name in kv_caches if name not in _STATE.layers]
    if missing:
        raise RuntimeError(f"shift parallelism: the full-TP model has no layer {missing[0]} "
                           "to bind the KV cache to")
    # Inside the full-TP view of the groups: a layer sizes its views by the TP world it
    # was built for (a Mamba-2 mixer's state shapes read the TP group's size).
    with ulysses.as_full_tp():
        for name, kv_cache in kv_caches.items():
            layer = _STATE.layers[name]
            if hasattr(layer, "bind_kv_cache"):   # vLLM >= 0.32: the layer makes its views
                layer.bind_kv_cache(kv_cache)
            else:
                layer.kv_cache = kv_cache
            _adopt_runtime_attributes(layer, _STATE.sp_layers.get(name))


def _adopt_runtime_attributes(layer: torch.nn.Module, sp_layer: Any) -> None:
    """Attention backends set attributes on the layers they find in the SP
    model's table once the KV cache is laid out (vLLM 0.32's CPU backend
    sets ``isa``, its kernel choice).  The full-TP layer of the same name is
    of the same class with the same local head counts, so it takes the
    ones it lacks."""
    if sp_layer is None:
        return
    for key, value in vars(sp_layer).items():
        if key not in vars(layer):
            setattr(layer, key, value)


def profile_sizes(max_num_tokens: int) -> list[int]:
    """Extra dummy-run sizes for the runners' profile run: the largest step
    the full-TP model takes, so its activations are in the memory profile
    and it is compiled before the first request."""
    if _STATE is None:
        return []
    return [min(_STATE.threshold, max_num_tokens)]


def full_tp_model() -> torch.nn.Module | None:
    return None if _STATE is None else _STATE.model


def step_counts() -> dict[str, int]:
    """Model calls per mode on this rank (dummy and capture runs included)."""
    return {} if _STATE is None else dict(_STATE.steps)


# ---------------------------------------------------------------- metrics

def step_stats(config: VllmConfig, num_scheduled_tokens: int) -> tuple[str, int] | None:
    """(mode, tokens) of one step, as the scheduler sees it.  Equal to the
    workers' choice: the threshold is a multiple of SP and a capture size,
    so a step pads to at most the threshold exactly when it has at most
    that many tokens (see the module docstring)."""
    if not enabled(config) or num_scheduled_tokens <= 0:
        return None
    if num_scheduled_tokens <= effective_threshold(config):
        return MODE_FULL_TP, num_scheduled_tokens
    return MODE_SP, num_scheduled_tokens


class ShiftMetrics:
    """Prometheus counters ``vllm:shift_parallel_steps_total`` and
    ``vllm:shift_parallel_tokens_total`` by ``mode`` (sp, full_tp): how
    much of the traffic each layout served, to check a threshold against
    real load."""

    def __init__(self, counter_cls, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]):
        steps = counter_cls(name="vllm:shift_parallel_steps",
                            documentation="Engine steps run in each Shift Parallelism mode.",
                            labelnames=labelnames + ["mode"])
        tokens = counter_cls(name="vllm:shift_parallel_tokens",
                             documentation="Scheduled tokens run in each Shift Parallelism "
                                           "mode.",
                             labelnames=labelnames + ["mode"])
        modes = (MODE_SP, MODE_FULL_TP)
        self.steps = {i: {m: steps.labels(*v, m) for m in modes}
                      for i, v in per_engine_labelvalues.items()}
        self.tokens = {i: {m: tokens.labels(*v, m) for m in modes}
                       for i, v in per_engine_labelvalues.items()}

    def observe(self, step: tuple[str, int] | None, engine_idx: int) -> None:
        if step is None:
            return
        mode, num_tokens = step
        self.steps[engine_idx][mode].inc()
        self.tokens[engine_idx][mode].inc(num_tokens)
