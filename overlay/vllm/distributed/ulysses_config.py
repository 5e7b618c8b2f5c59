# SPDX-License-Identifier: Apache-2.0
"""Ulysses SP's checks of the engine config, and the settings SP changes
in it (CUDA-graph sizes, vLLM's clashing compile passes).

Why a module of its own: these run while the engine config is built,
before any worker or process group exists, and each patched config class
calls one function here.  They must know which hybrids and multimodal
classes SP serves, which the GDN, Mamba-2 and multimodal modules define,
so they sit above those (and word the refusal of the other hybrids here);
the core (``ulysses.py``), which runs in the workers, needs none of them.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from vllm.distributed import (
    ulysses_gdn,
    ulysses_mamba,
    ulysses_mla,
    ulysses_moe,
    ulysses_multimodal,
)
from vllm.logger import init_logger

if TYPE_CHECKING:
    from vllm.config import ParallelConfig, VllmConfig

logger = init_logger(__name__)


def _version() -> str:
    from vllm import __version__

    return __version__


def _release() -> tuple[int, int]:
    """(major, minor) of the vLLM this overlay is built into: features added
    on the newer series (EP, MLA) are refused on the older."""
    return tuple(int(x) for x in _version().split("+")[0].split(".")[:2])


def _check_mla(config: VllmConfig, mc: Any, what: str) -> None:
    if _release() < (0, 32):
        raise ValueError(f"sequence_parallel_size > 1 with MLA attention ({what}) needs vLLM "
                         f"0.32 or newer (this is {_version()}): build it with ./build.sh "
                         "--version 0.33.0, or use -sp 1")
    ulysses_mla.verify_mla(config, mc, what)


# The other hybrids' non-attention layers, for the one-line refusal: models of the
# releases the series carries from 0.32.0 on (one upstream has dropped fails its own
# check first); another hybrid's are read from its layer_types.
_OTHER_LAYERS = {
    "jamba": "Mamba",
    "lfm2": "ShortConv",
    "lfm2_moe": "ShortConv",
    "kimi_linear": "KDA (Kimi Delta Attention)",
    "olmo_hybrid": "OLMo-hybrid Gated-DeltaNet",
}


def _check_hybrid(config: VllmConfig, mc: Any, what: str) -> None:
    """The one place that knows which hybrids SP serves: the Gated-DeltaNet
    ones (``ulysses_gdn``) and the Mamba-2 ones (``ulysses_mamba``), each
    checked by its family's module; every other hybrid is refused naming
    its non-attention layer."""
    model_type = getattr(mc.hf_text_config, "model_type", None)
    if model_type in ulysses_gdn.GDN_MODEL_TYPES:
        ulysses_gdn.verify_gdn(config)
    elif model_type in ulysses_mamba.MAMBA2_MODEL_TYPES:
        if _release() < (0, 32):
            raise ValueError(f"sequence_parallel_size > 1 with Mamba-2 layers ({what}) needs "
                             f"vLLM 0.32 or newer (this is {_version()}): build it with "
                             "./build.sh --version 0.33.0, or use -sp 1")
        ulysses_mamba.verify_mamba2(config)
    else:
        layer = _OTHER_LAYERS.get(model_type) or _non_attention_layers(mc.hf_text_config)
        raise ValueError(f"sequence_parallel_size > 1 does not support the {layer} layers of "
                         f"{what} yet (of the hybrids the Gated-DeltaNet models "
                         f"{ulysses_gdn.MODELS}, and the Mamba-2 ones {ulysses_mamba.MODELS}); "
                         "use -sp 1")


def _non_attention_layers(hf: Any) -> str:
    kinds = sorted({t for t in getattr(hf, "layer_types", None) or []
                    if "attention" not in t or "linear" in t})
    return "/".join(kinds) if kinds else "state-space or linear-attention"


def validate_parallel_config(pc: ParallelConfig) -> None:
    """Checks that need no model.  Raises ValueError with a one-line fix."""
    sp = pc.sequence_parallel_size
    if sp == 1:
        return
    if pc.prefill_context_parallel_size > 1 or pc.decode_context_parallel_size > 1:
        raise ValueError("sequence_parallel_size > 1 cannot be combined with prefill/decode "
                         "context parallelism (PCP/DCP): set -pcp 1 -dcp 1 or -sp 1")
    if pc.enable_expert_parallel:
        _check_expert_parallel(pc)
    if pc.enable_elastic_ep:
        raise ValueError("sequence_parallel_size > 1 does not support elastic EP: use -sp 1")
    if pc.data_parallel_backend == "ray":
        raise ValueError("sequence_parallel_size > 1 does not support the Ray data-parallel "
                         "backend yet: use --data-parallel-backend mp (the Ray executor, "
                         "--distributed-executor-backend ray, is supported)")
    # Both split a step in ways SP's layout does not follow: the
    # sampler's all-to-all shards the vocabulary over the TP group only, where
    # Shift's full-TP model shards it over TP x SP; a microbatch's tokens are
    # neither padded to SP nor split over it.
    if getattr(pc, "enable_batch_sharded_sampling", False):
        raise ValueError("sequence_parallel_size > 1 does not support batch-sharded sampling: "
                         "leave --enable-batch-sharded-sampling off, or use -sp 1")
    if getattr(pc, "use_ubatching", False):
        raise ValueError("sequence_parallel_size > 1 does not support microbatching: leave "
                         "--enable-dbo and --ubatch-size off, or use -sp 1")


def _check_expert_parallel(pc: ParallelConfig) -> None:
    """Expert parallelism over the SP ranks (``ulysses_moe``): on the series
    that carry it, with the one all2all backend that is correct there (the
    others would route tokens by a rank order the EP group's experts do not
    follow: ``ulysses_moe.BACKEND``), without expert load balancing (its
    redundant experts and rebalancing would move experts between ranks
    Shift's two models share)."""
    if _release() < (0, 32):
        raise ValueError(f"sequence_parallel_size > 1 with --enable-expert-parallel needs "
                         f"vLLM 0.32 or newer (this is {_version()}): build it with "
                         "./build.sh --version 0.33.0, or drop --enable-expert-parallel "
                         "(MoE layers stay TP-sharded)")
    if pc.all2all_backend != ulysses_moe.BACKEND:
        raise ValueError(f"sequence_parallel_size > 1 with expert parallelism dispatches with "
                         f"the {ulysses_moe.BACKEND} all2all backend only, not "
                         f"{pc.all2all_backend}: use --all2all-backend {ulysses_moe.BACKEND}")
    if pc.enable_eplb:
        raise ValueError("sequence_parallel_size > 1 does not support expert load balancing "
                         "(EPLB) yet: drop --enable-eplb or use -sp 1")
    strategy = pc.expert_placement_strategy
    if strategy != "linear":
        # The layers fall back to linear with this backend, but the loader's
        # --enable-ep-weight-filter would keep the round-robin experts.
        raise ValueError(f"sequence_parallel_size > 1 with expert parallelism places experts "
                         f"linearly only, not '{strategy}' (it needs another all2all "
                         f"backend): drop --expert-placement-strategy or use -sp 1")


def _check_moe_backend(config: VllmConfig) -> None:
    """A MoE backend that dispatches and combines its tokens itself (the
    FlashInfer MoE-EP kernels: vLLM then sets the all2all backend to
    ``passthrough``, after these checks) routes by a rank order the SP EP
    group's experts do not follow."""
    from vllm.config.kernel import FLASHINFER_MOE_EP_BACKENDS

    backend = config.kernel_config.moe_backend
    if backend in FLASHINFER_MOE_EP_BACKENDS:
        raise ValueError(f"sequence_parallel_size > 1 with expert parallelism does not support "
                         f"--moe-backend {backend}, which dispatches its tokens itself: use "
                         f"another --moe-backend or -sp 1")


# Up to vLLM 0.33 (V1 proposers): methods whose drafts are verified in
# ordinary target steps, with a drafter (if any) that runs in the target's
# layout: ``shift.place_drafter``.  The others have proposers of their own
# (Medusa heads, MLP speculators, block drafters, per-group metadata) that
# nothing here lays out.  From 0.34 each speculator's config says so itself
# (``supports_sp``, patch ``config-spec-decode-with-sp``): ``lays_out_sp``.
SP_SPECULATIVE_METHODS = ("ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp")
# Methods without a drafter model: drafts from the token history.
_MODEL_FREE_METHODS = ("ngram", "ngram_gpu", "suffix")


def verify_config(config: VllmConfig) -> None:
    """Checks that need the model, run while the engine config is built
    (before any worker starts).  Turns off the unrelated compile pass of the
    same name, which also pads and splits tokens."""
    pc = config.parallel_config
    sp, tp = pc.sequence_parallel_size, pc.tensor_parallel_size
    if sp == 1:
        return
    mc = config.model_config
    if mc is None:
        return
    what = f"{mc.architecture}"
    if mc.use_mla:
        _check_mla(config, mc, what)
    if mc.is_encoder_decoder:
        raise ValueError(f"sequence_parallel_size > 1 does not support encoder-decoder models "
                         f"({what}); use -sp 1")
    if mc.is_multimodal_model:
        ulysses_multimodal.verify_multimodal(mc)
    if mc.is_attention_free or mc.has_noops:
        raise ValueError(f"sequence_parallel_size > 1 needs a decoder whose layers all use "
                         f"attention; {what} does not; use -sp 1")
    if mc.is_hybrid:   # Gated-DeltaNet and Mamba-2 hybrids are served; the others refused
        _check_hybrid(config, mc, what)
    # vLLM's Transformers modeling backend: its decoder and MoE classes run
    # under SP (patch transformers-backend-heads-per-tp-rank); its MLA path
    # has not run.
    if mc.use_mla and mc.using_transformers_backend():
        raise ValueError(f"sequence_parallel_size > 1 does not support MLA models on vLLM's "
                         f"Transformers modeling backend, which serves "
                         f"{', '.join(mc.architectures or [what])} here: use -sp 1, or "
                         f"--model-impl vllm where vLLM has a class of its own for it")
    if mc.runner_type not in ("generate", "draft"):   # draft: a drafter's own config
        raise ValueError(f"sequence_parallel_size > 1 supports generative models only, not "
                         f"runner '{mc.runner_type}'; use -sp 1")
    _check_heads(mc, tp, sp, what)
    _check_kv_cache_dtype(config, mc, what)
    if pc.enable_expert_parallel:
        _check_moe_backend(config)
    if config.speculative_config is not None:
        verify_speculative(config)
    sc = config.scheduler_config
    if sc.max_num_batched_tokens % sp:
        raise ValueError(f"max_num_batched_tokens={sc.max_num_batched_tokens} must be a "
                         f"multiple of sequence_parallel_size={sp} (steps are padded to it)")
    check_groups_within_nodes(config)
    # vLLM's own TP sequence-parallel compile passes split tokens over TP
    # ranks differently (vLLM 0.32 removed them; 0.26 has them).
    passes = config.compilation_config.pass_config
    clashing = [n for n in ("enable_sp", "fuse_gemm_comms") if hasattr(passes, n)]
    if any(getattr(passes, n) for n in clashing):
        logger.warning("Ulysses sequence parallelism (sequence_parallel_size=%d) is on: turning "
                       "off the compile passes %s, which split tokens over TP ranks "
                       "differently", sp, clashing)
    for name in clashing:
        setattr(passes, name, False)


def _check_heads(mc: Any, tp: int, sp: int, what: str) -> None:
    heads = mc.model_arch_config.total_num_attention_heads
    kv_heads = mc.get_total_num_kv_heads()
    if heads % (tp * sp):
        raise ValueError(f"{what} has {heads} attention heads, not divisible by "
                         f"tensor_parallel_size*sequence_parallel_size={tp}*{sp}; "
                         "choose TP*SP dividing the head count")
    kv_per_tp = max(1, kv_heads // tp)
    if kv_per_tp % sp and sp % kv_per_tp:
        raise ValueError(f"{what} has {kv_heads} KV heads ({kv_per_tp} per TP rank), which "
                         f"sequence_parallel_size={sp} neither divides nor is a multiple of; "
                         "choose SP dividing or a multiple of the KV heads per TP rank")


def _check_kv_cache_dtype(config: Any, mc: Any, what: str) -> None:
    """A quantized KV cache is refused, but for an FP8 (e4m3) one of one scale
    from vLLM 0.33 on: there the attention layer quantizes the query before
    the exchange (patch attention-fp8-query-before-exchange), as plain TP's
    compiled graph does; quantized after it, from its bfloat16 copy, it
    would round twice.  Still refused: a checkpoint's
    ``kv_cache_scheme`` (its per-head query scales keep the old path), with
    ``auto`` (which turns the FP8 cache on) or an FP8 dtype alike; any other
    quantized dtype; and the older series, which lack the patch."""
    dtype = str(getattr(config.cache_config, "cache_dtype", "auto"))
    if dtype in ("bfloat16", "float16"):
        return
    qc = getattr(mc.hf_config, "quantization_config", None) or {}
    scheme = qc.get("kv_cache_scheme") if isinstance(qc, dict) else getattr(
        qc, "kv_cache_scheme", None)
    if scheme is not None:
        source = f"{what}'s kv_cache_scheme asks for an FP8 KV cache with its scales"
    elif dtype == "auto":
        return
    elif dtype in ("fp8", "fp8_e4m3") and _release() >= (0, 33):
        return
    else:
        source = f"kv_cache_dtype '{dtype}'"
    plain = str(mc.dtype).removeprefix("torch.")
    raise ValueError(f"sequence_parallel_size > 1 does not support a quantized KV cache "
                     f"({source}): SP's attention over it is wrong on GPU; use "
                     f"--kv-cache-dtype {plain} or -sp 1")


def lays_out_sp(config_cls: type) -> bool:
    """Whether SP and Shift lay out the speculator of a vLLM >= 0.34
    ``SpeculatorConfig`` class: its ``supports_sp``, read from the class that
    declares the ``speculator_class`` in use (the first in the MRO with it
    in its own ``vars``), never inherited past it.  A config that only
    re-configures a laid-out speculator (EAGLE-3, ``ngram_gpu``) takes its
    owner's flag; one that brings a speculator of its own (Gemma-4 MTP,
    multi-module MTP, the DFlash family, a plugin's subclass of EAGLE's
    config with its own class) is refused until it says ``supports_sp``
    itself: plain inheritance, as upstream's ``supports_pcp`` has, would
    let them in unreviewed."""
    for klass in config_cls.__mro__:
        if "speculator_class" in vars(klass):
            return bool(vars(klass).get("supports_sp", False))
    return False


def sp_speculative_methods() -> list[str]:
    """The built-in speculative methods served under SP: up to vLLM 0.33
    ``SP_SPECULATIVE_METHODS``, from 0.34 those of upstream's method table
    whose config passes ``lays_out_sp`` (config modules import no
    speculator, so this runs in any process)."""
    try:
        from vllm.v1.worker.gpu.spec_decode import speculator_config as sc
    except ImportError:
        return list(SP_SPECULATIVE_METHODS)
    from vllm.utils.import_utils import resolve_obj_by_qualname

    return sorted(m for m, qualname in sc._CONFIG_BY_METHOD.items()
                  if lays_out_sp(resolve_obj_by_qualname(qualname)))


def _check_method(spec: Any) -> None:
    """The method (and on vLLM >= 0.34 the speculator its config resolved
    to: a checkpoint or option may pick another class for the same method),
    refused in one line that names it."""
    if not hasattr(type(spec), "speculator_config"):    # up to 0.33
        if spec.method not in SP_SPECULATIVE_METHODS:
            raise ValueError(f"sequence_parallel_size > 1 supports speculative decoding by "
                             f"{', '.join(SP_SPECULATIVE_METHODS)}, not '{spec.method}' yet; "
                             "choose one of those or use -sp 1")
        return
    config_cls = type(spec.speculator_config)
    if not lays_out_sp(config_cls):
        method = getattr(spec, "custom_method", None) or spec.method
        raise ValueError(f"sequence_parallel_size > 1 does not lay out the '{method}' "
                         f"speculator ({config_cls.__name__}) yet; use one of "
                         f"{', '.join(sp_speculative_methods())} (MTP with one module), "
                         "or -sp 1")
    if getattr(spec, "enable_adaptive_verification", False):
        # Its varlen decode graphs take token counts from their own grid and
        # its budgets move verify sizes: not reasoned through for the
        # threshold nor for SP's graph sizes.
        raise ValueError("sequence_parallel_size > 1 does not support adaptive verification "
                         "(enable_adaptive_verification) yet: drop it or use -sp 1")


def verify_speculative(config: VllmConfig) -> None:
    """Speculative decoding under SP: the method, and the drafter model held
    to the target's rules (its attention layers run the same exchange, or
    full TP under Shift, and cache the same heads per GPU)."""
    pc, spec = config.parallel_config, config.speculative_config
    sp, tp = pc.sequence_parallel_size, pc.tensor_parallel_size
    _check_method(spec)
    if config.model_config.is_hybrid and spec.method != "mtp":
        # A Gated-DeltaNet target speculates with its own MTP layers, which
        # the tests hold to TP=1.  The other methods are untested there:
        # vLLM 0.26's CPU engine cannot run n-gram on such a target even at
        # TP=1 (its GDN decode kernel rejects the spec-wide state table).
        raise ValueError(f"sequence_parallel_size > 1 speculates on a hybrid model "
                         f"({config.model_config.architecture}) with its MTP layers "
                         f"(method 'mtp'), not '{spec.method}' yet: use 'mtp', or -sp 1")
    if spec.method in _MODEL_FREE_METHODS:   # no model: drafts verified in target steps
        return
    draft_load = getattr(spec, "draft_load_config", None)
    if getattr(pc, "shift_parallel", False) and draft_load is not None and \
            draft_load.load_format in ("sharded_state", "tensorizer"):
        # As for the target (shift.verify_config): a drafter built at TP*SP
        # (full TP) cannot read one TP layout's shards.
        raise ValueError(f"--shift-parallel cannot load a '{draft_load.load_format}' drafter "
                         "checkpoint: it holds one TP layout's shards, the full-TP drafter "
                         "needs another; use a plain checkpoint")
    if getattr(spec, "parallel_drafting", False):
        raise ValueError("sequence_parallel_size > 1 does not support parallel drafting "
                         "(P-EAGLE) yet: drop parallel_drafting or use -sp 1")
    if getattr(spec, "num_speculative_tokens_per_batch_size", None):
        raise ValueError("sequence_parallel_size > 1 needs a fixed num_speculative_tokens "
                         "(it sizes the padded steps): drop the per-batch-size schedule")
    if pc.pipeline_parallel_size > 1:
        raise ValueError(f"sequence_parallel_size > 1 with a drafter ('{spec.method}') does "
                         "not support pipeline parallelism yet: use -pp 1, or n-gram lookup")
    draft_tp = getattr(spec.draft_parallel_config, "tensor_parallel_size", tp)
    if draft_tp != tp:
        raise ValueError(f"draft_tensor_parallel_size={draft_tp}: with sequence_parallel_size > "
                         f"1 the drafter runs over the same TP*SP GPUs as the target; drop "
                         f"draft_tensor_parallel_size or set it to {tp}")
    dmc = spec.draft_model_config
    if dmc is None:
        return
    what = f"the {spec.method} drafter {dmc.architecture}"
    if dmc.use_mla:
        _check_mla(config, dmc, what)
    if dmc.is_hybrid or dmc.is_attention_free:
        raise ValueError(f"sequence_parallel_size > 1 needs a drafter whose layers all use "
                         f"attention; {what} does not; use -sp 1")
    _check_heads(dmc, tp, sp, what)


def capture_multiple(config: VllmConfig | ParallelConfig) -> int:
    """What every CUDA-graph size of a step split over SP (and Shift's
    threshold) is a multiple of: SP, since such steps are padded to it, and
    with speculative decoding also k+1, to which vLLM rounds the sizes of
    its decode graphs (each request of a verify step holds k+1 tokens)."""
    pc = getattr(config, "parallel_config", config)
    return math.lcm(pc.sequence_parallel_size, tokens_per_request(config))


def tokens_per_request(config: VllmConfig | ParallelConfig) -> int:
    """Tokens of one request in a decode step: k+1 with k speculative
    tokens (a verify step), else 1."""
    spec = getattr(config, "speculative_config", None)
    return (getattr(spec, "num_speculative_tokens", None) or 0) + 1


CROSS_NODE_ENV = "VLLM_SP_ALLOW_CROSS_NODE"


def exchange_bytes_per_token(config: VllmConfig, heads: int, kv_heads: int) -> int:
    """Bytes one GPU sends per token of a step, per layer, in the two
    all-to-alls: it holds 1/SP of the tokens, and for them sends q, k and v
    in and the attention output back, (SP-1)/SP of each to the other SP
    ranks (KV heads replicated up to one per GPU, as the exchange does)."""
    pc, mc = config.parallel_config, config.model_config
    tp, sp = pc.tensor_parallel_size, pc.sequence_parallel_size
    q = heads // tp
    kv = max(kv_heads // tp, sp)
    per_head = mc.get_head_size() * mc.dtype.itemsize
    return (2 * q + 2 * kv) * per_head * (sp - 1) // (sp * sp)


def check_groups_within_nodes(config: VllmConfig) -> None:
    """A TP x SP group must sit on one node: its all-to-alls run in every
    layer, and over a network they cost 10-20x NVLink.  Ranks are laid out
    TP fastest, then SP, so with R ranks per node the groups stay whole iff
    R is a multiple of TP*SP.  Refused unless $VLLM_SP_ALLOW_CROSS_NODE=1."""
    pc = config.parallel_config
    group = pc.tp_sp_size
    if pc.nnodes_within_dp <= 1 or pc.local_world_size % group == 0:
        return
    _refuse_cross_node(config, f"TP x SP groups of {group} ranks would span nodes "
                       f"({pc.local_world_size} ranks per node)",
                       f"put whole TP x SP groups on a node (ranks per node a multiple of "
                       f"{group}) and spread DP or PP over nodes")


def check_rank_nodes(config: VllmConfig, rank_nodes: list[str]) -> None:
    """The same rule for the Ray executors, which learn only from the
    placement group where each rank landed (a PACK group may still split a
    TP x SP group when a node's free devices run out).  rank_nodes: the
    Ray node id of each rank of this engine, in rank order."""
    pc = config.parallel_config
    if pc.sequence_parallel_size == 1:
        return
    group = pc.tp_sp_size
    split = [r // group for r in range(0, len(rank_nodes), group)
             if len(set(rank_nodes[r:r + group])) > 1]
    if not split:
        return
    _refuse_cross_node(config, f"Ray placed the TP x SP group{'s' * (len(split) > 1)} "
                       f"{', '.join(map(str, split))} ({group} ranks each) on more than one node",
                       f"give each node's Ray resources a multiple of {group} devices, spread "
                       f"DP or PP over nodes")


def _refuse_cross_node(config: VllmConfig, what: str, fix: str) -> None:
    """One line: what spans nodes, what it would cost (from the message
    sizes), how to fix it or allow it."""
    mc = config.model_config
    per_token = exchange_bytes_per_token(config, mc.model_arch_config.total_num_attention_heads,
                                         mc.get_total_num_kv_heads())
    layers = mc.get_num_layers(config.parallel_config)
    cost = (f"{what}: each layer's Ulysses all-to-alls would cross the network, "
            f"{per_token / 1024:.2f} KiB per GPU per token of a step, "
            f"{per_token * 8192 * layers / 2**30:.2f} GiB per GPU for one 8k-token prefill "
            f"over {layers} layers")
    if os.environ.get(CROSS_NODE_ENV) == "1":
        logger.warning("Ulysses SP (%s=1): %s", CROSS_NODE_ENV, cost)
        return
    raise ValueError(f"{cost}; {fix}, or set {CROSS_NODE_ENV}=1")


def default_max_capture_size(config: VllmConfig, upstream: int) -> int:
    """vLLM's default largest CUDA graph, counted per SP rank (used only when
    the user set no size).  Upstream stops at 512 tokens (1024 on Blackwell
    from 0.32) so that a graph's activations stay small; an SP rank runs 1/SP
    of a step's tokens, so SP x that keeps every rank's graphs within
    upstream's size, while a 1k-token step (SP=2) replays a graph instead of
    launching ~10 small kernels per layer from the host: served on 2xH200,
    1k TTFT 49 -> 29 ms, graph memory 1.4 -> 2.2 GiB, KV cache unchanged
    (benchmarks/results/2026-11-24-2gpu-sp-step-profile/).  Under Shift Parallelism the
    added sizes are the SP model's only: the full-TP model's graphs keep
    upstream's bound (``shift.capture_sizes``)."""
    return upstream * config.parallel_config.sequence_parallel_size


def shift_threshold(config: VllmConfig | ParallelConfig) -> int:
    """Shift's threshold rounded up to a multiple of ``capture_multiple``:
    steps above it are padded to such a multiple, so a threshold between
    two could not be honoured exactly (``shift.effective_threshold``)."""
    pc = getattr(config, "parallel_config", config)
    m = capture_multiple(config)
    return -(-pc.shift_parallel_threshold // m) * m


def sizes_resolved(config: VllmConfig) -> bool:
    """Whether vLLM resolved this config's CUDA-graph sizes before: from
    0.34 a resolved config records both the deprecated shared sizes and
    the prefill and decode ones, and ``replace`` resolves them again,
    refusing any change (a draft model's config is the target's, replaced;
    so is the key of FlashInfer's autotune cache at warm-up).  The
    recorded sizes passed through here once and hold the drafters'
    one-token decode graphs besides, which are no multiples of SP (their
    managers keep only what SP padding leaves as it is:
    ``ulysses.keep_unpadded``), so they are left as they are."""
    cc = config.compilation_config
    return cc.cudagraph_capture_sizes is not None and all(
        getattr(cc, name, None) is not None
        for name in ("prefill_cudagraph_capture_token_sizes",
                     "decode_cudagraph_capture_request_sizes"))


def filter_capture_sizes(config: VllmConfig, sizes: list[int]) -> list[int]:
    """CUDA-graph capture sizes must be multiples of SP: a padded step has
    to land on a captured size to replay it.  With speculative decoding
    they are rounded up to multiples of ``capture_multiple`` instead, as
    vLLM rounds them up to multiples of k+1 itself later (for its decode
    graphs): that rounding is then the identity, and every size stays a
    multiple of SP.  Under Shift the sizes up to its threshold are the
    full-TP model's, whose steps are not split over SP and not padded
    (``ulysses.set_unsliced_steps``): they stay upstream's (multiples of k+1
    only), so one request decodes through a one-token graph, as under TP."""
    pc = config.parallel_config
    sp = pc.sequence_parallel_size
    if sp == 1 or sizes_resolved(config):
        return sizes
    t = shift_threshold(config) if getattr(pc, "shift_parallel", False) else 0
    d = tokens_per_request(config)
    small = sorted({-(-s // d) * d for s in sizes if s <= t})
    m = capture_multiple(config)
    large = [s for s in sizes if s > t]
    if m == sp:
        large = [s for s in large if s % sp == 0]
    elif large:
        largest = max(sizes)
        large = sorted({-(-s // m) * m for s in large if -(-s // m) * m <= largest})
    kept = small + large or [m]
    if kept != sizes:
        logger.info("Ulysses SP: CUDA-graph capture sizes kept to multiples of %d%s: %s", m,
                    f" above Shift's threshold {t}" if t else "", kept)
    return kept
