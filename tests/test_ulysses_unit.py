"""Ulysses building blocks without an engine: the rank layout that
vLLM's own ``initialize_model_parallel`` builds, the all-to-all exchange
under gloo against a single-process reference, and config validation."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from harness.gloo import run_ranks
from harness.repo import VERSION

# ------------------------------------------------------------------ layout

def build_groups(monkeypatch, dp: int, pp: int, sp: int, tp: int) -> dict[str, list[list[int]]]:
    """Run the patched initialize_model_parallel with process-group creation
    replaced by a recorder, for a world of dp*pp*sp*tp ranks."""
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses

    world = dp * pp * sp * tp
    recorded: dict[str, list[list[int]]] = {}

    def fake_group(group_ranks, local_rank, backend, use_message_queue_broadcaster=False,
                   group_name=None, **_):
        recorded[group_name] = [list(g) for g in group_ranks]
        mine = next(g for g in group_ranks if 0 in g)
        return SimpleNamespace(ranks=mine, rank_in_group=mine.index(0), world_size=len(mine),
                               destroy=lambda: None, unique_name=f"{group_name}:0",
                               _all_gather_out_place=None, gather=None)

    config = SimpleNamespace(
        parallel_config=SimpleNamespace(data_parallel_size=dp, enable_elastic_ep=False,
                                        sequence_parallel_size=sp, enable_eplb=False,
                                        use_all2all=False),
        model_config=None, engram_config=None)     # (read from vLLM 0.33 on)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a: world)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a: 0)
    monkeypatch.setattr(ps, "get_world_group", lambda: SimpleNamespace(local_rank=0))
    monkeypatch.setattr(ps, "init_model_parallel_group", fake_group)
    monkeypatch.setattr("vllm.config.get_current_vllm_config", lambda: config)
    # (0.33 adds the Engram groups _ETP and _ENGRAM_DP)
    for name in ("_TP", "_DCP", "_PCP", "_PP", "_DP", "_EP", "_EPLB", "_ETP", "_ENGRAM_DP"):
        if hasattr(ps, name):
            monkeypatch.setattr(ps, name, None)
    monkeypatch.setattr(ulysses, "_SP", None)
    monkeypatch.setattr(ulysses, "_FULL_TP", None)
    ps.initialize_model_parallel(tp, pp, backend="gloo")
    return recorded


def coords(rank: int, dp: int, pp: int, sp: int, tp: int) -> tuple[int, int, int, int]:
    """The documented layout: DP x PP x SP x TP, TP fastest."""
    return (rank // (pp * sp * tp), rank // (sp * tp) % pp, rank // tp % sp, rank % tp)


LAYOUTS = [(1, 1, 2, 1), (1, 1, 2, 2), (1, 1, 4, 2), (1, 1, 2, 4), (1, 2, 2, 2), (2, 1, 2, 2),
           (2, 2, 2, 1), (1, 1, 8, 1), (2, 2, 2, 2), (1, 1, 1, 4), (1, 2, 1, 2)]


@pytest.mark.parametrize("dp,pp,sp,tp", LAYOUTS)
def test_rank_layout(monkeypatch, dp, pp, sp, tp):
    groups = build_groups(monkeypatch, dp, pp, sp, tp)
    world = dp * pp * sp * tp
    c = {r: coords(r, dp, pp, sp, tp) for r in range(world)}
    for name, size, same in [("tp", tp, (0, 1, 2)), ("sp", sp, (0, 1, 3)), ("pp", pp, (0, 2, 3)),
                             ("dp", dp, (1, 2, 3)), ("full_tp", sp * tp, (0, 1))]:
        gs = groups[name]
        assert sorted(itertools.chain(*gs)) == list(range(world)), \
            f"{name} must partition the world"
        assert all(len(g) == size for g in gs), name
        for g in gs:  # members differ only along their own axis
            assert len({tuple(c[r][i] for i in same) for r in g}) == 1, (name, g)
    # TP groups are contiguous, as upstream; SP=1 leaves every group as upstream.
    assert all(g == list(range(g[0], g[0] + tp)) for g in groups["tp"])
    # Full-TP member i is (tp_rank, sp_rank) with i = tp_rank*SP + sp_rank, so a
    # plain TP*SP model puts on each GPU the heads Ulysses puts there.
    for g in groups["full_tp"]:
        for i, r in enumerate(g):
            assert i == c[r][3] * sp + c[r][2], (g, r)
    # Expert parallelism: every rank of one pipeline stage that holds different
    # tokens, DP x TP x SP (upstream's DP x TP with the SP ranks), member
    # dp*TP*SP + tp*SP + sp: within a replica the full-TP order, so Shift's
    # full-TP model (plain EP over the full-TP group) holds each GPU's experts.
    gs = groups["ep"]
    assert sorted(itertools.chain(*gs)) == list(range(world)) and len(gs) == pp, gs
    for g in gs:
        assert len({c[r][1] for r in g}) == 1, g
        for i, r in enumerate(g):
            assert i == c[r][0] * tp * sp + c[r][3] * sp + c[r][2], (g, r)


def test_worked_example_tp2_sp2(monkeypatch):
    groups = build_groups(monkeypatch, 1, 1, 2, 2)
    assert groups["tp"] == [[0, 1], [2, 3]]
    assert groups["sp"] == [[0, 2], [1, 3]]
    assert groups["full_tp"] == [[0, 2, 1, 3]]
    assert groups["ep"] == [[0, 2, 1, 3]]


# ------------------------------------------------------------------ head math

@pytest.mark.parametrize("heads,kv,sp,want", [
    (8, 2, 2, (4, 1, 1)), (8, 1, 2, (4, 1, 2)), (8, 4, 2, (4, 2, 1)), (16, 2, 8, (2, 1, 4)),
    (4, 4, 4, (1, 1, 1))])
def test_local_head_counts(heads, kv, sp, want):
    from vllm.distributed.ulysses import local_head_counts

    assert local_head_counts(heads, kv, sp) == want


@pytest.mark.parametrize("heads,kv,sp,msg", [
    (6, 2, 4, "attention heads per TP rank are not divisible"),
    (8, 6, 4, "KV heads per TP rank are not divisible"),
    (12, 3, 4, "not a multiple of the 3 KV heads")])
def test_local_head_counts_rejects(heads, kv, sp, msg):
    from vllm.distributed.ulysses import local_head_counts

    with pytest.raises(ValueError, match=msg):
        local_head_counts(heads, kv, sp)


# ------------------------------------------------------------------ exchange

def exchange_on_each_rank(rank, world, tp, sp, cfg):
    """Each rank's checks of the exchange (harness.gloo built its groups)."""
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses

    group = ulysses.get_sp_group()
    s, t = ulysses.sp_rank(), ps.get_tensor_model_parallel_rank()
    assert group.world_size == sp and ulysses.get_full_tp_group().rank_in_group == t * sp + s
    ulysses.register_ops()
    D = 4
    for H, KV, T in [(8, 4, 12), (8, 2, 8), (8, 1, 16), (4, 4, 4)]:
        hq, hkv = H // tp, max(1, KV // tp)          # heads of this TP rank
        n = T // sp
        # same on the SP ranks of a TP rank
        g = torch.Generator().manual_seed(1000 * H + 10 * KV + t)
        q_all, k_all, v_all = (torch.randn(T, h * D, generator=g) for h in (hq, hkv, hkv))
        rows = slice(s * n, (s + 1) * n)
        lh, lkv, rep = ulysses.local_head_counts(hq, hkv, sp)
        q, k, v = ulysses.heads_from_tokens([q_all[rows], k_all[rows], v_all[rows]],
                                            [1, rep, rep], group)
        # reference: all tokens, this SP rank's q heads and the KV heads they use
        assert torch.equal(q, q_all[:, s * lh * D:(s + 1) * lh * D]), (H, KV, "q")
        kv_heads = [(s * lh + i) // (hq // hkv) for i in range(lh)]   # GQA: kv of each q head
        kv_heads = sorted(set(kv_heads))
        assert len(kv_heads) == lkv, (kv_heads, lkv)
        cols = torch.cat([torch.arange(h * D, (h + 1) * D) for h in kv_heads])
        assert torch.equal(k, k_all[:, cols]) and torch.equal(v, v_all[:, cols]), (H, KV, "kv")
        # an FP8 query (quantized before the exchange) rides as its bytes beside k and v
        q8 = q_all.to(torch.float8_e4m3fn)
        got8, k8, v8 = ulysses.heads_from_tokens([q8[rows], k_all[rows], v_all[rows]],
                                                 [1, rep, rep], group)
        want8 = q8[:, s * lh * D:(s + 1) * lh * D]
        assert got8.dtype == q8.dtype and torch.equal(got8.view(torch.uint8),
                                                      want8.view(torch.uint8)), (H, KV, "fp8 q")
        assert torch.equal(k8, k) and torch.equal(v8, v), (H, KV, "kv beside fp8 q")
        # the same exchange as one buffer (a core reading q | k | v packed): those
        # columns side by side, written by the collective, not copied after it
        packed = ulysses.heads_from_tokens_packed(
            [q_all[rows], k_all[rows], v_all[rows]], [1, rep, rep], group)
        assert packed.is_contiguous() and torch.equal(packed, torch.cat([q, k, v], dim=-1))
        # and back: heads -> tokens is the inverse on any function of the heads
        back = ulysses.tokens_from_heads(q * 3 + 1, group)
        assert torch.equal(back, q_all[rows] * 3 + 1), (H, KV, "back")
    # a step of 7 tokens: padded to a multiple of SP, sliced, gathered back
    T = 7
    padded = ulysses.pad_tokens(T)
    assert padded % sp == 0 and padded - T < sp
    # Shift: a step up to its threshold runs whole in full TP, not padded
    ulysses.set_unsliced_steps(8)
    try:
        assert [ulysses.pad_tokens(n) for n in (1, 7, 8, 9)] == [1, 7, 8, -(-9 // sp) * sp]
    finally:
        ulysses.set_unsliced_steps(0)
    assert ulysses.pad_tokens(1) == sp
    x = torch.arange(padded * 3, dtype=torch.float32).reshape(padded, 3)
    assert torch.equal(ulysses.gather_tokens(ulysses.shard_tokens(x)), x)
    # only some rows of the step, each from the rank that holds it: one
    # row, both ends of every slice, out of order
    n = padded // sp
    for rows in ([padded - 1], [r for s_ in range(sp) for r in (s_ * n, s_ * n + n - 1)],
                 [5, 0, 3]):
        got = ulysses.gather_rows(ulysses.shard_tokens(x), torch.tensor(rows))
        assert torch.equal(got, x[rows]), rows


def test_fp8_query_quantized_before_the_exchange():
    """From 0.33.0 a query the backend takes in FP8 with one scale is
    quantized before the exchange, where TP's compiled graph quantizes it
    (beside the rotary embedding, straight from float32); no query quantizer,
    a backend that takes no FP8 query, per-head scales (this GPU holds only
    its heads') and a query already in FP8 leave it as it is.  The older
    series quantize after the exchange (and SP refuses their FP8 caches)."""
    from vllm.model_executor.layers.attention.attention import Attention

    if VERSION in ("0.26.0", "0.32.0"):
        assert not hasattr(Attention, "_query_before_exchange")
        return
    fp8 = torch.float8_e4m3fn

    def layer(quant=True, takes_fp8=True, scales=1):
        return SimpleNamespace(
            query_quant=(lambda q, s: ((q.float() / s).to(fp8), s)) if quant else None,
            impl=SimpleNamespace(supports_quant_query_input=takes_fp8),
            _q_scale=torch.full((scales,), 2.0) if scales > 1 else torch.tensor(2.0))

    before = Attention._query_before_exchange
    q = torch.randn(6, 16, dtype=torch.bfloat16)
    got = before(layer(), q)
    assert got.dtype == fp8 and torch.equal(got.view(torch.uint8),
                                            (q.float() / 2).to(fp8).view(torch.uint8))
    for other in (layer(quant=False), layer(takes_fp8=False), layer(scales=4)):
        assert before(other, q) is q
    assert before(layer(), got) is got


def test_exchange_op_takes_contiguous_input_from_inductor():
    """Compiled, the packed q/k/v must reach the op dense and in [SP, n, w]
    order: else Inductor hands it a transposed view and the op copies the
    whole tensor again each layer (seen in the 2xH200 profile)."""
    import torch
    from vllm.distributed import ulysses

    ulysses.register_ops()
    assert torch.Tag.needs_contiguous_strides in torch.ops.vllm.ulysses_all_to_all.default.tags


@pytest.mark.parametrize("tp,sp", [(1, 2), (2, 2), (1, 4)])
def test_all_to_all_matches_reference(tmp_path, tp, sp):
    run_ranks(exchange_on_each_rank, tmp_path, tp, sp)


def kv_scales_on_each_rank(rank, world, tp, sp, cfg):
    """Each rank loads the per-head scales of the KV heads it attends with."""
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsKVCacheMethod,
    )

    t, s = ps.get_tp_group().rank_in_group, ulysses.sp_rank()
    heads = 8
    for kv in (1, 2, 4, 8):
        # The KV heads this GPU attends with under Ulysses: its TP rank's (as
        # upstream TP holds them), then chunk s of those, or head s // r of them
        # when they are fewer than SP and repeated r times.
        tp_kv = list(range(t * kv // tp, (t + 1) * kv // tp)) if kv >= tp else [t // (tp // kv)]
        q, local_kv, r = ulysses.local_head_counts(heads // tp, len(tp_kv), sp)
        want = tp_kv[s * local_kv:(s + 1) * local_kv] if r == 1 else [tp_kv[s // r]]
        scheme = dict(type="float", num_bits=8, strategy="attn_head", symmetric=True)
        method = CompressedTensorsKVCacheMethod(SimpleNamespace(
            kv_cache_scheme=scheme, total_num_heads=heads, total_num_kv_heads=kv))
        layer = torch.nn.Module()
        layer.num_kv_heads = local_kv
        method.create_weights(layer)
        # One scale per head, its head's number; q scales reduce to their KV head's.
        layer.k_scale.weight_loader(layer.k_scale, torch.arange(kv, dtype=torch.float32)[:, None])
        q_scales = torch.arange(kv, dtype=torch.float32).repeat_interleave(heads // kv)
        layer.q_scale.weight_loader(layer.q_scale, q_scales)
        for name in ("k_scale", "q_scale"):
            got = getattr(layer, name).tolist()
            assert got == want, (name, kv, rank, got, want)


def test_per_head_kv_scales_follow_the_heads(tmp_path):
    """compressed-tensors' per-head KV-cache scales (strategy attn_head):
    each GPU loads the scales of the KV heads it attends with, for KV heads
    fewer than, equal to and more than TP*SP (kv-scales-per-head-follow-sp;
    sliced by TP rank alone, loading fails: 4 KV heads at TP=2 x SP=2 divide
    by zero)."""
    run_ranks(kv_scales_on_each_rank, tmp_path, 2, 2)


def capture_groups_on_each_rank(rank, world, tp, sp, cfg):
    """graph_capture_groups: the SP and full-TP groups besides the ones
    graph_capture enters itself, never the group get_tp_group() is."""
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses

    outside = ulysses.graph_capture_groups()
    assert outside == [ulysses.get_sp_group(), ulysses.get_full_tp_group()], outside
    assert ps.get_tp_group() not in outside
    with ulysses.as_full_tp():      # a Shift drafter's capture (vLLM >= 0.34)
        inside = ulysses.graph_capture_groups()
        assert ps.get_tp_group() is ulysses.get_full_tp_group()
        assert ps.get_tp_group() not in inside and inside == [], inside


@pytest.mark.parametrize("tp,sp", [(1, 2), (2, 2)])
def test_graph_capture_never_enters_the_tp_group_twice(tmp_path, tp, sp):
    """H6: inside as_full_tp() the TP group is the full-TP group, which
    graph_capture enters as the TP group; graph_capture_groups must not
    return it again (nested custom all-reduce capture)."""
    run_ranks(capture_groups_on_each_rank, tmp_path, tp, sp)


def mla_on_each_rank(rank, world, tp, sp, cfg):
    """Each rank's MLA ``kv_b_proj``, resharded for the heads it attends
    with, and the q and latent its layer hands the backend."""
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses, ulysses_mla
    from vllm.model_executor.layers.linear import ColumnParallelLinear
    from vllm.platforms import current_platform

    t, s = ps.get_tp_group().rank_in_group, ulysses.sp_rank()
    H, L, P, V, R = 8, 16, 4, 3, 2          # heads, latent, nope, v, rope
    full = torch.randn(H * (P + V), L, generator=torch.Generator().manual_seed(0))
    full_bias = torch.arange(H * (P + V), dtype=torch.float32)
    k = ColumnParallelLinear(L, H * (P + V), bias=True, params_dtype=torch.float32)
    k._cpu_skip_gemm_dispatch = True        # as MLAAttention sets it, after construction
    hooked = []
    k.register_forward_hook(lambda *_: hooked.append(1))
    plan = ulysses_mla.maybe_plan(H // tp, k)
    # plain TP over TP*SP's shard for this GPU: full-TP rank t*SP + s
    g, rows = t * sp + s, H // (tp * sp) * (P + V)
    assert plan.local_heads == H // (tp * sp) and (k.tp_rank, k.tp_size) == (g, tp * sp)
    assert k.weight.shape == (rows, L) and k.bias.shape == (rows,), (k.weight.shape, rows)
    assert all(p.tp_rank == g for p in k.parameters() if hasattr(p, "tp_rank"))
    k.weight.weight_loader(k.weight, full)
    k.bias.weight_loader(k.bias, full_bias)
    assert torch.equal(k.weight, full[g * rows:(g + 1) * rows])
    assert torch.equal(k.bias, full_bias[g * rows:(g + 1) * rows])
    # the module is the model's, not built again: what was set on it stays
    # (without the flag the CPU path would pack the weight for its GEMM)
    k.quant_method.process_weights_after_loading(k)
    x = torch.randn(2, L, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(k(x)[0], x @ full[g * rows:(g + 1) * rows].T + k.bias)
    assert hooked

    # the hand-off: column views of the exchange's buffer, copied only where
    # a consumer needs them packed (ulysses_mla.packed_inputs)
    seen = {}

    def attend(q, kv_c, pe, output_shape):
        seen.update(q=q, kv_c=kv_c)
        return torch.zeros(output_shape)

    layer = SimpleNamespace(num_heads=plan.local_heads, v_head_dim=V, kv_b_proj=k,
                            ulysses=plan, _attend=attend)
    n = 3
    gen = torch.Generator().manual_seed(10 * t + s)
    q, kv_c, pe = (torch.randn(*shape, generator=gen) for shape in
                   [(n, H // tp, P + R), (n, L), (n, 1, R)])
    want_q, want_kv = ulysses.heads_from_tokens([q.reshape(n, -1), kv_c], [1, sp],
                                                plan.group)[:2]

    def handed(**flags):
        ulysses_mla.forward(layer, q, kv_c, pe, None)
        assert torch.equal(seen["q"].reshape(want_q.shape), want_q)
        assert torch.equal(seen["kv_c"], want_kv)
        assert {name: seen[name].is_contiguous() for name in flags} == flags, flags

    handed(q=False, kv_c=False)                      # CPU, unquantized: no copies
    layer.kv_b_proj = SimpleNamespace(quant_method=object())
    handed(q=False, kv_c=True)                       # a quantized kv_b_proj's own GEMM
    is_cpu = current_platform.is_cpu
    current_platform.is_cpu = lambda: False
    try:
        handed(q=True, kv_c=True)                    # a GPU's prefill kernel
    finally:
        current_platform.is_cpu = is_cpu


def test_mla_kv_b_proj_resharded_and_inputs_packed_where_needed(tmp_path):
    """MLA under TP=2 x SP=2: ``kv_b_proj`` holds the rows of this GPU's
    heads (full-TP rank t*SP + s), with the loader and bias
    ``ColumnParallelLinear`` gives them, on the module the model built (a
    hook and an attribute set after construction kept: running ``__init__``
    again dropped them); the backend gets q and the latent as views of the
    exchange, q packed on GPUs, the latent packed for a quantized
    ``kv_b_proj``, the same values either way."""
    run_ranks(mla_on_each_rank, tmp_path, 2, 2)


def test_dp_token_counts_are_per_slice_inside_the_sp_model(monkeypatch):
    """With -dp and SP, MoE layers gather tokens over the DP group (the
    same SP rank of each replica) by the replicas' token counts; inside the
    SP model each rank holds 1/SP of its replica's padded step, so the
    counts are divided for the call and restored after.  With expert
    parallelism over the SP ranks (``divide`` False) the layer splits each
    replica's whole count over its TP*SP ranks itself: one size per rank of
    the EP group, replica by replica."""
    from vllm.distributed import ulysses, ulysses_model
    from vllm.forward_context import DPMetadata, ForwardContext, override_forward_context

    monkeypatch.setattr(ulysses, "sp_size", lambda: 2)
    dp = DPMetadata(torch.tensor([8, 4]))
    seen = []
    ctx = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={}, dp_metadata=dp)
    with override_forward_context(ctx):
        with ulysses_model._dp_sizes_of_slices(True):
            seen = dp.num_tokens_across_dp_cpu.tolist()
            with dp.sp_local_sizes(1):            # what the MoE runner asks for
                assert dp.get_chunk_sizes_across_dp_rank() == [4, 2]
        assert seen == [4, 2] and dp.num_tokens_across_dp_cpu.tolist() == [8, 4]
        with ulysses_model._dp_sizes_of_slices(False):
            assert dp.num_tokens_across_dp_cpu.tolist() == [8, 4]
            with dp.sp_local_sizes(2, use_ep=True):   # EP at TP=1 x SP=2: over TP*SP ranks
                assert dp.get_chunk_sizes_across_dp_rank() == [4, 4, 2, 2]
    with ulysses_model._dp_sizes_of_slices(True):       # no forward context: nothing to do
        pass


def test_sampled_rows_gathered_unless_the_step_reads_others(monkeypatch):
    """The SP model gathers only the rows the runner samples from, unless
    the step reads other rows too (prompt logprobs, a drafter, pooling) or
    the sampled rows are most of the step (decodes)."""
    from vllm.distributed import ulysses, ulysses_model

    monkeypatch.setattr(ulysses, "sp_size", lambda: 2)
    monkeypatch.setattr(ulysses, "gather_tokens", lambda x: torch.cat([x, x]))
    monkeypatch.setattr(ulysses, "gather_rows", lambda x, rows: torch.full((len(rows), 1), 7.0))

    def gathered(rows: list[int], total: int = 16, **runner) -> str:
        runner = SimpleNamespace(**{**dict(num_prompt_logprobs={}, is_pooling_model=False,
                                           speculative_config=None), **runner})
        with ulysses_model.sampled_rows_only(runner, torch.tensor(rows)):
            out = ulysses_model._gather_output(torch.zeros(total // 2, 1), total)
        assert out.shape == (total, 1)
        return "rows" if out[rows].eq(7).all() else "whole"

    assert gathered([3, 15]) == "rows"
    assert gathered([3, 15], num_prompt_logprobs={"r": 0}) == "whole"
    assert gathered([3, 15], speculative_config=object()) == "whole"   # vLLM <= 0.33: any
    # vLLM >= 0.34 says which speculators read the target's hidden states (H7)
    reads = [gathered([3, 15], speculative_config=SimpleNamespace(uses_target_hidden_states=u))
             for u in (False, True)]
    assert reads == ["rows", "whole"]      # n-gram, suffix, draft model; EAGLE, MTP
    assert gathered([3, 15], is_pooling_model=True) == "whole"
    assert gathered(list(range(8))) == "whole"        # decodes: half the step or more
    # V2 (vLLM's default runner for dense models on GPUs): a flag per request
    # slot; only the step's own requests count
    import numpy as np

    def gathered_v2(slots: list[int], flagged: list[int]) -> str:
        uses = np.zeros(8, dtype=bool)
        uses[flagged] = True
        runner = SimpleNamespace(is_pooling_model=False, speculative_config=None,
                                 prompt_logprobs_worker=SimpleNamespace(uses_prompt_logprobs=uses))
        batch = SimpleNamespace(idx_mapping_np=np.array(slots))
        with ulysses_model.sampled_rows_only(runner, torch.tensor([3, 15]), batch):
            out = ulysses_model._gather_output(torch.zeros(8, 1), 16)
        return "rows" if out[[3, 15]].eq(7).all() else "whole"

    assert gathered_v2([0, 2], flagged=[5]) == "rows"
    assert gathered_v2([0, 5], flagged=[5]) == "whole"
    # outside the runner's forward (dummy runs, graph capture): the whole step
    before = ulysses_model.gather_counts()
    ulysses_model._gather_output(torch.zeros(8, 1), 16)
    after = ulysses_model.gather_counts()
    assert (after["whole"] - before["whole"], after["rows"] - before["rows"]) == (1, 0)


def test_attention_layers_without_an_exchange_refused():
    """A model whose attention-like layer is not vLLM's Attention (or a GDN
    mixer), so made no SP plan, is refused at load, naming the layer: it
    would attend over one rank's slice of the tokens, silently wrong."""
    from vllm.distributed import ulysses_model
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    class Sparse(torch.nn.Module, AttentionLayerBase):      # a model's own attention class
        def get_attn_backend(self):
            raise NotImplementedError

        def get_kv_cache_spec(self, vllm_config):
            return None

    planned = Sparse()
    planned.ulysses = object()                             # what a plan leaves on its layer
    model = torch.nn.ModuleDict({"layers": torch.nn.ModuleList([planned, torch.nn.Linear(2, 2)])})
    ulysses_model.check_attention_layers(model)
    model["layers"].append(Sparse())
    with pytest.raises(ValueError, match=r"layer layers\.2 \(Sparse\) attends without"):
        ulysses_model.check_attention_layers(model)


def test_mamba2_conv_reads_the_plain_rows_of_a_packed_weight(monkeypatch):
    """vLLM's CPU platform packs a bfloat16 conv1d weight in place after
    loading (AVX512-bf16 and Arm bf16 CPUs), keeping the plain one beside it;
    MambaMixer2's conv reads its ``conv_weights`` buffer, a view of the plain
    load.  SP's view of the mixer must hand its conv the plain rows too, not
    the packed ones, on any host: the packing is simulated here."""
    from vllm.distributed import ulysses_mamba, ulysses_state
    from vllm.distributed.ulysses_state import LocalConv

    def pack(w):                                           # any layout but the plain one
        return w.flip(-1).contiguous() + 100

    monkeypatch.setattr(ulysses_state, "_conv_weight_pack", lambda: pack)
    plain = torch.arange(8 * 4, dtype=torch.float32).view(8, 4)
    rows = torch.tensor([1, 3, 6])
    mixer = torch.nn.Module()
    mixer.conv1d = torch.nn.Module()
    mixer.conv1d.weight = torch.nn.Parameter(plain.unsqueeze(1).clone(), requires_grad=False)
    mixer.conv1d.bias = torch.nn.Parameter(torch.arange(8.0), requires_grad=False)
    plan = SimpleNamespace(conv=LocalConv(mixer, rows))
    monkeypatch.setattr(ulysses_mamba, "plan_of", lambda view: plan)
    assert torch.equal(ulysses_mamba._conv_weights(object()), plain[rows])   # not packed
    mixer.conv1d._cpu_unpacked_conv_weight = plain.clone()                  # the platform's
    mixer.conv1d.weight.data = pack(plain)                                   # packing
    assert torch.equal(ulysses_mamba._conv_weights(object()), plain[rows])
    assert torch.equal(plan.conv.weight, pack(plain[rows]))     # what a packed-weight kernel reads
