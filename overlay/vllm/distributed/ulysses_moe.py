# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism under Ulysses SP: each GPU holds E/(DP*TP*SP) of a MoE
layer's experts, not E/(DP*TP).

Why: outside attention an SP rank holds its own 1/SP of the step's tokens,
exactly as a DP or PCP rank holds its own, so upstream's expert parallelism
for DP attention applies as it is: the MoE block splits its tokens over TP
(``sequence_parallel_chunk``, as with DP and TP), the experts' dispatch
gathers every rank's tokens over the EP group, each rank runs the routes to
its own experts, and the combine hands each rank its rows back.  What SP
changes is the group (``ulysses.expert_group_ranks``: DP x PCP x TP x SP, in
full-TP rank order) and which ranks hold which experts, here: a MoE layer of
the SP model takes EP rank dp*(PCP*TP*SP) + pcp*(TP*SP) + tp*SP + sp, the
rank Shift's full-TP model (plain TP=TP*SP with EP) gives the same GPU, so
the two models hold the same experts and Shift shares them
(``shift_weights``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from vllm.distributed import ulysses

if TYPE_CHECKING:
    from vllm.config import ParallelConfig
    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig

# The one all2all backend EP runs on under SP; the others are refused with
# -sp (ulysses_config), and the refusal carries correctness.  The EP group
# lists its members in full-TP order (TP=2, SP=2: [0, 2, 1, 3]): a member's
# position is its EP rank and decides the experts it holds, while torch and
# NCCL number the group's members by global rank.  This backend never
# addresses a rank by its EP rank: its dispatch all-gathers every rank's
# tokens to every rank and its combine reduce-scatters the rows back, both
# in the communicator's one order, over counts equal within a replica (and
# replicas are contiguous in both orders).  The others send a token to the
# rank that holds its expert, counted in their communicator's order: here,
# a GPU that holds other experts.
BACKEND = "allgather_reducescatter"


def sequence_parallel_moe(pc: ParallelConfig) -> bool:
    """Whether the SP model's MoE layers dispatch their tokens over the EP
    group (``ParallelConfig.use_sequence_parallel_moe``, which upstream
    turns on for EP with DP and TP)."""
    return (pc.sequence_parallel_size > 1 and pc.enable_expert_parallel
            and pc.all2all_backend == BACKEND)


def over_sp(cfg: FusedMoEParallelConfig, is_sequence_parallel: bool) -> FusedMoEParallelConfig:
    """A MoE layer's parallel config (upstream's ``make``, which knows DP, PCP
    and TP) with the SP ranks added to its experts' split: in the SP model
    with EP, the layer is sequence-parallel over TP*SP ranks and its EP rank
    is the full-TP order's.  Anything else (SP=1, the full-TP model, which is
    built with no SP, or MoE layers TP-sharded without EP) as it is.
    ``is_sequence_parallel``: whether the model's MoE block splits its tokens
    over ranks (it reads ``use_sequence_parallel_moe``); a block that does
    not (Mixtral's) would dispatch TP copies of its tokens: refused."""
    from vllm.config import get_current_vllm_config

    sp = ulysses.sp_size()
    vllm_config = get_current_vllm_config()
    if sp == 1 or not vllm_config.parallel_config.enable_expert_parallel:
        return cfg
    if not is_sequence_parallel:
        arch = ", ".join(vllm_config.model_config.architectures or ["this model"])
        raise ValueError(f"sequence_parallel_size > 1 with --enable-expert-parallel needs MoE "
                         f"layers that split their tokens over ranks (upstream's sequence-"
                         f"parallel MoE, as Qwen3-MoE, GPT-OSS, Llama 4, Qwen3-Next, GLM-4.5, "
                         f"DeepSeek-V2/V3 have); {arch}'s do not: drop --enable-expert-parallel "
                         f"(its MoE layers stay TP-sharded) or use -sp 1")
    from vllm.distributed.parallel_state import get_tp_group

    tp_group = get_tp_group()
    tp, tp_rank = tp_group.world_size, tp_group.rank_in_group
    replica = cfg.dp_rank * cfg.pcp_size + cfg.pcp_rank
    return dataclasses.replace(
        cfg, tp_size=1, tp_rank=0, use_ep=True, sp_size=tp * sp,
        ep_size=cfg.dp_size * cfg.pcp_size * tp * sp,
        ep_rank=replica * tp * sp + tp_rank * sp + ulysses.sp_rank())

