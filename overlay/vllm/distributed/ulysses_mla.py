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
those: it is rebuilt (before loading) as plain TP over TP*SP builds it for
this GPU, full-TP rank tp_rank*SP + sp_rank (``ulysses.attention_head_shard``),
and the absorbed weights the layer derives from it after loading are this
GPU's heads' by construction.  Shift's full-TP model builds the same
``kv_b_proj`` itself.
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
    (ColumnParallelLinear over the TP rank's heads) rebuilt for this GPU's."""
    if ulysses.sp_size() == 1:
        return None
    from vllm.model_executor.layers.linear import ColumnParallelLinear
    from vllm.v1.attention.backend import AttentionType

    plan = ulysses.AttentionPlan.maybe_create(num_heads, 1, AttentionType.DECODER)
    if type(kv_b_proj) is not ColumnParallelLinear:
        raise ValueError(f"sequence_parallel_size > 1 needs MLA's kv_b_proj as a "
                         f"ColumnParallelLinear, not {type(kv_b_proj).__name__}; use -sp 1")
    rank, size = ulysses.attention_head_shard()
    k = kv_b_proj
    ColumnParallelLinear.__init__(
        k, k.input_size, k.output_size, bias=k.has_bias, gather_output=k.gather_output,
        skip_bias_add=k.skip_bias_add, params_dtype=k.params_dtype,
        quant_config=k.quant_config, prefix=k.prefix, return_bias=k.return_bias,
        tp_rank=rank, tp_size=size)
    return plan


def forward(layer: Any, q: torch.Tensor, kv_c_normed: torch.Tensor, k_pe: torch.Tensor,
            output_shape: Any) -> torch.Tensor:
    """``layer``'s attention over the step for this GPU's heads: q [n, H/TP,
    D] and the latent [n, L], [n, 1, R] of this rank's n tokens in, the
    output [n, H/TP * Dv] of the same tokens back."""
    heads, dim, rope = layer.num_heads, q.shape[-1], k_pe.shape[-1]

    def attend(q, kv_c, pe, _shape, _dtype):
        return layer._attend(q.view(-1, heads, dim), kv_c, pe.view(-1, 1, rope),
                             output_shape=(q.shape[0], heads * layer.v_head_dim))

    out = layer.ulysses.forward(attend, q, kv_c_normed, k_pe, None, None)
    return out if output_shape is None else out.view(output_shape)
