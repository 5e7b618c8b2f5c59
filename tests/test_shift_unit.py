"""Shift building blocks without an engine, under gloo: the full-TP view of
the process groups, and the weight sharing: a full-TP row-parallel layer
whose weight is a view of the SP model's computes the same product as a
dense matmul, with its all-reduce over the full-TP group, and a full-TP LM
head whose weight is a view of the SP model's gives the full logits once
gathered over the full-TP group.

Why a unit test: the CPU engine packs linear weights for oneDNN and drops
the plain tensors, so the e2e tests never share weights; on GPUs they do."""

from __future__ import annotations

import pytest

from harness.gloo import run_ranks


def weights_shared_on_each_rank(rank, world, tp, sp, cfg):
    """Each rank's checks (harness.gloo built its groups)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import shift, ulysses
    from vllm.distributed.communication_op import (
        tensor_model_parallel_all_gather,
        tensor_model_parallel_all_reduce,
    )
    from vllm.model_executor.layers.linear import RowParallelLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    with set_current_vllm_config(cfg):
        t, s = ps.get_tensor_model_parallel_rank(), ulysses.sp_rank()
        full_rank = ulysses.get_full_tp_group().rank_in_group
        # the full-TP view: TP is the full-TP group, SP is gone
        with ulysses.as_full_tp():
            assert ps.get_tensor_model_parallel_world_size() == tp * sp
            assert ps.get_tensor_model_parallel_rank() == full_rank == t * sp + s
            assert ulysses.sp_size() == 1
        assert ps.get_tensor_model_parallel_world_size() == tp and ulysses.sp_size() == sp
        I, O, T = 64, 24, 5                                   # noqa: E741 (in, out)
        V = 512                                               # a multiple of 64 * TP * SP
        sp_layer = RowParallelLinear(I, O, bias=False, return_bias=False, prefix="down")
        sp_head = ParallelLMHead(V, I, prefix="lm_head")
        with ulysses.as_full_tp():
            full_layer = RowParallelLinear(I, O, bias=False, return_bias=False, prefix="down")
            full_head = ParallelLMHead(V, I, prefix="lm_head")
    g = torch.Generator().manual_seed(0)                      # same on every rank
    W, x = torch.randn(O, I, generator=g), torch.randn(T, I, generator=g)
    cols = I // tp
    sp_layer.weight.data.copy_(W[:, t * cols:(t + 1) * cols])
    full_layer.weight.data.fill_(float("nan"))
    saved = shift.share_weights(sp_layer, full_layer)
    k = I // (tp * sp)
    assert saved == O * k * 4, saved
    assert full_layer.weight.untyped_storage().data_ptr() \
        == sp_layer.weight.untyped_storage().data_ptr()
    assert torch.equal(full_layer.weight, W[:, full_rank * k:(full_rank + 1) * k])
    with ulysses.as_full_tp():
        y = tensor_model_parallel_all_reduce(
            torch.nn.functional.linear(x[:, full_rank * k:(full_rank + 1) * k], full_layer.weight))
    torch.testing.assert_close(y, x @ W.T, rtol=1e-5, atol=1e-5)
    # The LM head: vocabulary rows, TP rank t holds [t*V/TP, (t+1)*V/TP)
    E = torch.randn(V, I, generator=g)
    rows = V // tp
    sp_head.weight.data.copy_(E[t * rows:(t + 1) * rows])
    full_head.weight.data.fill_(float("nan"))
    saved = shift.share_weights(sp_head, full_head)
    r = V // (tp * sp)
    assert saved == r * I * 4, saved
    assert full_head.weight.untyped_storage().data_ptr() \
        == sp_head.weight.untyped_storage().data_ptr()
    assert torch.equal(full_head.weight, E[full_rank * r:(full_rank + 1) * r])
    with ulysses.as_full_tp():
        logits = tensor_model_parallel_all_gather(x @ full_head.weight.T)
    torch.testing.assert_close(logits, x @ E.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tp,sp", [(1, 2), (2, 2)])
def test_row_parallel_weights_shared_across_layouts(tmp_path, tp, sp):
    run_ranks(weights_shared_on_each_rank, tmp_path, tp, sp)
