# SPDX-License-Identifier: Apache-2.0
"""Ulysses SP for vLLM's Mamba-2 mixer (``MambaMixer2``: Nemotron-H,
Granite 4.0-H, Falcon-H1, Zamba2).

Why a module of its own: the mixer's core (a causal conv, then the SSD scan)
is a recurrence over each request's tokens, so an SP rank cannot run it on
its 1/SP of a step; its heads are independent, between token-local input and
output projections.  So the Gated-DeltaNet trick (``ulysses_gdn``) applies:
after ``in_proj`` (this rank's tokens, the TP rank's weights) one all-to-all
gives each SP rank every token of the step for 1/SP of the TP rank's heads
(x and dt by head; B and C by group, each group repeated to the SP ranks of
its heads where a TP rank holds fewer groups than SP, as KV heads are); the
core runs over the whole step; a second all-to-all returns its output to
the token owners before the gated norm and ``out_proj``.

The core runs on a *view* of the mixer registered in its place under its
name (``ulysses_state``, shared with GDN): the mixer of plain TP over TP*SP
on full-TP rank t*SP+s (its conv rows, ``A``, ``D``, ``dt_bias`` and sizes),
so its conv and SSM state caches are that mixer's, channel for channel, and
Shift's full-TP model (which is that mixer) shares them.  Upstream builds
that mixer only when TP*SP divides the heads and the groups (or there is
one group): other layouts are refused before any worker starts.  What is
Mamba-2's own is here: the widths and rows of x, B, C and dt, the groups,
the per-head parameters and sizes of the view, and the checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed import ulysses
from vllm.distributed.ulysses_state import LocalConv, StatePlan, mixer_of, per_head, plan_of

if TYPE_CHECKING:
    from vllm.config import VllmConfig

# hf_text_config.model_type -> (heads field, groups field) of the Mamba-2 hybrids served.
# Zamba2's shared transformer blocks and their per-layer LoRA adapters are token-local
# layers and vLLM Attention layers, which SP lays out as any model's.
MAMBA2_MODEL_TYPES = {
    "nemotron_h": ("mamba_num_heads", "n_groups"),
    "granitemoehybrid": ("mamba_n_heads", "mamba_n_groups"),
    "falcon_h1": ("mamba_n_heads", "mamba_n_groups"),
    "zamba2": ("n_mamba_heads", "mamba_ngroups"),
}
# What the hybrid refusals name as served (here and ulysses_config._check_hybrid).
MODELS = "Nemotron-H, Granite 4.0-H, Falcon-H1 and Zamba2"


def verify_mamba2(config: VllmConfig) -> None:
    """The full TP*SP mixer must be one upstream builds: TP*SP divides the
    Mamba heads, and the groups (or there is one group)."""
    mc, pc = config.model_config, config.parallel_config
    hf = mc.hf_text_config
    heads_field, groups_field = MAMBA2_MODEL_TYPES[hf.model_type]
    heads, groups = getattr(hf, heads_field), getattr(hf, groups_field)
    n = pc.tensor_parallel_size * pc.sequence_parallel_size
    if heads % n:
        raise ValueError(f"{mc.architecture} has {heads_field}={heads}, not divisible by "
                         f"tensor_parallel_size*sequence_parallel_size={n}; choose TP*SP "
                         "dividing the Mamba heads")
    if groups % n and groups != 1:
        raise ValueError(f"{mc.architecture} has {groups_field}={groups}, which "
                         f"tensor_parallel_size*sequence_parallel_size={n} does not divide "
                         "(plain TP over TP*SP ranks could not split its groups); choose "
                         "TP*SP dividing the Mamba groups")


def _conv_weights(view: Any) -> torch.Tensor:
    """The view's conv rows as upstream's ``conv_weights`` buffer holds the
    mixer's: plain (channels, width).  That buffer is a view taken before
    loading, so it keeps the plain weight where vLLM's CPU platform then
    packs ``conv1d.weight`` in place (AVX512-bf16 and Arm bf16 CPUs, bf16
    weights); the Mamba-2 conv reads the buffer, never the packed weight."""
    conv = plan_of(view).conv
    plain = conv._cpu_unpacked_conv_weight
    return plain if plain is not None else conv.weight.flatten(1)


def _state_shape(view: Any):
    """The state shapes of plain TP over TP*SP: upstream's, with the
    full-TP group as the TP group."""
    with ulysses.as_full_tp():
        return type(mixer_of(view)).get_state_shape(view)


class Mamba2Plan(StatePlan):
    """Per Mamba-2 mixer: the exchanges around its core, and the view the
    core runs on (``ulysses_state``)."""

    VIEW_DOC = "A Mamba-2 mixer as plain TP over TP*SP ranks sees it (ulysses_mamba)."
    VIEW_MEMBERS = {
        "A": per_head("A"), "D": per_head("D"), "dt_bias": per_head("dt_bias"),
        "conv_weights": property(_conv_weights),
        "get_state_shape": _state_shape,
    }

    def __init__(self, mixer: torch.nn.Module, groups: int) -> None:
        super().__init__()
        sp, tp = self.sp, mixer.tp_size
        self.x_width = mixer.intermediate_size // tp
        self.tp_groups = mixer.n_groups // tp          # (groups replicated to TP, if one)
        self.bc_width = self.tp_groups * mixer.ssm_state_size
        self.dt_width = mixer.num_heads // tp
        # Each group's B and C go to the SP ranks of its heads.
        self.repeat = max(1, sp // self.tp_groups)
        self.local_groups = max(1, self.tp_groups // sp)
        self.local_heads = self.dt_width // sp
        self.head_dim = mixer.head_dim
        self.full_groups = groups if groups % (tp * sp) == 0 else tp * sp
        state, x_l = mixer.ssm_state_size, self.x_width // sp
        g0 = (self.rank // self.repeat) * self.local_groups * state
        bc = torch.arange(g0, g0 + self.local_groups * state)
        # Its rows stay in their natural order under Shift (shift_weights.ROWS_READ).
        mixer.conv1d._ulysses_reads_rows = True
        self.conv = LocalConv(mixer, torch.cat([
            torch.arange(self.rank * x_l, (self.rank + 1) * x_l),
            self.x_width + bc, self.x_width + self.bc_width + bc]))

    @classmethod
    def maybe_create(cls, mixer: torch.nn.Module, groups: int) -> Mamba2Plan | None:
        """At the end of the mixer's ``__init__`` (``groups``: the model's
        own count, before upstream's replication).  None without SP (and in
        Shift's full-TP model, built with SP=1): the mixer is upstream's."""
        if ulysses.sp_size() == 1:
            return None
        from vllm.config import get_current_vllm_config

        mc = get_current_vllm_config().model_config
        if getattr(mc.hf_text_config, "model_type", None) not in MAMBA2_MODEL_TYPES:
            raise ValueError(f"sequence_parallel_size > 1 does not support the Mamba2 layers of "
                             f"{mc.architecture} yet (of the Mamba-2 hybrids {MODELS}); "
                             "use -sp 1")
        sp, tp = ulysses.sp_size(), mixer.tp_size
        if mixer.num_heads % (tp * sp) or (groups % (tp * sp) and groups != 1):
            raise ValueError(f"{mixer.num_heads} Mamba heads and {groups} groups cannot be "
                             f"split over tensor_parallel_size*sequence_parallel_size="
                             f"{tp}*{sp}")
        if getattr(mixer, "use_replayssm", False):
            raise ValueError("sequence_parallel_size > 1 does not support --use-replayssm yet")
        return cls.install(mixer, groups)

    def view_attributes(self, mixer: torch.nn.Module) -> dict[str, Any]:
        """The sizes of full-TP rank t*SP+s of TP*SP: its groups and conv
        channels; and the core's input read from offset 0 (the exchange
        leaves out the gate, which stays with the token owners).  Without
        the ``conv_weights`` buffer, which the view reads as a property."""
        x_l, g_l = self.x_width // self.sp, self.local_groups * mixer.ssm_state_size
        return dict(
            _buffers={k: v for k, v in mixer._buffers.items() if k != "conv_weights"},
            n_groups=self.full_groups,
            groups_ssm_state_size=self.full_groups * mixer.ssm_state_size,
            tped_intermediate_size=0,              # no gate in the core's input
            tped_conv_size=x_l + 2 * g_l, tped_dt_size=self.local_heads,
            split_hidden_states_B_C_fn=lambda xbc: torch.split(xbc, [x_l, g_l, g_l], dim=-1))

    def forward(self, core_op: Any, projected_states: torch.Tensor,
                layer_name: Any) -> torch.Tensor:
        """``in_proj``'s output [n, gate | x | B | C | dt] for this rank's n
        tokens -> the core's output [n, H/TP * head_dim] for them."""
        n = projected_states.shape[0]
        _, x, b, c, dt = projected_states.split(
            [self.x_width, self.x_width, self.bc_width, self.bc_width, self.dt_width], dim=-1)
        r = self.repeat
        # One buffer [SP*n, x | B | C | dt], as the exchange writes it: the view's
        # core reads it from offset 0.
        core_in = ulysses.heads_from_tokens_packed([x, b, c, dt], [1, r, r, 1], self.group)
        return self.core(core_op, [core_in], n, (self.local_heads * self.head_dim,),
                         projected_states, layer_name)
