# SPDX-License-Identifier: Apache-2.0
"""Ulysses SP for vLLM's multi-head latent attention (``MLAAttention``:
DeepSeek-V2/V3, Kimi K2).

Why a module of its own: MLA is not ``Attention``.  Its layer takes the
query heads and, per token, one head-less latent (the normed compressed KV
and the rotary key, ``kv_c_normed`` and ``k_pe``), which it caches as is;
the per-head keys and values come from the latent through ``kv_b_proj``
inside the layer (per token in prefill, absorbed into the query and output
in decode).  Around it the exchange is ``ulysses.AttentionPlan``'s with one
KV head replicated to every SP rank: one all-to-all gives each GPU every
token of the step for 1/SP of the TP rank's query heads and the step's whole
latent (the replication makes it an all-gather), so every GPU caches the
step's latent as every TP rank does; the output goes back by all-to-all.

The layer attends with H/(TP*SP) heads, so ``kv_b_proj`` must hold exactly
those: its parameters are re-created (before loading) as plain TP over
TP*SP creates them for this GPU, full-TP rank tp_rank*SP + sp_rank
(``ulysses.attention_head_shard``), and the absorbed weights the layer
derives from it after loading are this GPU's heads' by construction.
Shift's full-TP model builds the same ``kv_b_proj`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.distributed import ulysses

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig


def verify_mla(config: VllmConfig, model_config: Any, what: str) -> None:
    """MLA under SP: dense MLA only (the sparse indexer of DeepSeek-V3.2
    selects tokens per query over the whole context, with a cache and
    heads of its own that nothing here lays out)."""
    hf = model_config.hf_text_config
    if getattr(hf, "index_topk", None) or getattr(hf, "index_n_heads", None):
        raise ValueError(f"sequence_parallel_size > 1 does not support sparse MLA attention "
                         f"(the DeepSeek-V3.2 indexer of {what}) yet; use -sp 1")


def maybe_plan(num_heads: int, kv_b_proj: Any) -> ulysses.AttentionPlan | None:
    """The layer's exchange plan under SP (None without SP); ``kv_b_proj``
    (ColumnParallelLinear over the TP rank's heads) resharded for this GPU's."""
    if ulysses.sp_size() == 1:
        return None
    from vllm.model_executor.layers.linear import ColumnParallelLinear
    from vllm.v1.attention.backend import AttentionType

    plan = ulysses.AttentionPlan.maybe_create(num_heads, 1, AttentionType.DECODER)
    if type(kv_b_proj) is not ColumnParallelLinear:
        raise ValueError(f"sequence_parallel_size > 1 needs MLA's kv_b_proj as a "
                         f"ColumnParallelLinear, not {type(kv_b_proj).__name__}; use -sp 1")
    reshard(kv_b_proj, *ulysses.attention_head_shard())
    return plan


def reshard(layer: Any, rank: int, size: int) -> None:
    """Make the live ColumnParallelLinear ``layer`` rank ``rank`` of
    ``size``: its partition sizes set, then only its parameters re-created,
    by its own quant method's ``create_weights`` (what
    ``ColumnParallelLinear.__init__`` calls) and a bias as that makes it.
    The module itself stays as the model built it: hooks, the quant method
    and attributes set on it after construction are kept (running
    ``__init__`` again reset them), and the parameters of the TP-rank shard
    are dropped before the new ones are allocated.  Each parameter gets the
    loader the release chose for the layer (read from the one it replaces,
    unwrapped of any online-processing wrapper, which ``create_weights``
    puts back)."""
    import inspect

    import torch
    from vllm.model_executor.utils import set_weight_attrs

    params = {name: p for name, p in layer.named_parameters(recurse=False)
              if name != "bias"}
    if not params:
        raise ValueError(f"{layer.prefix}: no parameters to reshard for sequence parallelism")
    loaders = [getattr(p, "weight_loader", None) for p in params.values()]
    loader = inspect.unwrap(next((f for f in loaders if f is not None), layer.weight_loader))
    for name in params:
        delattr(layer, name)
    bias = layer.bias is not None
    layer.bias = None
    layer.tp_rank, layer.tp_size = rank, size
    layer.output_size_per_partition = layer.output_size // size
    if layer.output_size_per_partition * size != layer.output_size:
        raise ValueError(f"{layer.prefix}: {layer.output_size} outputs do not split over "
                         f"{size} GPUs")
    layer.output_partition_sizes = [layer.output_size_per_partition]
    layer.quant_method.create_weights(
        layer=layer, input_size_per_partition=layer.input_size_per_partition,
        output_partition_sizes=layer.output_partition_sizes, input_size=layer.input_size,
        output_size=layer.output_size, params_dtype=layer.params_dtype, weight_loader=loader)
    if bias:
        layer.bias = torch.nn.Parameter(
            torch.empty(layer.output_size_per_partition, dtype=layer.params_dtype),
            requires_grad=False)
        set_weight_attrs(layer.bias, {"output_dim": 0, "weight_loader": layer.weight_loader})
    layer.update_param_tp_status()


def forward(layer: Any, q: torch.Tensor, kv_c_normed: torch.Tensor, k_pe: torch.Tensor,
            output_shape: Any) -> torch.Tensor:
    """``layer``'s attention over the step for this GPU's heads: q [n, H/TP,
    D] and the latent [n, L], [n, 1, R] of this rank's n tokens in, the
    output [n, H/TP * Dv] of the same tokens back."""
    heads, dim, rope = layer.num_heads, q.shape[-1], k_pe.shape[-1]
    pack_q, pack_latent = packed_inputs(layer)

    def attend(q, kv_c, pe, _shape, _dtype):
        q = q.contiguous() if pack_q else q
        kv_c = kv_c.contiguous() if pack_latent else kv_c
        return layer._attend(q.view(-1, heads, dim), kv_c, pe.view(-1, 1, rope),
                             output_shape=(q.shape[0], heads * layer.v_head_dim))

    out = layer.ulysses.forward(attend, q, kv_c_normed, k_pe, None, None)
    return out if output_shape is None else out.view(output_shape)


def packed_inputs(layer: Any) -> tuple[bool, bool]:
    """Whether the layer gets q, and the latent ``kv_c``, as packed copies
    rather than the column views of the exchange's one buffer (rows of the
    buffer's width) they arrive as.  Upstream hands the layer a packed q
    (``q_b_proj``'s output) and a packed ``kv_c`` (the layernorm's), and
    some consumers read packed storage whatever the strides say:

    - q: the prefill backend gets the step's prefill rows of q as they are.
      A GPU prefill kernel may read them packed (tokenspeed-mla's FMHA reads
      its ``v`` so and gave wrong output on a strided view: upstream copies
      that ``v``), so on GPUs q is copied.  The decode path splits q, runs
      it through a bmm and concatenates it into a new tensor anyway, and
      the CPU backends read strides (the reference prefill runs SDPA on
      views; the decode kernel copies its q itself): no copy on CPU.
    - ``kv_c``: the cache write takes row strides (as it does upstream's
      strided ``k_pe``), and so does an unquantized ``kv_b_proj`` (torch's
      GEMM); a quantized one runs its own kernel (Marlin, CUTLASS, ...), fed
      packed rows in this path upstream, so it gets them packed.

    ``k_pe`` needs nothing: upstream's is a column view too.  The copies
    are of this GPU's heads over the step, once a layer."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.platforms import current_platform

    quantized = not isinstance(layer.kv_b_proj.quant_method, UnquantizedLinearMethod)
    return not current_platform.is_cpu(), quantized
