"""Ulysses SP for Gated-DeltaNet layers (``vllm.distributed.ulysses_gdn``)
without an engine: under gloo, a real Qwen3-Next GDN mixer's plan exchanges
its projections so that a per-head causal core over the whole step gives
each rank what one process computes over all tokens, and the view the core
runs on holds exactly the weights and state shape of the plain-TP mixer of
TP*SP ranks (Shift's full-TP model); and the config checks: GDN hybrids
accepted, the other hybrids refused naming their layers."""

from __future__ import annotations

import pytest

from harness.config import engine_config, error_line, write_config
from harness.gloo import run_ranks
from harness.models import make_model
from harness.repo import VERSION


def gdn_plan_on_each_rank(rank, world, tp, sp, cfg):
    """Each rank's checks (harness.gloo built its groups)."""
    import torch
    from transformers import Qwen3NextConfig
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.distributed import ulysses
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
        QwenGatedDeltaNetAttention,
    )

    t, s = ps.get_tensor_model_parallel_rank(), ulysses.sp_rank()
    Hk, Hv, dk, dv, K = 4, 8, 32, 32, 4
    hf = Qwen3NextConfig(hidden_size=64, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
                         linear_key_head_dim=dk, linear_value_head_dim=dv,
                         linear_conv_kernel_dim=K, num_hidden_layers=1)
    name = "model.layers.0.linear_attn"
    # (the mixer reads only the text config and dtype of the model's config)
    from types import SimpleNamespace
    object.__setattr__(cfg, "model_config",
                       SimpleNamespace(hf_text_config=hf, dtype=torch.float32))
    with set_current_vllm_config(cfg):
        mixer = QwenGatedDeltaNetAttention(hf, cfg, prefix=name, gqa_interleaved_layout=True)
    full_cfg = ulysses.full_tp_config(cfg)
    with ulysses.as_full_tp(), set_current_vllm_config(full_cfg):
        full = QwenGatedDeltaNetAttention(hf, full_cfg, prefix=name, gqa_interleaved_layout=True)
    assert full.ulysses is None and full_cfg.compilation_config.static_forward_context[name] is full
    view = cfg.compilation_config.static_forward_context[name]
    assert view is not mixer and isinstance(view, QwenGatedDeltaNetAttention)
    assert "ulysses" not in vars(view) and not set(vars(view)) - set(vars(full))

    # The checkpoint's weights, loaded by each model's own loaders (the
    # full-TP model's under its view of the groups, as Shift loads it).
    g = torch.Generator().manual_seed(0)
    conv_w = torch.randn(2 * Hk * dk + Hv * dv, 1, K, generator=g)
    a_log, dt_bias = torch.randn(Hv, generator=g), torch.randn(Hv, generator=g)

    def load(m):
        for p, w in ((m.conv1d.weight, conv_w), (m.A_log, a_log), (m.dt_bias, dt_bias)):
            p.weight_loader(p, w)

    load(mixer)
    with ulysses.as_full_tp():
        load(full)
    # What the core reads on this GPU = what plain TP over TP*SP holds here.
    assert view.tp_size == full.tp_size == tp * sp and view.tp_rank == full.tp_rank
    assert torch.equal(view.conv1d.weight, full.conv1d.weight), "conv rows"
    assert view.conv1d.bias is None and full.conv1d.bias is None
    assert torch.equal(view.A_log, full.A_log) and torch.equal(view.dt_bias, full.dt_bias)
    assert view.get_state_shape() == full.get_state_shape(), "state shape"
    # A later load (through the loader, which bumps no version) is seen, also by
    # a reader that kept the tensor: a CUDA graph that captured its address replays
    # without asking again.
    held = view.conv1d.weight
    conv_w = conv_w * 2 + 1
    load(mixer)
    with ulysses.as_full_tp():
        load(full)
    assert torch.equal(held, full.conv1d.weight), "conv rows a graph holds, after a reload"
    assert view.conv1d.weight is held, "rebuilt into the same tensor"

    # The exchange, with a stand-in core: per v-head, causal over the step,
    # reading q, k (of the v-head's k-head), v, b, a and the layer's A_log.
    def core(layer, qkv, b, a):
        hk, hv = layer.num_k_heads // layer.tp_size, layer.num_v_heads // layer.tp_size
        q, k, v = qkv.split([hk * dk, hk * dk, hv * dv], dim=-1)
        qk = (q.reshape(-1, hk, dk) * k.reshape(-1, hk, dk)).sum(-1)           # [T, hk]
        qk = qk.repeat_interleave(hv // hk, dim=1)                              # [T, hv]
        x = v.reshape(-1, hv, dv) * torch.sigmoid(b)[..., None] * layer.A_log.exp()[:, None]
        return torch.cumsum(x + (a + qk)[..., None], dim=0)                    # [T, hv, dv]

    def core_op(qkv, b, a, out, layer_name):
        out[:] = core(cfg.compilation_config.static_forward_context[layer_name], qkv, b, a)

    T = 6 * sp
    n = T // sp
    g = torch.Generator().manual_seed(100 + t)            # one TP rank's tokens
    qkv_all = torch.randn(T, (2 * Hk * dk + Hv * dv) // tp, generator=g)
    b_all, a_all = (torch.randn(T, Hv // tp, generator=g) for _ in range(2))
    rows = slice(s * n, (s + 1) * n)
    got = mixer.ulysses.forward(core_op, qkv_all[rows], b_all[rows], a_all[rows], name)
    want = core(mixer, qkv_all, b_all, a_all)[rows]        # one process, all tokens
    assert got.shape == (n, Hv // tp, dv), got.shape
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got - want).abs().max()

    # On CUDA with a drafter, Qwen3.5's layout would take the fused spec-decode
    # kernel, which skips the exchange: the plan turns it off, in the view too.
    from vllm.distributed.ulysses_gdn import LinearAttentionPlan
    table = cfg.compilation_config.static_forward_context
    mixer.enable_fused_gdn_spec_decode = True
    table[name] = mixer
    with set_current_vllm_config(cfg):
        assert LinearAttentionPlan.maybe_create(mixer) is not None
    assert not mixer.enable_fused_gdn_spec_decode
    assert not table[name].enable_fused_gdn_spec_decode


@pytest.mark.parametrize("tp,sp", [(1, 2), (2, 2)])
def test_plan_matches_one_process_and_full_tp_layout(tmp_path, tp, sp):
    run_ranks(gdn_plan_on_each_rank, tmp_path, tp, sp)


# ------------------------------------------------------------------ config

def test_qwen3_next_accepted(models_dir):
    model = make_model(models_dir, "qwen3_next", heads=8, kv_heads=2, layers=4, head_dim=256,
                       dtype="bfloat16")
    for tp, sp in [(1, 2), (2, 2), (1, 4)]:
        cfg = engine_config(model, tensor_parallel_size=tp, sequence_parallel_size=sp)
        assert cfg.parallel_config.world_size == tp * sp


def test_linear_heads_must_divide(models_dir):
    """4 linear key heads: TP*SP=8 would leave a GPU without one."""
    model = make_model(models_dir, "qwen3_next", heads=8, kv_heads=2, layers=4, head_dim=256,
                       dtype="bfloat16")
    with pytest.raises(Exception) as excinfo:
        engine_config(model, tensor_parallel_size=2, sequence_parallel_size=4)
    line = error_line(excinfo, "linear_num_key_heads=4")
    assert "tensor_parallel_size*sequence_parallel_size=2*4" in line, line


def test_other_hybrids_refused_naming_their_layers(tmp_path):
    """Jamba (Mamba), LFM2 (ShortConv): refused before any worker starts,
    in one line."""
    from transformers import JambaConfig, Lfm2Config

    small = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512)
    cases = [
        ("jamba", JambaConfig(**small, num_hidden_layers=2, attn_layer_period=2,
                              attn_layer_offset=1, expert_layer_period=2, num_experts=1),
         "JambaForCausalLM", "Mamba layers"),
        ("lfm2", Lfm2Config(**{**small, "num_hidden_layers": 2},
                            layer_types=["conv", "full_attention"]),
         "Lfm2ForCausalLM", "ShortConv layers"),
    ]
    for name, hf, arch, layer in cases:
        cfg = hf.to_dict()
        cfg["architectures"] = [arch]
        model = write_config(tmp_path / name, cfg)
        with pytest.raises(Exception) as excinfo:
            engine_config(model, sequence_parallel_size=2)
        line = error_line(excinfo, "sequence_parallel_size > 1 does not support the")
        assert layer in line and arch in line and "use -sp 1" in line, line


@pytest.mark.core
def test_mamba2_hybrid_layouts(tmp_path):
    """Granite 4.0-H (Mamba-2; served: test_e2e_mamba) builds under SP where
    plain TP over TP*SP could be built: TP*SP divides the Mamba heads, and
    the groups (or there is one).  Otherwise refused in one line; on 0.26.0
    refused naming the release to build (core: its tier runs this).  Zamba2's
    fields, read alike."""
    from transformers import GraniteMoeHybridConfig, Zamba2Config

    def granite(name, **kw):
        cfg = GraniteMoeHybridConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=512, num_hidden_layers=2,
                                     layer_types=["mamba", "attention"],
                                     **{"mamba_d_head": 16, **kw}).to_dict()
        cfg["architectures"] = ["GraniteMoeHybridForCausalLM"]
        return write_config(tmp_path / name, cfg)

    one = granite("g1", mamba_n_heads=8, mamba_n_groups=1)
    if VERSION == "0.26.0":
        with pytest.raises(Exception) as excinfo:
            engine_config(one, sequence_parallel_size=2)
        line = error_line(excinfo, "needs vLLM 0.32 or newer")
        assert "Mamba-2" in line and "./build.sh --version 0.33.0" in line, line
        return
    engine_config(one, tensor_parallel_size=2, sequence_parallel_size=2)
    engine_config(granite("g4", mamba_n_heads=8, mamba_n_groups=4), sequence_parallel_size=4)
    with pytest.raises(Exception) as excinfo:
        engine_config(granite("g2", mamba_n_heads=8, mamba_n_groups=2), sequence_parallel_size=4)
    line = error_line(excinfo, "mamba_n_groups=2")
    assert "tensor_parallel_size*sequence_parallel_size=4 does not divide" in line, line
    with pytest.raises(Exception) as excinfo:
        engine_config(granite("h6", mamba_n_heads=6, mamba_n_groups=1, mamba_expand=3,
                              mamba_d_head=32),
                      sequence_parallel_size=4)
    assert "mamba_n_heads=6" in error_line(excinfo, "not divisible by")

    def zamba2(name, groups):
        cfg = Zamba2Config(vocab_size=256, hidden_size=64, num_attention_heads=4,
                           max_position_embeddings=512, num_hidden_layers=2,
                           layers_block_type=["mamba", "hybrid"], mamba_d_state=16,
                           n_mamba_heads=8, mamba_ngroups=groups).to_dict()
        cfg["architectures"] = ["Zamba2ForCausalLM"]
        return write_config(tmp_path / name, cfg)

    engine_config(zamba2("z1", 1), tensor_parallel_size=2, sequence_parallel_size=2)
    with pytest.raises(Exception) as excinfo:
        engine_config(zamba2("z2", 2), sequence_parallel_size=4)
    assert "Zamba2ForCausalLM" in error_line(excinfo, "mamba_ngroups=2")
