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

State: the core runs on a *view* of the mixer (``ulysses_state``) that
looks like the mixer of plain TP over TP*SP ranks, full-TP rank i = t*SP + s:
its conv rows are [q chunk s | k chunk s | v chunk s] of TP rank t's, its
``A_log``/``dt_bias`` the entries of its v-heads, its ``tp_size`` TP*SP.
Its conv and recurrent state caches are therefore what that plain-TP mixer
holds, channel for channel, so Shift's full-TP model (which is that mixer)
shares the very state tensors: written in one mode, read in the other.
What is GDN's own is here: the widths and rows of q, k, v, b and a, the
per-v-head parameters, and the linear-head checks (``ulysses_config`` says
which hybrids are served and refuses the others).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed import ulysses
from vllm.distributed.ulysses_state import LocalConv, StatePlan, per_head

if TYPE_CHECKING:
    from collections.abc import Callable

    from vllm.config import VllmConfig

# hf_text_config.model_type of the hybrids whose mixer is QwenGatedDeltaNetAttention.
GDN_MODEL_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")

# What the hybrid refusal names as served (ulysses_config._check_hybrid).
MODELS = "Qwen3-Next and Qwen3.5"


# ---------------------------------------------------------------- config

def verify_gdn(config: VllmConfig) -> None:
    """Called by ``ulysses_config.verify_config`` for a GDN hybrid: served
    when TP*SP divides its linear key and value heads (each GPU then runs
    whole heads, as plain TP over TP*SP would)."""
    mc, pc = config.model_config, config.parallel_config
    hf = mc.hf_text_config
    tp, sp = pc.tensor_parallel_size, pc.sequence_parallel_size
    for what in ("linear_num_key_heads", "linear_num_value_heads"):
        heads = getattr(hf, what)
        if heads % (tp * sp):
            raise ValueError(f"{mc.architecture} has {what}={heads}, not divisible by "
                             f"tensor_parallel_size*sequence_parallel_size={tp}*{sp}; choose "
                             "TP*SP dividing the linear-attention heads")


# ---------------------------------------------------------------- the plan

class LinearAttentionPlan(StatePlan):
    """Per GDN mixer: the exchanges around its core, and the view the core
    runs on (``ulysses_state``)."""

    VIEW_DOC = "A GDN mixer as plain TP over TP*SP ranks sees it (ulysses_gdn)."
    VIEW_MEMBERS = {"A_log": per_head("A_log"), "dt_bias": per_head("dt_bias")}

    def __init__(self, mixer: torch.nn.Module) -> None:
        super().__init__()
        tp = mixer.tp_size
        self.q_width = mixer.key_dim // tp          # this TP rank's q (= k) channels
        self.v_width = mixer.value_dim // tp
        self.local_heads = mixer.num_v_heads // (tp * self.sp)     # v-heads
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
        # CUDA's fused spec-decode kernel (a drafter, Qwen3.5's layout) takes the
        # whole projection and runs the core on this rank's tokens alone, before
        # the exchange: off, so verify steps go through it (the core's own spec
        # path).  Shift's full-TP model keeps it.
        if getattr(mixer, "enable_fused_gdn_spec_decode", False):
            mixer.enable_fused_gdn_spec_decode = False
        return cls.install(mixer)

    def view_attributes(self, mixer: torch.nn.Module) -> dict[str, Any]:
        """The full-TP rank's ``tp_rank``: the core's head counts
        (``num_*_heads // tp_size``), ``rearrange_mixed_qkv`` and the state
        shape then describe this GPU."""
        return {"tp_rank": mixer.tp_rank * self.sp + self.rank}

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
        out = self.core(core_op, [torch.cat([q, k, v], dim=-1), b.contiguous(), a.contiguous()],
                        n, (self.local_heads, self.head_v_dim), mixed_qkv, layer_name)
        return out.view(n, self.sp * self.local_heads, self.head_v_dim)
