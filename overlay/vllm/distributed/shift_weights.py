# SPDX-License-Identifier: Apache-2.0
"""Shift's full-TP model on the SP model's weights instead of a copy of them.

Why: Shift keeps two models on every GPU, the SP model (TP=T shards) and the
full-TP model (TP=T*S).  Full-TP rank t*S+s needs a shard that lies inside
TP rank t's shard of the SP model; where it lies there as one block, in the
layout the layer's kernel reads, the full-TP parameter can be a view of the
SP model's and the memory goes to the KV cache, which is what bounds Shift
under load (70B FP8 on 4 GPUs: a 16 GiB copy, a KV cache 0.56x DP's).

* Row-parallel linears (unquantized): full-TP rank t*S+s holds input columns
  [s*k, (s+1)*k) of TP rank t's shard; vocab-parallel embeddings and LM
  heads: a range of vocabulary rows inside TP rank t's range.  Quantized
  row-parallel layers keep a copy: their column slice has the SP shard's
  leading dimension and vLLM's FP8 GEMM assumes packed strides.
* Merged column-parallel linears (QKV, gate/up): full-TP rank t*S+s needs
  block s of each part, [Q_ts | K_ts | V_ts]: three pieces of the natural SP
  shard [Q_t | K_t | V_t].  ``arrange`` lays the SP shard's rows out as
  [Q_t0 K_t0 V_t0 | Q_t1 K_t1 V_t1 | ...] instead (a row permutation just
  before the layer's weights are processed, so quantization and packing see
  it), which makes every full-TP shard one contiguous block, and the SP
  model reads the layer's output back in the natural order: a gate/up whose
  output goes straight into a gated activation (SiluAndMul and its kind) as
  it lies, viewed as S small gate/ups per token (no copy); any other merged
  layer (QKV) through one gather of its output.

``share`` makes the views once both models are loaded and processed, layer
by layer, only where every parameter of the full-TP layer maps onto the SP
layer's with the same dtype and strides, and (real weights) the same values;
anything else keeps its copy.  The CPU platform packs linear weights for
oneDNN and drops the plain tensors, so nothing is shared there; the
arrangement and the SP model's reading of it run on every platform.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch
from vllm.distributed import ulysses
from vllm.logger import init_logger

logger = init_logger(__name__)

# Linear methods whose weight is the plain [out, in] tensor when processing starts (online FP8
# quantizes it then, per tensor: the permutation commutes with that).  Checkpoint-quantized
# methods carry scales per logical part, whose processing reads the natural order.
_ARRANGEABLE_METHODS = {"UnquantizedLinearMethod", "Fp8PerTensorOnlineLinearMethod"}
# Gated activations that split the last dimension into two halves and work per row: on S
# blocks [G_s U_s] of one row they compute S small gate/ups, in the order down_proj reads.
_GATED = {"SiluAndMul", "GeluAndMul", "MulAndSilu"}
_ARRANGED = "_shift_rows_arranged"
# Set on a layer whose weight an SP core view reads row by row, not through the layer's
# forward (the Mamba-2 conv, ulysses_mamba): its rows must stay in their natural order.
ROWS_READ = "_ulysses_reads_rows"


# ---------------------------------------------------------------- arrangement (SP model)

def block_order(sizes: list[int], sp: int) -> list[int]:
    """Row ``i`` of the arranged shard is row ``order[i]`` of the natural one:
    block s of every part, then block s+1 of every part."""
    order, offsets = [], [sum(sizes[:i]) for i in range(len(sizes))]
    for s in range(sp):
        for off, size in zip(offsets, sizes):
            b = size // sp
            order.extend(range(off + s * b, off + (s + 1) * b))
    return order


def _arrangeable(layer: torch.nn.Module, sp: int) -> bool:
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear
    if not isinstance(layer, (MergedColumnParallelLinear, QKVParallelLinear)):
        return False
    if getattr(layer, ROWS_READ, False):    # a conv weight a core view reads by rows
        return False
    sizes = list(getattr(layer, "output_partition_sizes", []))
    if len(sizes) < 2 or any(p % sp for p in sizes):
        return False
    if isinstance(layer, QKVParallelLinear):
        # Full-TP ranks that replicate KV heads hold no block of their own.
        full = layer.tp_size * sp
        if layer.total_num_heads % full or layer.total_num_kv_heads % full:
            return False
    return type(getattr(layer, "quant_method", None)).__name__ in _ARRANGEABLE_METHODS


def arrange(model: torch.nn.Module) -> int:
    """Before the SP model's weights are loaded: have each merged layer that
    can be shared permute its rows just before its weights are processed.
    Returns how many layers will."""
    sp = ulysses.sp_size()
    modules = dict(model.named_modules())
    count = 0
    for name, layer in modules.items():
        if not _arrangeable(layer, sp):
            continue
        parent_name, _, attr = name.rpartition(".")
        _arrange_on_processing(layer, modules.get(parent_name, model), attr, sp)
        count += 1
    return count


def _arrange_on_processing(layer: torch.nn.Module, parent: torch.nn.Module, attr: str,
                           sp: int) -> None:
    method = layer.quant_method
    process = method.process_weights_after_loading
    # On the host, whatever the default device: vLLM 0.32+ builds the model (and calls
    # this) under ``with torch.device(target)`` but processes its weights after leaving it.
    order = torch.tensor(block_order(list(layer.output_partition_sizes), sp), device="cpu")

    def process_arranged(target: torch.nn.Module) -> None:
        # Loaders call this once a layer's weights are in (the default loader after all of
        # them, online quantization and the dummy loader layer by layer); once is enough.
        if target is layer and not getattr(layer, _ARRANGED, False) and _permute_rows(layer, order):
            setattr(layer, _ARRANGED, True)
            _read_in_natural_order(layer, parent, attr, order, sp)
        process(target)

    method.process_weights_after_loading = process_arranged


def _permute_rows(layer: torch.nn.Module, order: torch.Tensor) -> bool:
    w = layer.weight
    n = len(order)
    if w.is_meta or w.dim() != 2 or w.shape[0] != n or not w.is_floating_point():
        return False
    idx = order.to(w.device)
    w.data.copy_(w.data.index_select(0, idx))
    bias = getattr(layer, "bias", None)
    if isinstance(bias, torch.Tensor) and bias.dim() == 1 and bias.shape[0] == n:
        bias.data.copy_(bias.data.index_select(0, idx))
    return True


def _read_in_natural_order(layer: torch.nn.Module, parent: torch.nn.Module, attr: str,
                           order: torch.Tensor, sp: int) -> None:
    if _gated_activation_follows(layer, parent, attr):
        parent.act_fn = BlockedActivation(parent.act_fn, sp)
        return
    natural = torch.argsort(order)                    # the inverse permutation, on the host
    layer.register_buffer("_shift_natural_order", natural.to(layer.weight.device),
                          persistent=False)
    layer.__class__ = _in_natural_order(type(layer))


_SOURCE_CHECKED: dict[tuple[type, str], bool] = {}


def _gated_activation_follows(layer: torch.nn.Module, parent: torch.nn.Module,
                              attr: str) -> bool:
    """The parent's forward puts this layer's output, as it is, into its own gated
    activation, read from the parent class's source once (``reads_output_whole``)."""
    sizes = list(layer.output_partition_sizes)
    act = getattr(parent, "act_fn", None)
    if len(sizes) != 2 or sizes[0] != sizes[1] or type(act).__name__ not in _GATED:
        return False
    key = (type(parent), attr)
    if key not in _SOURCE_CHECKED:
        _SOURCE_CHECKED[key] = reads_output_whole(type(parent), attr)
    return _SOURCE_CHECKED[key]


def reads_output_whole(cls: type, attr: str) -> bool:
    """``cls.forward`` hands ``self.<attr>``'s output straight to ``self.act_fn``:
    ``x, _ = self.gate_up_proj(x)`` then ``x = self.act_fn(x)``, or from vLLM 0.32
    ``x = maybe_fused_act_quant(self.act_fn, x, self.down_proj)``, which calls the
    activation it is given unless a fused kernel is registered for that activation's
    type (none is for ``BlockedActivation``).  Anything between the two (Falcon-H1
    scales the gate half in place) leaves the layer reading its output gathered."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    pattern = (rf"(\w+)\s*,\s*_\s*=\s*self\.{re.escape(attr)}\([^\n]*\)\s*\n"
               rf"\s*\w+\s*=\s*(?:self\.act_fn\(\1\)"
               rf"|maybe_fused_act_quant\(\s*self\.act_fn\s*,\s*\1\s*,)")
    return re.search(pattern, source) is not None


class BlockedActivation(torch.nn.Module):
    """A gated activation over a gate/up output arranged in S blocks [G_s U_s]:
    each block is a gate/up of its own, and the results side by side are the
    natural [I_0 | I_1 | ...] the down projection reads.  Views, no copy."""

    def __init__(self, act: torch.nn.Module, sp: int):
        super().__init__()
        self.act, self.sp = act, sp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(x.reshape(-1, x.shape[-1] // self.sp))
        return y.reshape(*x.shape[:-1], -1)


_IN_ORDER: dict[type, type] = {}


def read_paths(model: torch.nn.Module) -> dict[str, int]:
    """How the SP model reads its arranged merged layers back: ``blocked``, gate/ups
    whose activation takes the blocks as they lie (no copy), and ``gathered``, layers
    whose output is gathered to the natural order (QKV, and any gate/up whose parent's
    forward ``reads_output_whole`` does not recognise).  A gate/up that moves from the
    first to the second costs a copy of its output on every SP step and no accuracy,
    so only this count shows it."""
    blocked = sum(isinstance(getattr(m, "act_fn", None), BlockedActivation)
                  for m in model.modules())
    gathered = sum(type(m) in _IN_ORDER.values() for m in model.modules())
    return {"blocked": blocked, "gathered": gathered}


def _in_natural_order(cls: type) -> type:
    """``cls`` whose output (and separate bias) is gathered back to the natural
    order: one copy of the output, the price of sharing a layer whose consumer
    reads it whole (QKV's split into q, k and v)."""
    if cls not in _IN_ORDER:
        def forward(self, input_):
            out = cls.forward(self, input_)
            idx = self._shift_natural_order
            if isinstance(out, tuple):
                y, bias = out
                return y.index_select(-1, idx), None if bias is None else bias.index_select(-1, idx)
            return out.index_select(-1, idx)
        _IN_ORDER[cls] = type(cls.__name__, (cls,), {"forward": forward,
                                                     "__module__": cls.__module__})
    return _IN_ORDER[cls]


# ---------------------------------------------------------------- sharing (full-TP model)

def share(sp_model: torch.nn.Module, full: torch.nn.Module, *, check_values: bool) -> int:
    """Point the full-TP model's parameters at the SP model's where their
    shard is one block of it (module docstring), and return the bytes freed.
    ``check_values``: compare each view with the weights the full-TP model
    loaded itself before replacing them (off for dummy weights, which the two
    models draw independently)."""
    sp, rank = ulysses.sp_size(), ulysses.sp_rank()
    sp_modules = dict(sp_model.named_modules())
    saved, refused = 0, []
    for name, layer in full.named_modules():
        src = sp_modules.get(name)
        if src is None:
            continue
        if getattr(src, _ARRANGED, False):
            views = _merged_views(src, layer, sp, rank)
        elif hasattr(src, "expert_map_manager"):
            views = _expert_views(src, layer)
        else:
            views = _plain_views(src, layer, sp, rank)
        if not views:
            continue
        if check_values and not _same_values(src, layer, views):
            refused.append(name)
            continue
        for pname, view in views.items():
            p = getattr(layer, pname)
            if p.data_ptr() != view.data_ptr():
                saved += p.numel() * p.element_size()
                p.data = view
    if refused:
        logger.warning("Shift: %d layers of the full-TP model keep their own weights: "
                       "the SP model's block differs from what they loaded (first: %s)",
                       len(refused), refused[0])
    return saved


def _expert_views(src: Any, layer: Any) -> dict[str, torch.Tensor]:
    """A MoE layer's routed experts under expert parallelism: both models
    place the same experts on a GPU (``ulysses_moe``: the SP model's EP rank
    is the full-TP one), so each of the full-TP layer's parameters is the SP
    layer's whole, as processed (packed) for the same kernel.  Without EP the
    two models shard the experts by TP and by TP*SP: nothing to share."""
    mine, theirs = layer.expert_map_manager.expert_map, src.expert_map_manager.expert_map
    if mine is None or theirs is None or not torch.equal(mine.cpu(), theirs.cpu()):
        return {}
    if _moe_kernel(layer) != _moe_kernel(src):   # each laid out for its own kernel
        return {}
    views = {}
    for pname, p in layer.named_parameters(recurse=False):
        q = getattr(src, pname, None)
        if (not isinstance(q, torch.Tensor) or q.shape != p.shape or q.dtype != p.dtype
                or q.stride() != p.stride()):
            return {}
        views[pname] = q.data
    return views


def _moe_kernel(layer: Any) -> tuple:
    """What decides how a MoE layer's tensors are laid out after loading (a
    kernel may prepack, shuffle or swizzle them): its quant method's class, the
    backend it selected (``unquantized_backend``, ``fp8_backend``, ...) and the
    experts kernel class.  Two models that chose differently each read their
    own layout, so they share nothing."""
    method = getattr(layer, "quant_method", None)
    backends = sorted((k, str(v)) for k, v in vars(method).items() if k.endswith("_backend")) \
        if method is not None and hasattr(method, "__dict__") else []
    kernel = getattr(method, "experts_cls", None)
    return type(method).__qualname__, getattr(kernel, "__qualname__", str(kernel)), backends


def _bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, whatever the dtype: float8 included, which
    ``torch.equal`` does not take on every torch release."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.view(as_int), b.view(as_int))


def _plain_views(src: Any, layer: Any, sp: int, rank: int) -> dict[str, torch.Tensor]:
    """Unquantized row-parallel linears and vocab-parallel embeddings / LM heads."""
    from vllm.model_executor.layers.linear import RowParallelLinear, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod,
        VocabParallelEmbedding,
    )
    if isinstance(layer, RowParallelLinear) and isinstance(src, RowParallelLinear):
        plain = UnquantizedLinearMethod
    elif isinstance(layer, VocabParallelEmbedding) and isinstance(src, VocabParallelEmbedding):
        plain = UnquantizedEmbeddingMethod
    else:
        return {}
    if not (type(layer.quant_method) is plain and type(src.quant_method) is plain):
        return {}
    w, s = layer.weight, src.weight
    # (The CPU platform packs linear weights for oneDNN and drops them.)
    if w.dim() != 2 or s.dim() != 2 or w.numel() == 0 or s.dtype != w.dtype:
        return {}
    if plain is UnquantizedLinearMethod:
        k = w.shape[1]
        if s.shape != (w.shape[0], k * sp):
            return {}
        return {"weight": s.data[:, rank * k:(rank + 1) * k]}
    mine, theirs = layer.shard_indices, src.shard_indices
    offset = mine.padded_org_vocab_start_index - theirs.padded_org_vocab_start_index
    rows = w.shape[0]
    if (mine.num_added_elements_padded or theirs.num_added_elements_padded
            or w.shape[1] != s.shape[1] or offset < 0 or offset + rows > s.shape[0]):
        return {}
    return {"weight": s.data[offset:offset + rows]}


def _merged_views(src: Any, layer: Any, sp: int, rank: int) -> dict[str, torch.Tensor]:
    """Block ``rank`` of each parameter of an arranged merged layer, along the one
    dimension where the SP parameter is S times the full-TP one; a scalar (a
    per-tensor scale) is the SP layer's own.  All or nothing: the layer's
    kernel must read the views exactly as it read its own tensors."""
    if type(src.quant_method) is not type(layer.quant_method):
        return {}
    views: dict[str, torch.Tensor] = {}
    for pname, p in layer.named_parameters(recurse=False):
        s = getattr(src, pname, None)
        if not isinstance(s, torch.Tensor) or s.dtype != p.dtype or p.numel() == 0:
            return {}
        if pname != "weight" and p.numel() == 1 and s.numel() == 1:
            view = s.data.view(p.shape)
        else:
            if s.dim() != p.dim():
                return {}
            dims = [d for d in range(p.dim()) if s.shape[d] != p.shape[d]]
            if len(dims) != 1 or s.shape[dims[0]] != p.shape[dims[0]] * sp:
                return {}
            n = p.shape[dims[0]]
            view = s.data.narrow(dims[0], rank * n, n)
        if view.shape != p.shape or view.stride() != p.stride():
            return {}
        views[pname] = view
    return views if "weight" in views else {}


def _same_values(src: Any, layer: Any, views: dict[str, torch.Tensor]) -> bool:
    """The views hold what the full-TP layer loaded: equal for plain weights; for
    FP8 weights with per-tensor scales, equal after dequantizing within FP8's
    rounding (each model quantized its own shard with its own scale)."""
    if "weight" not in views:   # routed experts: the same experts, processed alike
        return all(_bytes_equal(getattr(layer, n).data, v) for n, v in views.items())
    w, v = layer.weight.data, views["weight"]
    if w.is_floating_point() and w.element_size() > 1:
        return torch.equal(w, v)
    mine, theirs = getattr(layer, "weight_scale", None), views.get("weight_scale")
    if mine is None or theirs is None or mine.numel() != 1 or theirs.numel() != 1:
        return False
    a = w.float() * mine.float()
    b = v.float() * theirs.float()
    return bool((a - b).abs().mean() <= 0.1 * a.abs().mean())
