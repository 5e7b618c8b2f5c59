# SPDX-License-Identifier: Apache-2.0
"""Ulysses SP for the Gated-DeltaNet (GDN) linear-attention layers of the
hybrid Qwen3-Next and Qwen3.5 models.

Why a module of its own: ``ulysses.AttentionPlan`` exchanges q/k/v around
vLLM's ``Attention``; a GDN layer is not an ``Attention`` but a mixer whose
core (causal conv + gated delta rule) is a recurrence over each request's
tokens, so an SP rank cannot run it on its 1/SP of the step.  It needs every
token, as attention does, and its heads are independent, as attention's are.
So the same trick applies: after the mixer's input projections (run on this
rank's tokens with the TP rank's weights) one all-to-all gives each SP rank
all tokens of the step for 1/SP of the TP rank's linear heads (q, k, v, b,
a); the core runs over the whole step for those heads; a second all-to-all
returns its output [n, Hv/TP, dv] to the token owners, before the gated norm
and ``out_proj``, which are token-local.

State: the core runs on a *view* of the mixer (``_core_view``) that looks
like the mixer of plain TP over TP*SP ranks, full-TP rank i = t*SP + s: its
conv rows are [q chunk s | k chunk s | v chunk s] of TP rank t's, its
``A_log``/``dt_bias`` the entries of its v-heads, its ``tp_size`` TP*SP.
Its conv and recurrent state caches are therefore what that plain-TP mixer
holds, channel for channel, so Shift's full-TP model (which is that mixer)
shares the very state tensors: written in one mode, read in the other.

The view replaces the mixer in the layer table by name
(``static_forward_context``), so the KV-cache spec, allocation, binding,
metadata builders, the core op's lookup and Shift's ``bind_kv_cache`` all
see it; it is not a child module, so loading and ``named_parameters`` never
meet it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed import ulysses

if TYPE_CHECKING:
    from collections.abc import Callable

    from vllm.config import VllmConfig

# hf_text_config.model_type of the hybrids whose mixer is QwenGatedDeltaNetAttention.
GDN_MODEL_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")

# The other hybrids' non-attention layers, for the one-line refusal.
_OTHER_LAYERS = {
    "jamba": "Mamba",
    "bamba": "Mamba2",
    "zamba2": "Mamba2",
    "plamo2": "Mamba2",
    "lfm2": "ShortConv",
    "lfm2_moe": "ShortConv",
    "kimi_linear": "KDA (Kimi Delta Attention)",
    "minimax_text_01": "lightning attention",
    "minimax": "lightning attention",
    "olmo_hybrid": "OLMo-hybrid Gated-DeltaNet",
}


# ---------------------------------------------------------------- config

def verify_hybrid(config: VllmConfig) -> None:
    """Called by ``ulysses_config.verify_config`` for a hybrid model: GDN
    hybrids are served when TP*SP divides their linear key and value heads
    (each GPU then runs whole heads, as plain TP over TP*SP would); every
    other hybrid is refused naming its non-attention layer."""
    mc, pc = config.model_config, config.parallel_config
    hf = mc.hf_text_config
    model_type = getattr(hf, "model_type", None)
    tp, sp = pc.tensor_parallel_size, pc.sequence_parallel_size
    if model_type not in GDN_MODEL_TYPES:
        layer = _OTHER_LAYERS.get(model_type) or _non_attention_layers(hf)
        raise ValueError(f"sequence_parallel_size > 1 does not support the {layer} layers of "
                         f"{mc.architecture} yet (of the hybrids the Gated-DeltaNet models "
                         f"Qwen3-Next and Qwen3.5, and the Mamba-2 ones Nemotron-H, Granite "
                         f"4.0-H and Falcon-H1); use -sp 1")
    for what in ("linear_num_key_heads", "linear_num_value_heads"):
        heads = getattr(hf, what)
        if heads % (tp * sp):
            raise ValueError(f"{mc.architecture} has {what}={heads}, not divisible by "
                             f"tensor_parallel_size*sequence_parallel_size={tp}*{sp}; choose "
                             "TP*SP dividing the linear-attention heads")


def _non_attention_layers(hf: Any) -> str:
    kinds = sorted({t for t in getattr(hf, "layer_types", None) or []
                    if "attention" not in t or "linear" in t})
    return "/".join(kinds) if kinds else "state-space or linear-attention"


# ---------------------------------------------------------------- the plan

class LinearAttentionPlan:
    """Per GDN mixer: the exchanges around its core, and the view the core
    runs on."""

    def __init__(self, mixer: torch.nn.Module) -> None:
        self.sp = ulysses.sp_size()
        self.rank = ulysses.sp_rank()
        self.group = ulysses.get_sp_group()
        tp = mixer.tp_size
        self.q_width = mixer.key_dim // tp          # this TP rank's q (= k) channels
        self.v_width = mixer.value_dim // tp
        self.local_v_heads = mixer.num_v_heads // (tp * self.sp)
        self.head_v_dim = mixer.head_v_dim
        qc, vc, s = self.q_width // self.sp, self.v_width // self.sp, self.rank
        self.conv = LocalConv(mixer, torch.cat([
            torch.arange(s * qc, (s + 1) * qc),
            torch.arange(self.q_width + s * qc, self.q_width + (s + 1) * qc),
            torch.arange(2 * self.q_width + s * vc, 2 * self.q_width + (s + 1) * vc)]))

    @classmethod
    def maybe_create(cls, mixer: torch.nn.Module) -> LinearAttentionPlan | None:
        """At the end of the mixer's ``__init__``.  None without SP (and in
        Shift's full-TP model, built with SP=1): the mixer is upstream's."""
        if ulysses.sp_size() == 1:
            return None
        from vllm.config import get_current_vllm_config
        from vllm.platforms import current_platform

        sp, tp = ulysses.sp_size(), mixer.tp_size
        if not (current_platform.is_cuda() or current_platform.is_cpu()):
            raise ValueError("sequence_parallel_size > 1 runs Gated-DeltaNet layers on CUDA and "
                             f"CPU only (this platform, {current_platform.device_name}, fuses "
                             "their projections into the core); use -sp 1")
        for what, heads in (("key", mixer.num_k_heads), ("value", mixer.num_v_heads)):
            if heads % (tp * sp):
                raise ValueError(f"{heads} linear-attention {what} heads are not divisible by "
                                 f"tensor_parallel_size*sequence_parallel_size={tp}*{sp}")
        ulysses.register_ops()
        plan = cls(mixer)
        table = get_current_vllm_config().compilation_config.static_forward_context
        assert table.get(mixer.prefix) is mixer, f"{mixer.prefix} is not registered"
        table[mixer.prefix] = _core_view(mixer, plan)
        return plan

    def forward(self, core_op: Callable, mixed_qkv: torch.Tensor, b: torch.Tensor,
                a: torch.Tensor, layer_name: Any) -> torch.Tensor:
        """mixed_qkv [n, q|k|v of the TP rank], b and a [n, Hv/TP] for this
        rank's n tokens -> the core's output [n, Hv/TP, dv] for them.

        Contiguous head chunks go to each SP rank: v-head j uses k-head
        j // (Hv/Hk), so chunk s of the k-heads carries chunk s of the
        v-heads (and of b, a), in both checkpoint layouts."""
        n = mixed_qkv.shape[0]
        q, k, v = mixed_qkv.split([self.q_width, self.q_width, self.v_width], dim=-1)
        q, k, v, b, a = ulysses.heads_from_tokens([q, k, v, b, a], [1] * 5, self.group)
        # zeros, as upstream: the core writes only the step's actual tokens.
        out = torch.zeros((self.sp * n, self.local_v_heads, self.head_v_dim),
                          dtype=mixed_qkv.dtype, device=mixed_qkv.device)
        core_op(torch.cat([q, k, v], dim=-1), b.contiguous(), a.contiguous(), out, layer_name)
        out = ulysses.tokens_from_heads(out.view(self.sp * n, -1), self.group)
        return out.view(n, self.sp * self.local_v_heads, self.head_v_dim)


# ---------------------------------------------------------------- the view

# view -> (mixer, plan), kept off the view's __dict__: Shift copies the SP
# layer's attributes that its full-TP layer lacks (shift._adopt_runtime_attributes).
_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_VIEW_CLASSES: dict[type, type] = {}


def _v_heads(view: Any, param: torch.Tensor) -> torch.Tensor:
    """This GPU's entries of a per-v-head parameter ([Hv/TP]): a view, so
    weights loaded later are the ones read."""
    _, plan = _VIEWS[view]
    return param.narrow(0, plan.rank * plan.local_v_heads, plan.local_v_heads)


def _view_class(cls: type) -> type:
    if cls not in _VIEW_CLASSES:
        _VIEW_CLASSES[cls] = type(f"Ulysses{cls.__name__}", (cls,), {
            "__doc__": "A GDN mixer as plain TP over TP*SP ranks sees it (ulysses_gdn).",
            "A_log": property(lambda self: _v_heads(self, _VIEWS[self][0].A_log)),
            "dt_bias": property(lambda self: _v_heads(self, _VIEWS[self][0].dt_bias)),
            "conv1d": property(lambda self: _VIEWS[self][1].conv),
        })
    return _VIEW_CLASSES[cls]


def _core_view(mixer: torch.nn.Module, plan: LinearAttentionPlan) -> torch.nn.Module:
    """An object of a subclass of the mixer's class with the mixer's
    attributes, but ``tp_size``/``tp_rank`` of the full-TP rank and the
    properties ``A_log``, ``dt_bias``, ``conv1d`` narrowed to its heads:
    everything the core reads (head counts ``num_*_heads // tp_size``,
    ``rearrange_mixed_qkv``, the state shape) then describes this GPU."""
    view = object.__new__(_view_class(type(mixer)))
    view.__dict__.update(mixer.__dict__)
    view.__dict__["tp_size"] = mixer.tp_size * plan.sp
    view.__dict__["tp_rank"] = mixer.tp_rank * plan.sp + plan.rank
    _VIEWS[view] = (mixer, plan)
    return view


class LocalConv:
    """The conv1d a state-space core sees under SP: ``rows`` of the TP
    rank's depthwise conv weight, the full-TP rank's rows (GDN: [q chunk s
    | k chunk s | v chunk s] of [q | k | v]; ``ulysses_mamba``: x, B and C
    alike).

    A copy (the rows are not one slice), made when first read and again
    whenever the source changes: a load through the weight's or the bias's
    loader (which writes ``param.data`` and so bumps no version counter), a
    new tensor (the CPU platform packs the weight after loading), or an
    in-place write.  Rebuilt into the same tensor when its shape allows, so a
    CUDA graph that captured its address reads the new rows; a load after the
    copy exists rebuilds it at once, since a graph's replay reads the tensor
    without asking again (an in-place weight reload under SP)."""

    def __init__(self, mixer: torch.nn.Module, rows: torch.Tensor) -> None:
        self._mixer = weakref.proxy(mixer)
        self._loads = 0
        self._key: tuple | None = None
        self._weight: torch.Tensor | None = None
        self._unpacked: torch.Tensor | None = None
        self._bias: torch.Tensor | None = None
        self._rows = rows
        for param in (mixer.conv1d.weight, mixer.conv1d.bias):
            loader = getattr(param, "weight_loader", None)
            if loader is not None:
                param.weight_loader = self._marking(loader)

    def _marking(self, loader):
        def load_and_mark(param, loaded, *args, **kwargs):
            out = loader(param, loaded, *args, **kwargs)
            self._loads += 1
            if self._weight is not None:       # read before: maybe held by a graph
                self._refresh()
            return out
        return load_and_mark

    def _refresh(self) -> None:
        src = self._mixer.conv1d
        w, unpacked = src.weight, getattr(src, "_cpu_unpacked_conv_weight", None)
        key = (self._loads, w.data_ptr(), w._version, tuple(w.shape),
               None if unpacked is None else (unpacked.data_ptr(), unpacked._version))
        if key == self._key:
            return
        rows = self._rows.to(w.device)
        with torch.no_grad():
            if unpacked is not None:
                # AMX: the source is VNNI-packed in place; pack our rows alike.
                try:    # vLLM 0.32 and 0.33's CPU path; 0.34 packs no conv weight
                    from vllm._custom_ops import causal_conv1d_weight_pack
                except ImportError as e:
                    raise RuntimeError("a VNNI-packed conv weight, but this vLLM has no "
                                       "causal_conv1d_weight_pack to pack SP's rows") from e

                plain = unpacked.index_select(0, rows)
                weight = causal_conv1d_weight_pack(plain)
                self._unpacked = _into(self._unpacked, plain)
            else:
                weight = w.view(w.shape[0], w.shape[-1]).index_select(0, rows).unsqueeze(1)
                self._unpacked = None
            self._weight = _into(self._weight, weight)
            self._bias = None if src.bias is None else _into(self._bias,
                                                             src.bias.index_select(0, rows))
        self._key = key

    @property
    def weight(self) -> torch.Tensor:
        self._refresh()
        return self._weight

    @property
    def bias(self) -> torch.Tensor | None:
        self._refresh()
        return self._bias

    @property
    def _cpu_unpacked_conv_weight(self) -> torch.Tensor | None:
        self._refresh()
        return self._unpacked

    def __getattr__(self, name: str) -> Any:
        # Anything else (quant_method, prefix, ...) as the source has it.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._mixer.conv1d, name)


def _into(dst: torch.Tensor | None, src: torch.Tensor) -> torch.Tensor:
    if dst is not None and dst.shape == src.shape and dst.dtype == src.dtype \
            and dst.device == src.device:
        return dst.copy_(src)
    return src.contiguous()
