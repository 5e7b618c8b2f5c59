"""Shift building blocks without an engine, under gloo: the full-TP view of
the process groups, and the weight sharing: a full-TP row-parallel layer
whose weight is a view of the SP model's computes the same product as a
dense matmul, with its all-reduce over the full-TP group, and a full-TP LM
head whose weight is a view of the SP model's gives the full logits once
gathered over the full-TP group; merged QKV and gate/up layers arranged in
blocks (``shift_weights.arrange``) give the full-TP model its shards as
views, and the SP model still reads their outputs in the natural order.

Why a unit test: the CPU engine packs linear weights for oneDNN and drops
the plain tensors, so the e2e tests never share weights; on GPUs they do
(the e2e tests do run the arranged SP model on every family)."""

from __future__ import annotations

import pytest

from harness.gloo import run_ranks


def weights_shared_on_each_rank(rank, world, tp, sp, cfg):
    """Each rank's checks (harness.gloo built its groups)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import shift_weights, ulysses
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
    saved = shift_weights.share(sp_layer, full_layer, check_values=False)
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
    saved = shift_weights.share(sp_head, full_head, check_values=False)
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


def gated_mlp(gate_up, act):
    """A decoder MLP as the release's Llama writes it (its forward is what
    ``shift_weights`` reads to use the activation's blocked view): from 0.32
    through ``maybe_fused_act_quant``, before that calling the activation."""
    import torch

    try:
        from vllm.model_executor.layers.fusion.fused_act_quant import maybe_fused_act_quant
    except ImportError:
        class MLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.gate_up_proj, self.act_fn = gate_up, act

            def forward(self, x):
                x, _ = self.gate_up_proj(x)
                x = self.act_fn(x)
                return x

        return MLP()

    class FusableMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up_proj, self.act_fn = gate_up, act
            self.down_proj = torch.nn.Module()            # no input quantization

        def forward(self, x):
            x, _ = self.gate_up_proj(x)
            x = maybe_fused_act_quant(self.act_fn, x, self.down_proj)
            return x

    return FusableMLP()


# The decoder MLPs whose gate/up output goes straight into the activation in
# every release here; Falcon-H1's scales the gate half first.
GATED_MLPS = {"llama": "LlamaMLP", "qwen2": "Qwen2MLP", "qwen2_moe": "Qwen2MoeMLP",
              "qwen3_moe": "Qwen3MoeMLP", "gemma3": "Gemma3MLP", "glm4_moe": "Glm4MoeMLP",
              "deepseek_v2": "DeepseekV2MLP"}


def test_families_read_gate_up_in_blocks():
    """Under Shift the SP model's gate/up rows are arranged in blocks; a
    family whose MLP hands that output straight to its gated activation
    reads it as S small gate/ups (no copy), any other through a gather of
    the whole output every step.  Read from the release's own classes, as
    ``shift_weights`` reads them (0.32 moved Llama's, and 0.34 Qwen2-MoE's,
    to ``maybe_fused_act_quant``)."""
    import importlib

    from vllm.distributed.shift_weights import reads_output_whole
    from vllm.model_executor.models.falcon_h1 import FalconH1MLP

    for module, name in GATED_MLPS.items():
        cls = getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), name)
        assert reads_output_whole(cls, "gate_up_proj"), f"{module}.{name}"
    assert not reads_output_whole(FalconH1MLP, "gate_up_proj")


def merged_layers_shared_on_each_rank(rank, world, tp, sp, cfg):
    """QKV (with bias) and gate/up: the SP model's rows arranged in blocks, its
    outputs still natural (after the CPU's own processing); the full-TP layers'
    shards views of the arranged SP weights, equal to what they load themselves."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import shift_weights, ulysses
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear

    H, d, nh, nkv, I, T = 32, 4, 8, 4, 16, 5                   # noqa: E741
    g = torch.Generator().manual_seed(0)                      # same on every rank
    Wq, Wk, Wv = (torch.randn(n * d, H, generator=g) for n in (nh, nkv, nkv))
    bq, bk, bv = (torch.randn(n * d, generator=g) for n in (nh, nkv, nkv))
    Wg, Wu = torch.randn(I, H, generator=g), torch.randn(I, H, generator=g)
    x = torch.randn(T, H, generator=g)

    def build():
        qkv = QKVParallelLinear(H, d, nh, nkv, bias=True, prefix="attn.qkv_proj")
        gate_up = MergedColumnParallelLinear(H, [I, I], bias=False, prefix="mlp.gate_up_proj")
        model = torch.nn.Module()
        model.attn = torch.nn.Module()
        model.attn.qkv_proj = qkv
        model.mlp = gated_mlp(gate_up, SiluAndMul())
        return model

    def load(model):
        qkv = model.attn.qkv_proj
        for shard, w, b in (("q", Wq, bq), ("k", Wk, bk), ("v", Wv, bv)):
            qkv.weight_loader(qkv.weight, w, shard)
            qkv.weight_loader(qkv.bias, b, shard)
        gu = model.mlp.gate_up_proj
        gu.weight_loader(gu.weight, Wg, 0)
        gu.weight_loader(gu.weight, Wu, 1)

    def rows(w, r, parts):                                    # rank r's rows of a dense weight
        n = w.shape[0] // parts
        return w[r * n:(r + 1) * n]

    with set_current_vllm_config(cfg):
        t, s = ps.get_tensor_model_parallel_rank(), ulysses.sp_rank()
        full_rank = t * sp + s
        # 1. The arranged SP model as the CPU runs it (processed: packed for oneDNN).
        # Arranged under another default device, as vLLM 0.32+ builds the model under
        # ``with torch.device(target)`` and processes its weights after leaving it (on
        # GPUs: indices made on cuda met the host's; here meta meets the CPU's).
        real = build()
        with torch.device("meta"):
            assert shift_weights.arrange(real) == 2
        load(real)
        for layer in (real.attn.qkv_proj, real.mlp.gate_up_proj):
            layer.quant_method.process_weights_after_loading(layer)
        assert type(real.mlp.act_fn).__name__ == "BlockedActivation"
        assert shift_weights.read_paths(real) == {"blocked": 1, "gathered": 1}
        y, _ = real.attn.qkv_proj(x)
        want = torch.cat([x @ rows(W, t, tp).T + rows(b, t, tp)
                          for W, b in ((Wq, bq), (Wk, bk), (Wv, bv))], dim=-1)
        torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)
        gate, up = x @ rows(Wg, t, tp).T, x @ rows(Wu, t, tp).T
        torch.testing.assert_close(real.mlp(x), torch.nn.functional.silu(gate) * up,
                                   rtol=1e-4, atol=1e-4)
        # 2. Sharing: unprocessed layers keep their plain weights (as on GPUs).
        sp_model = build()
        for layer in (sp_model.attn.qkv_proj, sp_model.mlp.gate_up_proj):
            layer.quant_method.process_weights_after_loading = lambda layer: None
        shift_weights.arrange(sp_model)
        load(sp_model)
        for layer in (sp_model.attn.qkv_proj, sp_model.mlp.gate_up_proj):
            layer.quant_method.process_weights_after_loading(layer)
        with ulysses.as_full_tp():
            full = build()
        load(full)
        own = {n: p.detach().clone() for n, p in full.named_parameters()}
        saved = shift_weights.share(sp_model, full, check_values=True)
    n = tp * sp
    assert saved == 4 * sum(p.numel() for p in own.values()), saved
    for name, p in full.named_parameters():
        assert torch.equal(p, own[name]), name                # the values it loaded itself
        src = sp_model.get_parameter(name)
        assert p.untyped_storage().data_ptr() == src.untyped_storage().data_ptr(), name
    want = torch.cat([rows(W, full_rank, n) for W in (Wq, Wk, Wv)])
    assert torch.equal(full.attn.qkv_proj.weight, want)
    assert torch.equal(full.mlp.gate_up_proj.weight,
                       torch.cat([rows(Wg, full_rank, n), rows(Wu, full_rank, n)]))


@pytest.mark.parametrize("tp,sp", [(1, 2), (2, 2)])
def test_merged_weights_shared_across_layouts(tmp_path, tp, sp):
    run_ranks(merged_layers_shared_on_each_rank, tmp_path, tp, sp)


def test_block_order():
    from vllm.distributed.shift_weights import block_order
    order = block_order([4, 2, 2], 2)
    assert order == [0, 1, 4, 6, 2, 3, 5, 7]


def test_experts_shared_only_when_both_kernels_lay_them_out_alike():
    """Routed experts under EP: the full-TP layer takes the SP layer's tensors
    only where both MoE methods chose the same kernel (its class, backend and
    experts kernel decide how loading lays the tensors out), and the values
    check compares bit for bit, float8 included."""
    from types import SimpleNamespace

    import torch
    from vllm.distributed import shift_weights

    class Method:       # a MoE quant method as far as the layout goes
        def __init__(self, backend):
            self.fp8_backend, self.experts_cls = backend, SimpleNamespace

    def moe(backend, w):
        m = torch.nn.Module()
        m.w13_weight = torch.nn.Parameter(w.clone(), requires_grad=False)
        m.expert_map_manager = SimpleNamespace(expert_map=torch.tensor([0, 1, -1, -1]))
        m.quant_method = Method(backend)
        return m

    w = torch.randn(2, 8, 4).to(torch.float8_e4m3fn)
    src = moe("triton", w)
    same, other, flipped = moe("triton", w), moe("flashinfer_cutlass", w), moe("triton", w)
    views = shift_weights._expert_views(src, same)
    assert set(views) == {"w13_weight"} and shift_weights._same_values(src, same, views)
    assert shift_weights._expert_views(src, other) == {}
    flipped.w13_weight.data.view(torch.uint8)[0, 0, 0] ^= 1
    assert not shift_weights._same_values(src, flipped,
                                          shift_weights._expert_views(src, flipped))
