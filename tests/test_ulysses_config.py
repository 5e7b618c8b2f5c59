"""--sequence-parallel-size on the CLI and in the engine config: accepted
where it makes sense, rejected before any worker starts with one line that
names the fix where it does not."""

from __future__ import annotations

import copy
import json

import pytest

from harness.config import (
    OUR_FIELDS,
    cli_rejects,
    config_facts,
    config_hash,
    engine_config,
    error_line,
    upstream_config_facts,
    write_config,
)
from harness.models import make_model
from harness.repo import VERSION


def test_cli_flag_and_help():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", "m", "-sp", "2", "-tp", "2"])
    ea = EngineArgs.from_cli_args(args)
    assert (ea.sequence_parallel_size, ea.tensor_parallel_size) == (2, 2)
    assert parser.parse_args(["--model", "m", "--sequence-parallel-size", "4"]) \
        .sequence_parallel_size == 4
    action = next(a for a in parser._actions if "--sequence-parallel-size" in a.option_strings)
    assert "-sp" in action.option_strings
    # Help text comes from the field's docstring, as for every other flag
    # (vLLM fills it in only when --help is asked for).
    from vllm.config import ParallelConfig
    from vllm.config.utils import get_attr_docs

    doc = get_attr_docs(ParallelConfig)["sequence_parallel_size"]
    assert "Ulysses" in doc and "enable_sp" in doc


def test_world_size_and_hash(llama):
    base = engine_config(llama, tensor_parallel_size=2)
    sp = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2)
    assert base.parallel_config.world_size == 2 and sp.parallel_config.world_size == 4
    assert config_hash(base.parallel_config) != config_hash(sp.parallel_config)
    assert sp.model_config.get_num_attention_heads(sp.parallel_config) == 2   # 8 / (2*2)
    assert sp.model_config.get_num_kv_heads(sp.parallel_config) == 1          # replicated


def test_sp1_is_upstream(llama, tmp_path):
    """Without -sp and with -sp 1, the engine config is the one upstream
    vLLM builds (its official wheel, unpatched, in a subprocess): the same
    parallel-config hash factors and world size, per-GPU heads and
    compilation config; our own fields hold their defaults."""
    upstream = upstream_config_facts(llama, tmp_path, tensor_parallel_size=2)
    assert upstream.pop("ours") == {}
    for kw in ({}, {"sequence_parallel_size": 1}):
        ours = config_facts(engine_config(llama, tensor_parallel_size=2, **kw))
        assert ours.pop("ours") == OUR_FIELDS, kw
        up, mine = upstream["parallel"], ours["parallel"]
        differ = {k: (up.get(k, "-"), mine.get(k, "-")) for k in up.keys() | mine.keys()
                  if up.get(k, "-") != mine.get(k, "-")}
        assert not differ, f"{kw}: ParallelConfig (upstream, ours): {differ}"
        assert ours == upstream, kw


def test_turns_off_the_enable_sp_compile_pass(llama):
    """vLLM's own sequence-parallel compile passes (enable_sp and
    fuse_gemm_comms, which 0.32 removed) rewrite the TP all-reduces that
    Ulysses relies on: SP turns off those the release has."""
    import dataclasses

    from vllm.config.compilation import PassConfig

    passes = [f.name for f in dataclasses.fields(PassConfig)
              if f.name in ("enable_sp", "fuse_gemm_comms")]
    if not passes:
        pytest.skip(f"vLLM {VERSION} has no enable_sp/fuse_gemm_comms pass to turn off")
    cfg = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2,
                        compilation_config={"pass_config": dict.fromkeys(passes, True)})
    for name in passes:
        assert getattr(cfg.compilation_config.pass_config, name) is False, name


def graph_sizes(model, **kw) -> list[int]:
    """The CUDA-graph capture sizes vLLM would pick on a GPU: the CPU
    platform runs eager, so the engine config is built eager and vLLM's own
    sizing is then rerun with graphs on."""
    from vllm.config import CUDAGraphMode

    user_max = kw.pop("max_cudagraph_capture_size", None)
    cfg = engine_config(model, max_num_batched_tokens=8192, max_num_seqs=256, **kw)
    cfg.model_config.enforce_eager = False
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg.compilation_config.cudagraph_capture_sizes = None
    cfg.compilation_config.max_cudagraph_capture_size = user_max
    cfg._set_cudagraph_sizes()
    return cfg.compilation_config.cudagraph_capture_sizes


def test_graphs_cover_sp_times_upstreams_tokens_per_step(llama):
    """Each SP rank runs 1/SP of a step, so by default SP captures steps up
    to SP x upstream's largest graph (each rank's graphs stay as small as
    upstream's); a size the user sets is kept; SP=1 is upstream."""
    tp = graph_sizes(llama, tensor_parallel_size=2)
    assert max(tp) == 512 and graph_sizes(llama, sequence_parallel_size=1) == graph_sizes(llama)
    sp2 = graph_sizes(llama, sequence_parallel_size=2)
    assert max(sp2) == 1024 and all(s % 2 == 0 for s in sp2)
    assert set(s for s in tp if s % 2 == 0) <= set(sp2)
    assert max(graph_sizes(llama, tensor_parallel_size=2, sequence_parallel_size=2)) == 1024
    assert max(graph_sizes(llama, sequence_parallel_size=2, max_cudagraph_capture_size=512)) == 512
    # Shift: the full-TP model's graphs stay within upstream's bound (its
    # ranks hold every token of a step); the SP model's go to SP x it.
    from vllm.distributed import shift

    def split(**kw):
        kw.update(shift_parallel=True)
        sizes = graph_sizes(llama, **kw)
        cfg = engine_config(llama, max_num_batched_tokens=8192, max_num_seqs=256, **kw)
        t = shift.effective_threshold(cfg.parallel_config)
        return t, [s for s in sizes if s <= t], [s for s in sizes if s > t]

    t, full, sp = split(sequence_parallel_size=2)                  # the default threshold
    assert t == 1024 and max(full) == 512 and sp == []
    assert full == tp       # plain TP's sizes: its steps are not padded to SP (one token: 1)
    t, full, sp = split(sequence_parallel_size=2, shift_parallel_threshold=256)
    assert max(full) == 256 and min(sp) > 256 and max(sp) == 1024
    t, full, sp = split(sequence_parallel_size=4)                  # a hole: 528..1008 eager
    assert max(s for s in full if s < t) == 512 and t in full and sp[0] > t and max(sp) == 2048
    t, full, sp = split(sequence_parallel_size=2, max_cudagraph_capture_size=1024)
    assert max(full) == 1024                                       # the user's size is kept


@pytest.mark.parametrize("kw,needle", [
    (dict(sequence_parallel_size=3),
     "not divisible by tensor_parallel_size*sequence_parallel_size=1*3"),
    (dict(tensor_parallel_size=4, sequence_parallel_size=4),
     "not divisible by tensor_parallel_size*sequence_parallel_size=4*4"),
    (dict(tensor_parallel_size=2, decode_context_parallel_size=2, sequence_parallel_size=2),
     "cannot be combined with prefill/decode context parallelism"),
    (dict(prefill_context_parallel_size=2, sequence_parallel_size=2),
     "cannot be combined with prefill/decode context parallelism"),
    (dict(sequence_parallel_size=2, data_parallel_backend="ray"), "Ray data-parallel backend"),
    (dict(sequence_parallel_size=2, max_num_batched_tokens=63),
     "must be a multiple of sequence_parallel_size=2"),
    pytest.param(dict(tensor_parallel_size=2, sequence_parallel_size=2, shift_parallel=True,
                      enable_batch_sharded_sampling=True),
                 "does not support batch-sharded sampling", marks=pytest.mark.skipif(
                     VERSION == "0.26.0", reason="vLLM 0.26.0 has no batch-sharded sampling")),
    (dict(sequence_parallel_size=2, enable_dbo=True), "does not support microbatching"),
    (dict(sequence_parallel_size=2, ubatch_size=2), "does not support microbatching"),
])
def test_bad_layouts_rejected(llama, kw, needle):
    with pytest.raises(Exception) as excinfo:
        engine_config(llama, **kw)
    line = error_line(excinfo, needle)
    assert "sequence_parallel_size" in line or "SP" in line


@pytest.mark.core
def test_expert_parallel_with_sp(models_dir):
    """--enable-expert-parallel with -sp builds (its group, placement and
    dispatch: test_ulysses_unit, test_e2e_ep), but not with another all2all
    backend, any upstream lists (they would route tokens by a rank order the
    EP group's experts do not follow: ulysses_moe.BACKEND; the CPU platform
    would swap them for allgather_reducescatter with a warning), nor with
    expert load balancing.  0.26.0 stays at its features and refuses it,
    naming the release to build (marked core: the one test of this file that
    the older releases' tier runs)."""
    moe = make_model(models_dir, "qwen3_moe", heads=8, kv_heads=2)
    if VERSION == "0.26.0":
        with pytest.raises(Exception) as excinfo:
            engine_config(moe, sequence_parallel_size=2, enable_expert_parallel=True)
        line = error_line(excinfo, "needs vLLM 0.32 or newer")
        assert "./build.sh --version 0.33.0" in line
        return
    cfg = engine_config(moe, sequence_parallel_size=2, enable_expert_parallel=True)
    assert cfg.parallel_config.use_sequence_parallel_moe
    needle = ("dispatches with the allgather_reducescatter all2all backend only, not "
              "deepep_low_latency: use --all2all-backend allgather_reducescatter")
    with pytest.raises(Exception) as excinfo:
        engine_config(moe, sequence_parallel_size=2, enable_expert_parallel=True,
                      all2all_backend="deepep_low_latency")
    assert needle in error_line(excinfo, needle)
    from typing import get_args

    from vllm.config.parallel import All2AllBackend
    from vllm.distributed import ulysses_config

    others = sorted(set(get_args(All2AllBackend)) - {"allgather_reducescatter"})
    assert "deepep_low_latency" in others, others
    for backend in others:
        pc = copy.copy(cfg.parallel_config)
        pc.all2all_backend = backend
        with pytest.raises(ValueError, match=f"backend only, not {backend}:"):
            ulysses_config.validate_parallel_config(pc)
    # EPLB: the CPU platform refuses it before SP's check, so the check alone.
    pc = copy.copy(cfg.parallel_config)
    pc.enable_eplb = True
    with pytest.raises(ValueError, match=r"does not support expert load balancing \(EPLB\)"):
        ulysses_config.validate_parallel_config(pc)
    # Round-robin placement: the layers would fall back to linear, the
    # loader's expert filter (--enable-ep-weight-filter) not.
    with pytest.raises(Exception) as excinfo:
        engine_config(moe, sequence_parallel_size=2, enable_expert_parallel=True,
                      expert_placement_strategy="round_robin")
    assert "drop --expert-placement-strategy" in error_line(excinfo, "places experts linearly")
    # A MoE backend that dispatches itself (vLLM sets the passthrough all2all
    # backend for it after these checks).
    from vllm.config.kernel import FLASHINFER_MOE_EP_BACKENDS

    for backend in sorted(FLASHINFER_MOE_EP_BACKENDS):
        vc = copy.copy(cfg)
        vc.kernel_config = copy.copy(cfg.kernel_config)
        vc.kernel_config.moe_backend = backend
        with pytest.raises(ValueError, match=f"does not support --moe-backend {backend}, "):
            ulysses_config.verify_config(vc)
    ulysses_config.verify_config(cfg)


def test_groups_must_stay_within_a_node(llama, monkeypatch):
    """Two nodes: SP=2 alone would put one rank of each SP group per node
    (refused, with the bytes its all-to-alls would send); PP=2 x SP=2 keeps
    each SP group on a node (the stages go across).  The tiny model: 8
    heads, 2 KV heads of 32 dims, float32: per token of a step each GPU
    sends (2*8 + 2*2) * 32 * 4 B * (1/2) / 2 = 0.625 KiB per layer."""
    with pytest.raises(ValueError) as excinfo:
        engine_config(llama, sequence_parallel_size=2, nnodes=2, node_rank=0, dtype="float32")
    line = error_line(excinfo, "would span nodes")
    assert "TP x SP groups of 2 ranks would span nodes (1 ranks per node)" in line
    assert "0.62 KiB per GPU per token of a step" in line and "VLLM_SP_ALLOW_CROSS_NODE=1" in line
    ok = engine_config(llama, sequence_parallel_size=2, pipeline_parallel_size=2, nnodes=2,
                       node_rank=1)
    assert ok.parallel_config.local_world_size == 2
    monkeypatch.setenv("VLLM_SP_ALLOW_CROSS_NODE", "1")
    assert engine_config(llama, sequence_parallel_size=2, nnodes=2, node_rank=0) is not None


def test_ray_placement_must_keep_groups_within_a_node(llama, monkeypatch):
    """The Ray executors' check on where the placement group put each rank
    (patch ray-executors-keep-sp-groups-on-a-node): TP x SP groups are
    consecutive ranks."""
    from vllm.distributed import ulysses_config

    pp_sp = engine_config(llama, sequence_parallel_size=2, pipeline_parallel_size=2,
                          distributed_executor_backend="ray")
    ulysses_config.check_rank_nodes(pp_sp, ["a", "a", "b", "b"])
    with pytest.raises(ValueError) as excinfo:
        ulysses_config.check_rank_nodes(pp_sp, ["a", "b", "b", "b"])
    line = error_line(excinfo, "on more than one node")
    assert "the TP x SP group 0 (2 ranks each) on more than one node" in line
    assert "VLLM_SP_ALLOW_CROSS_NODE=1" in line
    tp_sp = engine_config(llama, tensor_parallel_size=2, sequence_parallel_size=2,
                          distributed_executor_backend="ray", dtype="float32")
    with pytest.raises(ValueError) as excinfo:
        ulysses_config.check_rank_nodes(tp_sp, ["a", "a", "b", "b"])
    # TP=2 x SP=2: (2*4 + 2*2) * 32 * 4 B * (1/2) / 2 = 0.375 KiB per GPU per token.
    assert "0.38 KiB per GPU per token" in error_line(excinfo, "on more than one node")
    monkeypatch.setenv("VLLM_SP_ALLOW_CROSS_NODE", "1")
    ulysses_config.check_rank_nodes(tp_sp, ["a", "a", "b", "b"])
    # SP=1: TP across nodes stays upstream's business.
    ulysses_config.check_rank_nodes(engine_config(llama, tensor_parallel_size=2), ["a", "b"])


def test_kv_heads_neither_divisible_nor_multiple(models_dir):
    model = make_model(models_dir, "llama", heads=12, kv_heads=3, hidden=192)
    with pytest.raises(Exception) as excinfo:
        engine_config(model, sequence_parallel_size=4)
    error_line(excinfo, "neither divides nor is a multiple of")


def _mla_config(tmp_path, name: str, arch: str, **extra):
    from transformers import DeepseekV2Config

    cfg = DeepseekV2Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                           moe_intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
                           num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                           qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                           n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
                           max_position_embeddings=512).to_dict()
    cfg.update(architectures=[arch], **extra)
    return write_config(tmp_path / name, cfg)


@pytest.mark.core
def test_mla_with_sp(tmp_path):
    """MLA under SP (ulysses_mla; served: test_e2e_mla) builds, each GPU
    attending with H/(TP*SP) query heads; DeepSeek-V3.2's sparse MLA (its
    indexer) is refused in one line.  0.26.0 stays at its features and
    refuses MLA, naming the release to build (core: its tier runs this)."""
    model = _mla_config(tmp_path, "dsv2", "DeepseekV2ForCausalLM")
    if VERSION == "0.26.0":
        with pytest.raises(Exception) as excinfo:
            engine_config(model, sequence_parallel_size=2)
        line = error_line(excinfo, "needs vLLM 0.32 or newer")
        assert "MLA attention" in line and "./build.sh --version 0.33.0" in line, line
        return
    cfg = engine_config(model, sequence_parallel_size=2)
    assert cfg.model_config.use_mla and cfg.parallel_config.sequence_parallel_size == 2
    sparse = _mla_config(tmp_path, "dsv32", "DeepseekV32ForCausalLM", index_topk=64,
                         index_n_heads=4, index_head_dim=16)
    with pytest.raises(Exception) as excinfo:
        engine_config(sparse, sequence_parallel_size=2)
    line = error_line(excinfo, "does not support sparse MLA attention")
    assert "indexer" in line and "use -sp 1" in line, line


def test_multimodal_off_the_list_rejected(tmp_path):
    """A multimodal class no engine test has shown under SP (PaliGemma here)
    is refused in one line naming it and the supported ones."""
    from transformers import PaliGemmaConfig

    text = dict(model_type="gemma", vocab_size=256, hidden_size=64, intermediate_size=128,
                num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)
    cfg = PaliGemmaConfig(text_config=text, vision_config=vision, image_token_index=255,
                          projection_dim=64).to_dict()
    cfg["architectures"] = ["PaliGemmaForConditionalGeneration"]
    model = write_config(tmp_path / "paligemma", cfg)
    with pytest.raises(Exception) as excinfo:
        engine_config(model, sequence_parallel_size=2)
    line = error_line(excinfo, "does not support the multimodal PaliGemmaForConditionalGeneration")
    assert "Qwen3VLForConditionalGeneration" in line and "use -sp 1" in line, line


def test_encoder_decoder_rejected(tmp_path):
    from transformers import BartConfig

    cfg = BartConfig(vocab_size=256, d_model=64, encoder_layers=1, decoder_layers=1,
                     encoder_attention_heads=4, decoder_attention_heads=4,
                     encoder_ffn_dim=128, decoder_ffn_dim=128,
                     max_position_embeddings=256).to_dict()
    cfg["architectures"] = ["BartForConditionalGeneration"]
    model = write_config(tmp_path / "bart", cfg)
    with pytest.raises(Exception) as excinfo:
        engine_config(model, sequence_parallel_size=2)
    text = str(excinfo.value)
    # vLLM may reject the architecture itself first; either way SP never starts.
    assert "encoder-decoder" in text or "not supported" in text.lower() \
        or "architecture" in text.lower(), text


def test_transformers_backend(llama, models_dir):
    """vLLM's Transformers modeling backend (`--model-impl transformers`, and
    architectures vLLM maps to it) builds under SP and Shift (its layers'
    head counts: test_e2e_ep), but for an MLA model, whose path there has
    not run: refused in one line naming the architecture."""
    for sp in ({}, dict(shift_parallel=True)):
        cfg = engine_config(llama, sequence_parallel_size=2, model_impl="transformers", **sp)
        assert cfg.model_config.using_transformers_backend()
    mla = make_model(models_dir, "deepseek_v3", heads=4, kv_heads=4, hidden=256)
    assert engine_config(mla, model_impl="transformers").model_config.using_transformers_backend()
    with pytest.raises(Exception) as excinfo:
        engine_config(mla, sequence_parallel_size=2, model_impl="transformers")
    line = error_line(excinfo, "does not support MLA models on vLLM's Transformers")
    assert "DeepseekV3ForCausalLM" in line and "--model-impl vllm" in line, line


def test_quantized_kv_cache_refused(llama, tmp_path):
    """A quantized KV cache is refused under SP in one line naming the
    unquantized dtype, but `--kv-cache-dtype fp8` (one scale) from 0.33 on,
    whose attention quantizes the query before the exchange: the FP8 cache a
    checkpoint's kv_cache_scheme turns on (per-head and per-tensor scales
    alike, at `auto` and at `fp8`), and the other quantized dtypes.  Plain TP
    builds them all, and an explicit bfloat16 cache keeps SP."""
    single_scale = VERSION not in ("0.26.0", "0.32.0")
    for dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert engine_config(llama, kv_cache_dtype=dtype).cache_config.cache_dtype == dtype
        if single_scale and dtype != "fp8_e5m2":
            cfg = engine_config(llama, sequence_parallel_size=2, kv_cache_dtype=dtype)
            assert cfg.parallel_config.sequence_parallel_size == 2, dtype
            continue
        with pytest.raises(Exception) as excinfo:
            engine_config(llama, sequence_parallel_size=2, kv_cache_dtype=dtype)
        line = error_line(excinfo, "does not support a quantized KV cache")
        assert f"kv_cache_dtype '{dtype}'" in line, line
        assert "--kv-cache-dtype bfloat16 or -sp 1" in line, line
    cfg = json.loads((llama / "config.json").read_text())
    scheme = dict(num_bits=8, type="float", strategy="attn_head", dynamic=False, symmetric=True)
    for strategy in ("attn_head", "tensor"):
        cfg["quantization_config"] = dict(quant_method="compressed-tensors", format="dense",
                                          config_groups={}, ignore=[],
                                          kv_cache_scheme=dict(scheme, strategy=strategy))
        scaled = write_config(tmp_path / strategy, cfg)
        for dtype in ("auto", "fp8"):
            with pytest.raises(Exception) as excinfo:
                engine_config(scaled, sequence_parallel_size=2, kv_cache_dtype=dtype)
            line = error_line(excinfo, "does not support a quantized KV cache")
            assert "kv_cache_scheme asks for an FP8 KV cache" in line, line
        assert engine_config(scaled).parallel_config.sequence_parallel_size == 1
        assert engine_config(scaled, sequence_parallel_size=2, kv_cache_dtype="bfloat16") \
            .parallel_config.sequence_parallel_size == 2


def test_cli_rejects_sp_not_dividing_the_heads(llama):
    """`vllm serve` with an impossible layout exits quickly, naming the fix."""
    out = cli_rejects(llama, ["-sp", "3"])
    assert "not divisible by tensor_parallel_size*sequence_parallel_size=1*3" in out, out[-3000:]
