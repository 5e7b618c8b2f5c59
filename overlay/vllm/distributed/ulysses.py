# SPDX-License-Identifier: Apache-2.0
"""Ulysses sequence parallelism (SP) for inference.

Why: tensor parallelism (TP) splits every matmul and pays an all-reduce per
layer on *all* tokens; for long prompts the time to first token is then
bounded by communication.  Ulysses splits the *tokens* of a step across SP
ranks instead.  Everything outside attention (embeddings, QKV/O projections,
MLP, norms) runs on 1/SP of the tokens with the usual TP sharding of the
weights.  Attention needs every token, so around it one all-to-all turns
"my tokens, all my TP heads" into "all tokens, 1/SP of my TP heads", and a
second all-to-all turns the output back.  Each GPU then attends with
H/(TP*SP) query heads and keeps H_kv/(TP*SP) KV heads in its cache.

Rank layout (outermost to innermost): DP x PP x SP x TP.  The TP group of a
rank is contiguous, as upstream.  Worked example, TP=2, SP=2 (world 4)::

    rank:        0  1  2  3
    tp rank:     0  1  0  1        TP groups   [0, 1], [2, 3]
    sp rank:     0  0  1  1        SP groups   [0, 2], [1, 3]
    full-TP:     0  2  1  3        full-TP group [0, 2, 1, 3]

The full-TP group holds the TP*SP ranks of one replica, ordered so that its
member i = tp_rank*SP + sp_rank.  A plain TP=TP*SP model then puts on rank
i exactly the q and KV heads that Ulysses puts there (TP rank t owns heads
[t*H/TP, (t+1)*H/TP); its SP rank s takes chunk s of those), so the KV
cache is laid out identically in both modes.  Shift parallelism relies on
that to switch modes step by step over one shared cache.

When a TP rank has fewer KV heads than SP, its KV heads are replicated
before the exchange so that every SP rank receives the KV head its q heads
use -- again exactly what plain TP over TP*SP ranks would hold.

This name is unrelated to vLLM's compile pass ``pass_config.enable_sp``
(Megatron-style sequence parallelism inside TP) and to the MoE helpers
called ``sequence_parallel_*``; with Ulysses SP the compile pass is turned
off (see ``ulysses_config.verify_config``).

Every other module of the overlay's ``vllm.distributed`` is built on this
one: SP's layer families (``ulysses_gdn``, ``ulysses_mamba``, on what
their state-space mixers share, ``ulysses_state``; ``ulysses_mla``,
``ulysses_moe``, ``ulysses_multimodal``), the model wrapper
(``ulysses_model``), the config checks (``ulysses_config``, through the
family modules) and Shift (``shift``, ``shift_weights``).  This one imports
none of them, not even inside a function: what they need of each other goes
through the module above both (docs/design.md).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from vllm.logger import init_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.distributed.parallel_state import GroupCoordinator

logger = init_logger(__name__)

_SP: GroupCoordinator | None = None
_FULL_TP: GroupCoordinator | None = None
_UNSLICED_UP_TO = 0     # steps of at most this many tokens are not split over SP


# ---------------------------------------------------------------- groups

def get_sp_group() -> GroupCoordinator:
    assert _SP is not None, "sequence parallel (Ulysses) group is not initialized"
    return _SP


def get_full_tp_group() -> GroupCoordinator:
    """The TP*SP ranks of one model replica, in full-TP rank order."""
    assert _FULL_TP is not None, "full tensor parallel group is not initialized"
    return _FULL_TP


def sp_size() -> int:
    return 1 if _SP is None else _SP.world_size


def sp_rank() -> int:
    return 0 if _SP is None else _SP.rank_in_group


def sp_group_ranks(all_ranks: torch.Tensor) -> list[list[int]]:
    """``all_ranks`` is shaped (ExternalDP, DP, PP, PCP, SP, TP)."""
    return [g.tolist() for g in all_ranks.transpose(4, 5).reshape(-1, all_ranks.shape[4])]


def full_tp_group_ranks(all_ranks: torch.Tensor) -> list[list[int]]:
    """Ranks ordered (tp, sp): member tp_rank*SP + sp_rank."""
    sp, tp = all_ranks.shape[4], all_ranks.shape[5]
    return [g.tolist() for g in all_ranks.transpose(4, 5).reshape(-1, sp * tp)]


def expert_group_ranks(all_ranks: torch.Tensor) -> list[list[int]]:
    """The expert-parallel groups: every rank that holds different tokens of
    one model, DP x PCP x TP x SP (upstream's rule, DP x PCP x TP, with the
    SP ranks, whose tokens differ outside attention), ordered (dp, pcp, tp,
    sp) so that within a replica member tp_rank*SP + sp_rank is the full-TP
    rank: Shift's full-TP model, plain EP over the full-TP group, then holds
    on each GPU the experts the SP model holds there.  With SP=1, upstream's
    groups."""
    ext, dp, pp, pcp, sp, tp = all_ranks.shape
    return [g.tolist() for g in
            all_ranks.permute(0, 2, 1, 3, 5, 4).reshape(-1, dp * pcp * tp * sp)]


def init_groups(all_ranks: torch.Tensor, local_rank: int, backend: str) -> None:
    """Called by ``initialize_model_parallel`` on every rank (group creation
    is collective over the world)."""
    from vllm.distributed.parallel_state import init_model_parallel_group

    global _SP, _FULL_TP
    assert _SP is None and _FULL_TP is None, "Ulysses groups are already initialized"
    _SP = init_model_parallel_group(sp_group_ranks(all_ranks), local_rank, backend,
                                    group_name="sp")
    _FULL_TP = init_model_parallel_group(full_tp_group_ranks(all_ranks), local_rank,
                                         backend, group_name="full_tp")
    _gathers_in_member_order(_FULL_TP)
    if _SP.world_size > 1:
        logger.info_once("Ulysses SP: rank %d is SP rank %d of %d, full-TP rank %d of %d",
                         dist.get_rank(), _SP.rank_in_group, _SP.world_size,
                         _FULL_TP.rank_in_group, _FULL_TP.world_size)


def _gathers_in_member_order(group: GroupCoordinator) -> None:
    """torch.distributed and NCCL number a group's members by global rank,
    while ``rank_in_group`` is the position in the group's list.  The
    full-TP group's list is (tp, sp)-ordered, not sorted (TP=2, SP=2:
    [0, 2, 1, 3]), so its gathers would come back in global-rank order;
    reorder them to member order, which a TP model's gathers (vocab-parallel
    logits) expect.  All-reduces, the group's other collectives, do not
    depend on order; Ulysses' all-to-alls run on the SP groups, which are
    sorted."""
    torch_rank = [sorted(group.ranks).index(r) for r in group.ranks]   # of member i
    if torch_rank == list(range(len(torch_rank))):
        return

    def member_order(x: torch.Tensor, dim: int) -> torch.Tensor:
        chunks = x.chunk(len(torch_rank), dim=dim)
        return torch.cat([chunks[j] for j in torch_rank], dim=dim)

    all_gather, gather = group._all_gather_out_place, group.gather
    group._all_gather_out_place = lambda x, dim: member_order(all_gather(x, dim), dim)

    def gather_in_member_order(x: torch.Tensor, dst: int = 0, dim: int = -1) -> torch.Tensor | None:
        out = gather(x, torch_rank[dst], dim)
        return None if out is None else member_order(out, dim)

    group.gather = gather_in_member_order


def destroy_groups() -> None:
    global _SP, _FULL_TP, _UNSLICED_UP_TO
    for group in (_SP, _FULL_TP):
        if group is not None:
            group.destroy()
    _SP = _FULL_TP = None
    _UNSLICED_UP_TO = 0


@contextmanager
def as_full_tp() -> Iterator[None]:
    """Inside, the process groups look like plain TP over the full-TP group:
    ``get_tp_group()`` is the full-TP group and there is no SP.  A model
    built and run inside is a TP=TP*SP model whose rank i holds the heads
    Ulysses gives rank i (Shift parallelism, ``shift.py``)."""
    from vllm.distributed import parallel_state

    global _SP
    saved = parallel_state._TP, _SP
    parallel_state._TP, _SP = get_full_tp_group(), None
    try:
        yield
    finally:
        parallel_state._TP, _SP = saved


def full_tp_config(vllm_config: VllmConfig) -> VllmConfig:
    """``vllm_config`` as plain TP over the full-TP group (TP=TP*SP, no SP):
    the layout whose heads, and so KV-cache and recurrent-state shapes, are
    the ones Ulysses puts on each GPU.  Shift builds its full-TP model with
    it; the hybrid KV cache's page size counts one GPU's Gated-DeltaNet
    state by it.  With SP=1, ``vllm_config`` itself.

    A copy with its own, empty table of layers by name, so that a model
    built with it does not clash with the SP model's names.  It keeps
    FlashInfer's fused all-reduce + RMSNorm (on by default at TP > 1 on
    Hopper): built and run inside ``as_full_tp``, its pass and its run-time
    op ask for the full-TP group's workspace, a workspace of its own
    (patch ``flashinfer-allreduce-workspace-per-group``), and its compile
    ranges split where the fusion stops, as plain TP=TP*SP's do
    (``add_fused_allreduce_range``).  ``shift_parallel``
    stays as it is: the compile caches key on the config's hash, and the
    full-TP model's graphs name the full-TP group, so they must never be
    mistaken for a genuine TP=TP*SP run's (which name ``tp``)."""
    pc = vllm_config.parallel_config
    if pc.sequence_parallel_size == 1:
        return vllm_config
    full = copy.copy(pc)
    full.tensor_parallel_size = pc.tp_sp_size
    full.sequence_parallel_size = 1
    cc = copy.copy(vllm_config.compilation_config)
    cc.static_forward_context = {}
    cc.static_all_moe_layers = []
    cfg = copy.copy(vllm_config)
    cfg.parallel_config = full
    cfg.compilation_config = cc
    add_fused_allreduce_range(cfg)
    return cfg


def add_fused_allreduce_range(cfg: VllmConfig) -> None:
    """Add to ``cfg``'s compile ranges the endpoint plain TP over all TP*SP
    ranks gets, in place: ``cfg`` must own its compilation config (a copy).

    Upstream compiles a model once per range of token counts and splits the
    ranges where FlashInfer's fused all-reduce + RMSNorm stops applying, a
    size that shrinks with the group (Hopper: 64 MiB of activations at 2
    GPUs, 2 MiB at 4, i.e. 4096 and 128 tokens of a 70B).  The engine's
    config set its ranges for the SP model's TP; with those alone the
    full-TP model's pass (or a drafter's under Shift) finds no range small
    enough to apply to and compiles unfused (70B FP8 on 4xH100, 2026-11-28:
    no fused op in the full-TP model's graphs, though its workspace was
    built)."""
    cc, mc = cfg.compilation_config, cfg.model_config
    pc = cfg.parallel_config
    top = cfg.scheduler_config.max_num_batched_tokens
    if (not cc.pass_config.fuse_allreduce_rms or mc is None or top is None
            or not cc.compile_ranges_endpoints):
        return
    size = cc.pass_config.flashinfer_max_size(pc.tensor_parallel_size * pc.sequence_parallel_size)
    if size is None:
        return
    end = size // (mc.get_hidden_size() * mc.dtype.itemsize)
    if 1 < end < top:
        cc.compile_ranges_endpoints = sorted({*cc.compile_ranges_endpoints, end})


def graph_capture_groups() -> list[GroupCoordinator]:
    """Groups whose collectives run inside captured CUDA graphs, besides
    the ones ``parallel_state.graph_capture`` enters itself.  Never the TP
    group: inside ``as_full_tp`` (a Shift drafter's graphs, vLLM >= 0.34)
    ``get_tp_group()`` is the full-TP group, and entering it twice would nest
    its custom all-reduce's capture."""
    from vllm.distributed import parallel_state

    return [g for g in (_SP, _FULL_TP)
            if g is not None and g.world_size > 1 and g is not parallel_state._TP]


# ---------------------------------------------------------------- all-to-all

def _all_to_all(x: torch.Tensor, group_name: str) -> torch.Tensor:
    """x: [SP, ...]; block j goes to SP rank j; block j of the result came
    from SP rank j."""
    from vllm.distributed.parallel_state import _groups

    group = _groups[group_name]()
    if group is None:
        raise ValueError(f"group {group_name} is destroyed")
    # NCCL and gloo need dense buffers; compiled callers already pass one
    # (the op's tag), so this copies only for an eager caller's view.
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    comm = getattr(group.device_communicator, "pynccl_comm", None)
    if comm is not None and not comm.disabled and x.is_cuda:
        # Grouped send/recv through vLLM's own NCCL communicator: safe under
        # CUDA-graph capture, like the TP collectives.
        me = group.rank_in_group
        comm.group_start()
        for peer in range(group.world_size):
            if peer == me:
                out[peer].copy_(x[peer])
            else:
                comm.send(x[peer], peer)
                comm.recv(out[peer], peer)
        comm.group_end()
    else:
        # gloo (CPU) implements all_to_all_single, not the list form.
        dist.all_to_all_single(out, x, group=group.device_group)
    return out


def _all_to_all_fake(x: torch.Tensor, group_name: str) -> torch.Tensor:
    # Must promise exactly the real layout (dense, row-major): the compiled
    # code reads the result with the strides given here.
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def register_ops() -> None:
    """Register ``torch.ops.vllm.ulysses_all_to_all`` (once per process).
    Called by each plan as it is created, so a run with SP=1 registers
    nothing."""
    from vllm.utils.torch_utils import direct_register_custom_op

    if not hasattr(torch.ops.vllm, "ulysses_all_to_all"):
        # needs_contiguous_strides: Inductor writes the packed q/k/v straight
        # in [SP, n, width] order inside its pack kernel.  Without it Inductor
        # passed a transposed view of its [n, SP, width] buffer and the op's
        # .contiguous() copied all of it again, eager, every layer (2.3 ms of
        # an 8k prefill on 2xH200, benchmarks/results/2026-11-24-2gpu-sp-step-profile/).
        direct_register_custom_op("ulysses_all_to_all", _all_to_all,
                                  fake_impl=_all_to_all_fake,
                                  tags=(torch.Tag.needs_contiguous_strides,))


def all_to_all(x: torch.Tensor, group: GroupCoordinator) -> torch.Tensor:
    """A registered op, so Dynamo keeps it as one opaque node and CUDA graph
    capture records the NCCL calls in place."""
    return torch.ops.vllm.ulysses_all_to_all(x, group.unique_name)


# ---------------------------------------------------------------- head math

def local_head_counts(num_heads: int, num_kv_heads: int, sp: int) -> tuple[int, int, int]:
    """(q heads, KV heads, KV replication) per SP rank, from one TP rank's
    counts.  Replication r > 1 when the TP rank has fewer KV heads than SP:
    each KV head is repeated r times so every SP rank gets the one its q
    heads attend with."""
    if num_heads % sp:
        raise ValueError(f"{num_heads} attention heads per TP rank are not divisible by "
                         f"sequence_parallel_size={sp}")
    if num_kv_heads >= sp:
        if num_kv_heads % sp:
            raise ValueError(f"{num_kv_heads} KV heads per TP rank are not divisible by "
                             f"sequence_parallel_size={sp}")
        return num_heads // sp, num_kv_heads // sp, 1
    if sp % num_kv_heads:
        raise ValueError(f"sequence_parallel_size={sp} is not a multiple of the "
                         f"{num_kv_heads} KV heads per TP rank")
    return num_heads // sp, 1, sp // num_kv_heads


def attention_head_shard() -> tuple[int, int]:
    """(rank, size) of the plain TP whose head split this GPU attends with:
    full-TP rank tp_rank*SP + sp_rank of TP*SP (see the module docstring).
    Per-head parameters that upstream slices by TP rank and size at load
    time (compressed-tensors' per-head KV-cache scales) slice by this; with
    SP=1, and inside ``as_full_tp``, it is upstream's TP rank and size."""
    from vllm.distributed.parallel_state import get_tp_group

    tp = get_tp_group()
    return tp.rank_in_group * sp_size() + sp_rank(), tp.world_size * sp_size()


def split_for_ranks(x: torch.Tensor, sp: int, repeat: int = 1) -> torch.Tensor:
    """[n, heads*D] -> [n, SP, heads*D/SP] (after repeating each head
    ``repeat`` times): chunk j holds the heads SP rank j attends with."""
    n = x.shape[0]
    if repeat > 1:
        heads = sp // repeat
        x = x.reshape(n, heads, 1, -1).expand(n, heads, repeat, x.shape[-1] // heads)
    return x.reshape(n, sp, -1)


def heads_from_tokens(tensors: list[torch.Tensor], repeats: list[int],
                      group: GroupCoordinator) -> list[torch.Tensor]:
    """Token-sharded [n, h_i*D] tensors -> head-sharded [SP*n, h_i*D/SP]
    over all tokens of the step, in one collective: column views of one
    buffer (``heads_from_tokens_packed``).  A tensor of another dtype than
    the last (an FP8 query beside bfloat16 keys and values) rides as its
    bytes in the last one's dtype and comes back in its own."""
    carrier = tensors[-1].dtype
    flat, widths = _exchange_heads(
        [t if t.dtype == carrier else t.view(carrier) for t in tensors], repeats, group)
    return [p if t.dtype == carrier else p.view(t.dtype)
            for p, t in zip(torch.split(flat, widths, dim=-1), tensors)]


def heads_from_tokens_packed(tensors: list[torch.Tensor], repeats: list[int],
                             group: GroupCoordinator) -> torch.Tensor:
    """``heads_from_tokens`` as the contiguous buffer [SP*n, sum of h_i*D/SP] the
    collective writes, the tensors' columns side by side in their order: for a
    core that reads them packed, with no copy to put them back together."""
    return _exchange_heads(tensors, repeats, group)[0]


def _exchange_heads(tensors: list[torch.Tensor], repeats: list[int],
                    group: GroupCoordinator) -> tuple[torch.Tensor, list[int]]:
    sp = group.world_size
    parts = [split_for_ranks(t, sp, r) for t, r in zip(tensors, repeats)]
    widths = [p.shape[-1] for p in parts]
    packed = torch.cat(parts, dim=-1).transpose(0, 1).contiguous()  # [SP, n, sum]
    received = all_to_all(packed, group)                              # [SP, n, sum]
    return received.reshape(-1, received.shape[-1]), widths          # [SP*n, sum]


def tokens_from_heads(x: torch.Tensor, group: GroupCoordinator) -> torch.Tensor:
    """[SP*n, c] (my heads, all tokens) -> [n, SP*c] (my tokens, all heads)."""
    sp = group.world_size
    received = all_to_all(x.reshape(sp, -1, x.shape[-1]), group)   # block j: heads of rank j
    return received.transpose(0, 1).reshape(received.shape[1], -1)


# ---------------------------------------------------------------- attention

@dataclass
class AttentionPlan:
    """Per attention layer: the head counts this rank attends with, and the
    two exchanges around the attention op."""

    num_heads: int          # q heads per TP rank (what the model computed)
    num_kv_heads: int       # KV heads per TP rank
    local_heads: int        # q heads this GPU attends with
    local_kv_heads: int     # KV heads this GPU caches
    kv_repeat: int
    group: Any
    rank: int               # this GPU's SP rank

    @classmethod
    def maybe_create(cls, num_heads: int, num_kv_heads: int,
                     attn_type: Any) -> AttentionPlan | None:
        if sp_size() == 1:
            return None
        from vllm.v1.attention.backend import AttentionType

        if attn_type != AttentionType.DECODER:
            raise ValueError(f"sequence parallelism supports decoder self-attention only, "
                             f"not {attn_type}")
        register_ops()
        heads, kv_heads, repeat = local_head_counts(num_heads, num_kv_heads, sp_size())
        return cls(num_heads, num_kv_heads, heads, kv_heads, repeat, get_sp_group(), sp_rank())

    def my_q_heads(self, per_head: Any) -> Any:
        """This GPU's entries of a per-q-head parameter (attention sinks,
        ALiBi slopes) that the model sized for its TP rank's heads.  The
        backend attends with ``local_heads`` of them, chunk ``rank`` in
        the exchange's order -- the heads plain TP over TP*SP puts here,
        so each head keeps its own value.  A tensor comes back as a view:
        weights loaded into it later land in it."""
        if per_head is None:
            return None
        if len(per_head) != self.num_heads:
            raise ValueError(f"a per-head attention parameter has {len(per_head)} entries for "
                             f"{self.num_heads} heads per TP rank; sequence parallelism "
                             f"cannot split it")
        start = self.rank * self.local_heads
        if isinstance(per_head, torch.Tensor):
            return per_head.narrow(0, start, self.local_heads)
        return per_head[start:start + self.local_heads]

    def forward(self, attend: Callable, query: torch.Tensor, key: torch.Tensor | None,
                value: torch.Tensor | None, output_shape: torch.Size | None,
                output_dtype: torch.dtype | None) -> torch.Tensor:
        n = query.shape[0]
        tensors, repeats = [query.reshape(n, -1)], [1]
        if key is not None:
            tensors += [key.reshape(n, -1), value.reshape(n, -1)]
            repeats += [self.kv_repeat, self.kv_repeat]
        exchanged = heads_from_tokens(tensors, repeats, self.group)
        q, k, v = (exchanged + [None, None])[:3]
        out = attend(q, k, v, None, output_dtype)           # [SP*n, local heads * Dv]
        out = tokens_from_heads(out, self.group)            # [n, TP-rank heads * Dv]
        return out if output_shape is None else out.view(output_shape)


# ---------------------------------------------------------------- tokens

def set_unsliced_steps(tokens: int) -> None:
    """Steps of at most ``tokens`` tokens run whole on every rank, not split
    over SP (Shift runs them in full TP): ``pad_tokens`` leaves them as they
    are, so a one-request decode step is one token, as under plain TP, not
    SP of them."""
    global _UNSLICED_UP_TO
    _UNSLICED_UP_TO = tokens


def pad_tokens(num_tokens: int) -> int:
    """A step's token count, padded so that every SP rank gets as many (a
    step that is not split over SP, ``set_unsliced_steps``, needs none)."""
    if num_tokens <= _UNSLICED_UP_TO:
        return num_tokens
    sp = sp_size()
    return -(-num_tokens // sp) * sp


def keep_unpadded(descs: list[Any]) -> list[Any]:
    """The CUDA-graph descriptors (anything with ``num_tokens``) whose size
    ``pad_tokens`` leaves as it is.  A step that takes a graph is not padded
    again (vLLM >= 0.34's ``dispatch_cg_and_sync_dp``), so a graph of 3
    tokens at SP=2 would hand the SP-wrapped model an odd step; without it
    such a step is padded to 4 and takes the next graph up, or runs eagerly.
    One rule for the target's and every speculator's graph manager (a
    drafter's decode sizes, 1..k requests, and k+2-token prefill shapes are
    upstream's own, not the engine's filtered sizes).  Reads the live view
    of the groups: inside ``as_full_tp`` (a Shift drafter) nothing is
    dropped, nor at or below Shift's threshold."""
    return [d for d in descs if pad_tokens(d.num_tokens) == d.num_tokens]


def shard_tokens(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    n = x.shape[dim] // sp_size()
    return x.narrow(dim, sp_rank() * n, n)


def gather_tokens(x: torch.Tensor) -> torch.Tensor:
    return get_sp_group().all_gather(x, dim=0)


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows ``rows`` (indices into the whole step, the same on every SP
    rank) of the step whose slice this SP rank holds in ``x``: [k, ...] on
    every SP rank.  Each rank offers, for every row, its own copy where it
    holds that row (a stand-in elsewhere); one all-gather of those k rows
    per rank, and each row is taken from the rank that holds it.  Exact (no
    arithmetic), and k rows cross the links instead of the whole step: a
    prefill step samples one row per request."""
    sp, n, k = sp_size(), x.shape[0], rows.shape[0]
    offered = x.index_select(0, (rows - sp_rank() * n).clamp(0, n - 1))
    offers = get_sp_group().all_gather(offered, dim=0).view(sp, k, *x.shape[1:])
    holder = torch.div(rows, n, rounding_mode="floor")
    return offers[holder, torch.arange(k, device=x.device)]
