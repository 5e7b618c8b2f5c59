# SPDX-License-Identifier: Apache-2.0
"""What SP's state-space mixers share: the Gated-DeltaNet layers
(``ulysses_gdn``) and vLLM's Mamba-2 mixer (``ulysses_mamba``).

Why a module of its own: both mixers have a core (a causal conv, then a
recurrence) that needs every token of the step, between token-local
projections, with independent heads.  Both plans therefore do the same
thing around different widths: exchange the projections so that each SP
rank holds every token for 1/SP of the TP rank's heads, run the core over
the whole step, return its output to the token owners.  And both run the
core on a *view* of the mixer that is the mixer of plain TP over TP*SP on
full-TP rank t*SP+s, so that its state caches are that mixer's, channel for
channel, and Shift's full-TP model shares them.  This module holds that
machinery; each family module keeps what is its own (which channels go
where, which parameters are per head, its checks).

The view replaces the mixer in the layer table by name
(``static_forward_context``), so the KV-cache spec, allocation, binding,
metadata builders, the core op's lookup and Shift's ``bind_kv_cache`` all
see it; it is not a child module, so loading and ``named_parameters`` never
meet it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from vllm.distributed import ulysses

if TYPE_CHECKING:
    from collections.abc import Callable


class StatePlan:
    """Per state-space mixer: the SP group, this GPU's heads and conv rows,
    and the core run over the whole step.  A family's plan sets
    ``local_heads`` (this GPU's entries of a per-head parameter) and
    ``conv`` (its ``LocalConv``), and says what its view changes
    (``view_attributes``) and adds (``VIEW_DOC``, ``VIEW_MEMBERS``)."""

    VIEW_DOC: ClassVar[str] = ""
    VIEW_MEMBERS: ClassVar[dict[str, Any]] = {}
    local_heads: int
    conv: LocalConv

    def __init__(self) -> None:
        self.sp = ulysses.sp_size()
        self.rank = ulysses.sp_rank()
        self.group = ulysses.get_sp_group()

    @classmethod
    def install(cls, mixer: torch.nn.Module, *args: Any) -> StatePlan:
        """The plan of ``mixer`` (``cls(mixer, *args)``), its view registered
        in the mixer's place under its name.  Called at the end of the
        mixer's ``__init__``, after the family's checks."""
        from vllm.config import get_current_vllm_config

        ulysses.register_ops()
        plan = cls(mixer, *args)
        table = get_current_vllm_config().compilation_config.static_forward_context
        assert table.get(mixer.prefix) is mixer, f"{mixer.prefix} is not registered"
        table[mixer.prefix] = plan.core_view(mixer)
        return plan

    def view_attributes(self, mixer: torch.nn.Module) -> dict[str, Any]:
        """What the view holds other than the mixer's attributes and
        ``tp_size`` (TP*SP)."""
        return {}

    def core_view(self, mixer: torch.nn.Module) -> torch.nn.Module:
        """An object of a subclass of the mixer's class with the mixer's
        attributes, but ``tp_size`` TP*SP, the family's
        ``view_attributes``, and properties that read this GPU's heads and
        conv rows: everything the core reads then describes this GPU as plain
        TP over TP*SP would."""
        view = object.__new__(_view_class(type(mixer), self.VIEW_DOC, self.VIEW_MEMBERS))
        view.__dict__.update(mixer.__dict__)
        view.__dict__["tp_size"] = mixer.tp_size * self.sp
        view.__dict__.update(self.view_attributes(mixer))
        _VIEWS[view] = (mixer, self)
        return view

    def core(self, core_op: Callable, inputs: list[Any], n: int, out_shape: tuple[int, ...],
             like: torch.Tensor, layer_name: Any) -> torch.Tensor:
        """``core_op(*inputs, out, layer_name)`` over all SP*n tokens of the
        step for this GPU's heads, then ``out`` [SP*n, *out_shape] back to the
        token owners: [n, SP * prod(out_shape)]."""
        # zeros, as upstream: the core writes only the step's actual tokens.
        out = torch.zeros((self.sp * n, *out_shape), dtype=like.dtype, device=like.device)
        core_op(*inputs, out, layer_name)
        return ulysses.tokens_from_heads(out.view(self.sp * n, -1), self.group)


# ---------------------------------------------------------------- the view

# view -> (mixer, plan), kept off the view's __dict__: Shift copies the SP
# layer's attributes that its full-TP layer lacks (shift._adopt_runtime_attributes).
_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_VIEW_CLASSES: dict[type, type] = {}


def mixer_of(view: Any) -> torch.nn.Module:
    return _VIEWS[view][0]


def plan_of(view: Any) -> StatePlan:
    return _VIEWS[view][1]


def per_head(name: str) -> property:
    """The view's member ``name``: this GPU's entries of the mixer's per-head
    parameter of that name ([heads of the TP rank]), chunk ``rank`` of
    ``local_heads``.  A view, so weights loaded later are the ones read."""
    def read(view: Any) -> torch.Tensor:
        mixer, plan = _VIEWS[view]
        return getattr(mixer, name).narrow(0, plan.rank * plan.local_heads, plan.local_heads)
    return property(read)


def _view_class(cls: type, doc: str, members: dict[str, Any]) -> type:
    if cls not in _VIEW_CLASSES:
        _VIEW_CLASSES[cls] = type(f"Ulysses{cls.__name__}", (cls,), {
            "__doc__": doc,
            "conv1d": property(lambda self: _VIEWS[self][1].conv),
            **members,
        })
    return _VIEW_CLASSES[cls]


# ---------------------------------------------------------------- the conv rows

class LocalConv:
    """The conv1d a state-space core sees under SP: ``rows`` of the TP
    rank's depthwise conv weight, the full-TP rank's rows (a family's plan
    says which: GDN's [q chunk s | k chunk s | v chunk s] of [q | k | v],
    Mamba-2's x chunk s and its groups' B and C).

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
                # AVX512-bf16 / Arm bf16: the source is packed in place; pack our rows alike.
                plain = unpacked.index_select(0, rows)
                weight = _conv_weight_pack()(plain)
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


def _conv_weight_pack():
    """vLLM's CPU packer of a conv weight: ``vllm._custom_ops``' up to 0.33,
    ``vllm._cpu_ops``' from 0.34 (whichever this release's platform used)."""
    import importlib

    for module in ("vllm._cpu_ops", "vllm._custom_ops"):
        try:
            return importlib.import_module(module).causal_conv1d_weight_pack
        except (ImportError, AttributeError):
            continue
    raise RuntimeError("a packed conv weight, but this vLLM has no causal_conv1d_weight_pack "
                       "to pack SP's rows alike")


def _into(dst: torch.Tensor | None, src: torch.Tensor) -> torch.Tensor:
    if dst is not None and dst.shape == src.shape and dst.dtype == src.dtype \
            and dst.device == src.device:
        return dst.copy_(src)
    return src.contiguous()
