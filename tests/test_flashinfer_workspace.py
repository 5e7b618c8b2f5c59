"""FlashInfer's all-reduce workspaces, one per group of ranks (the patch
``flashinfer-allreduce-workspace-per-group``), under gloo at TP=2 x SP=2.

Shift's two models all-reduce over two groups on the same GPUs: the SP
model's TP group and the full-TP group.  Each must get a workspace made
with its own ranks, and made with torch's rank in the group, since
FlashInfer places the buffers it gathers by that rank and the full-TP
group's member order ([0, 2, 1, 3]) is not global-rank order.  The CPU
engine has no FlashInfer: FlashInfer's two entry points the module calls
are stand-ins that record what they were given; the registry, the rank
and the destroy paths are the patched module's own."""

from __future__ import annotations

from harness.gloo import run_ranks


def workspaces_per_group_on_each_rank(rank, world, tp, sp, cfg):
    from types import SimpleNamespace

    import torch.distributed as dist
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses
    from vllm.distributed.device_communicators import flashinfer_all_reduce as fi

    made, destroyed = [], []

    def create(backend, world_size, rank, max_token_num, hidden_dim, dtype,
               comm_backend, group):
        ws = SimpleNamespace(backend=backend, rank=rank, world_size=world_size,
                             ranks=tuple(dist.get_process_group_ranks(group)))
        ws.destroy = lambda: destroyed.append(ws)
        made.append(ws)
        return ws

    fi.flashinfer_comm = SimpleNamespace(create_allreduce_fusion_workspace=create)
    fi.TorchDistBackend = lambda group: None
    fi.envs.VLLM_FLASHINFER_ALLREDUCE_BACKEND = "trtllm"
    fi.destroy_fi_ar_workspace()                       # nothing made yet: a no-op

    def ask(coordinator, quant=False, group=None):
        get = fi.get_fi_ar_quant_workspace if quant else fi.get_fi_ar_workspace
        # callers pass rank_in_group (vLLM's tensor-model-parallel rank)
        return get(world_size=coordinator.world_size, rank=coordinator.rank_in_group,
                   max_token_num=64, hidden_dim=32, dtype=None,
                   group=group or coordinator.device_group)

    tp_group, full = ps.get_tp_group(), ulysses.get_full_tp_group()
    assert full.ranks == [0, 2, 1, 3], full.ranks              # member order, not sorted
    small = ask(tp_group)
    assert ask(tp_group, group=tp_group.cpu_group) is small    # one per ranks, either group
    assert ask(tp_group, quant=True) is small                  # the quant patterns share it
    big = ask(full)
    assert big is not small and ask(full) is big
    assert (small.ranks, small.world_size) == (tuple(tp_group.ranks), 2)
    assert (big.ranks, big.world_size) == ((0, 1, 2, 3), 4)
    # made with torch's rank in each group: global rank 1 is member 2 of the full-TP group
    assert small.rank == dist.get_rank(tp_group.device_group) == tp_group.rank_in_group
    assert big.rank == dist.get_rank(full.device_group) == rank
    assert full.rank_in_group == full.ranks.index(rank)
    assert len(made) == 2, made

    fi.destroy_fi_ar_workspace(tp_group.device_group)          # one group's owner leaves
    assert destroyed == [small] and ask(full) is big
    assert ask(tp_group) is not small                          # made again when asked
    fi.destroy_fi_ar_workspace()                               # at exit: the rest, once each
    assert len(made) == 3 and len(destroyed) == 3, destroyed
    assert {id(ws) for ws in destroyed} == {id(ws) for ws in made}


def test_workspace_per_group(tmp_path):
    run_ranks(workspaces_per_group_on_each_rank, tmp_path, 2, 2)
