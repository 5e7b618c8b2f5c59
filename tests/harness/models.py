"""Tiny random checkpoints, written with transformers' own classes.

Random weights are fine for equivalence tests: every layout must give the
same tokens as every other, whatever the weights.  Hidden sizes are kept
small so that a CPU engine with several ranks starts in under a minute.
Each checkpoint also gets a small word-level tokenizer so that the OpenAI
server (which needs one) can be tested on the same model.  The GPU harness
(benchmarks/equivalence.py) writes its families' wider checkpoints with the
same writer (``save_random``, ``vl_parts``, ``tokenizer``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from .repo import VERSION

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

VOCAB = 512

# rope_scaling as deepseek-ai/DeepSeek-V3's config.json publishes it.
DEEPSEEK_V3_YARN = dict(beta_fast=32, beta_slow=1, factor=40, mscale=1.0, mscale_all_dim=1.0,
                        original_max_position_embeddings=4096, type="yarn")


def tokenizer(specials: dict[str, str] | None = None, *, vocab: int = VOCAB,
              newlines: bool | None = None, tail: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """A word-level tokenizer of ``vocab`` ids, to save beside a checkpoint: words ``w<i>``;
    ``specials`` (attribute -> token, e.g. a processor's image token) come right after
    ``<unk> <s> </s>``, then (``newlines``; by default whenever there are specials) the
    newline runs Gemma 3's image sequence is wrapped in (added tokens, matched whole).
    ``tail``: plain words that take the last ids instead of ``w<i>``."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = specials or {}
    if newlines is None:
        newlines = bool(specials)
    runs = ["\n\n\n\n", "\n\n\n", "\n\n", "\n"] if newlines else []
    head = ["<unk>", "<s>", "</s>"] + list(specials.values()) + runs
    words = head + [f"w{i}" for i in range(vocab - len(head) - len(tail))] + list(tail)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_tokens([AddedToken(n, normalized=False) for n in runs])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>",
                                   extra_special_tokens=specials or None)
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}")
    return fast


def staging(path: Path) -> Path:
    """The folder a checkpoint is written in before it is renamed to ``path``, so that a
    write cut short is never taken for a checkpoint: empty (what an earlier cut left is
    removed)."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def make_model(root: Path, arch: str = "llama", *, heads: int = 8, kv_heads: int = 2,
               layers: int = 2, hidden: int = 128, head_dim: int = 32, intermediate: int = 256,
               dtype: str = "float32", seed: int = 0, experts: int = 4,
               linear_head_dim: int = 32, yarn: bool = True, window: int | None = None) -> Path:
    """Write a random checkpoint under ``root`` and return its directory
    (``yarn``: DeepSeek's published YaRN positions, else plain rotary;
    ``window``: Mistral's sliding window over every layer, else its default).

    The directory name encodes the arguments, so a cached checkpoint is reused
    by every test of a session."""
    import transformers

    # vLLM's CPU attention kernels take head_dim in {32, 64, 80, 96, ...}.

    name = f"{arch}-h{heads}x{head_dim}-kv{kv_heads}-l{layers}-d{hidden}-{dtype}-s{seed}"
    if arch == "glm4_moe":
        name += "-g2"
    if arch in ("deepseek_v3", "deepseek_v2") and yarn:
        name += "-yarn"
    if arch == "qwen3_next":
        name += f"-lin{linear_head_dim}"
    if experts != 4:
        name += f"-e{experts}"
    if window is not None:
        name += f"-w{window}"
    path = Path(root) / name
    if (path / "config.json").exists():
        return path
    common = dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate,
                  num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, max_position_embeddings=4096,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  head_dim=head_dim)
    if arch == "llama":
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif arch == "qwen2":
        cfg, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    elif arch == "mistral":
        cfg = transformers.MistralConfig(**common, **({"sliding_window": window} if window else {}))
        cls = transformers.MistralForCausalLM
    elif arch == "qwen3":
        cfg, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    elif arch == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(**common, num_experts=experts, num_experts_per_tok=2,
                                          moe_intermediate_size=intermediate // 2,
                                          decoder_sparse_step=1, norm_topk_prob=True)
        cls = transformers.Qwen3MoeForCausalLM
    elif arch == "deepseek_v3":
        # Multi-head latent attention as DeepSeek-V3 and Kimi K2 have it: a
        # q LoRA, one latent of 576 (512 + rope 64: the CPU decode kernel's
        # only size) cached per token, the per-head keys and values from it
        # (nope and v 64), YaRN positions as DeepSeek-V3 publishes them
        # (deepseek_yarn in vLLM: its softmax scale grows by the mscale);
        # a dense first layer, then MoE with a shared expert and grouped
        # top-k (noaux_tc: score correction bias, two groups).
        common.pop("head_dim")
        if yarn:
            common["max_position_embeddings"] = 163840
        cfg = transformers.DeepseekV3Config(
            **common, kv_lora_rank=512, q_lora_rank=64, qk_rope_head_dim=64,
            qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=experts,
            num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=intermediate // 2,
            first_k_dense_replace=1, n_group=2, topk_group=1,
            rope_scaling=DEEPSEEK_V3_YARN if yarn else None)
        cfg.topk_method, cfg.scoring_func = "noaux_tc", "sigmoid"
        cls = transformers.DeepseekV3ForCausalLM
    elif arch == "deepseek_v2":
        # DeepSeek-V2-Lite's attention: no q LoRA (q_proj straight from the
        # hidden state), the same latent, YaRN as V2-Lite publishes it
        # (mscale 0.707); a dense first layer, then greedy top-k softmax MoE
        # with a shared expert.
        common.pop("head_dim")
        common["max_position_embeddings"] = 163840
        cfg = transformers.DeepseekV2Config(
            **common, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
            qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=experts,
            num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=intermediate // 2,
            first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
            rope_scaling=dict(DEEPSEEK_V3_YARN, mscale=0.707, mscale_all_dim=0.707))
        cls = transformers.DeepseekV2ForCausalLM
    elif arch == "mixtral":
        cfg = transformers.MixtralConfig(**common, num_local_experts=experts,
                                         num_experts_per_tok=2)
        cls = transformers.MixtralForCausalLM
    elif arch == "glm4_moe":
        # GLM-4.5: partial rotary (half the head dim), QK norm, a dense first
        # layer, then grouped top-k MoE with a shared expert: two groups of
        # experts, the top-k taken in the best one.
        cfg = transformers.Glm4MoeConfig(**common, n_routed_experts=experts,
                                         num_experts_per_tok=2, n_shared_experts=1,
                                         moe_intermediate_size=intermediate // 2,
                                         first_k_dense_replace=1, partial_rotary_factor=0.5,
                                         use_qk_norm=True, n_group=2, topk_group=1,
                                         num_nextn_predict_layers=0)
        cls = transformers.Glm4MoeForCausalLM
    elif arch == "bloom":
        # ALiBi instead of rotary positions, one slope per head; no GQA.
        assert kv_heads == heads and hidden == heads * head_dim, "Bloom: MHA, hidden/heads"
        cfg = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=hidden, n_layer=layers,
                                       n_head=heads, bos_token_id=1, eos_token_id=2)
        # (vLLM's Bloom ties the LM head to the embeddings, as Bloom does.)
        cls = transformers.BloomForCausalLM
    elif arch == "gpt_oss":
        # Learned attention sinks, one per head; sliding and full layers
        # alternating (the window shorter than the workload's long prompt); MoE.
        cfg = transformers.GptOssConfig(**common, num_local_experts=experts,
                                        num_experts_per_tok=2, sliding_window=16,
                                        layer_types=["sliding_attention", "full_attention"]
                                        * (layers // 2))
        cls = transformers.GptOssForCausalLM
    elif arch == "qwen3_next":
        # Hybrid: Gated-DeltaNet (linear attention) and gated full-attention
        # layers alternating; MoE with a shared expert.  Linear heads: 4 key,
        # 8 value (two v-heads per k-head), so TP*SP up to 4 splits them;
        # ``linear_head_dim`` for their keys and values (the CPU GDN kernels
        # run bfloat16 only; 0.26's take multiples of 32, 0.32's 64 or 128).
        # vLLM sizes a hybrid's attention block so that one block's KV page
        # holds a layer's conv + recurrent state: with head_dim=256 (as the
        # real checkpoints) that is 32 to 64 tokens (test_e2e_hybrid), within
        # the workload's 64-token steps and prefix-cache granularity.
        cfg = transformers.Qwen3NextConfig(
            **common, num_experts=experts, num_experts_per_tok=2,
            moe_intermediate_size=intermediate // 2,
            shared_expert_intermediate_size=intermediate // 2, decoder_sparse_step=1,
            norm_topk_prob=True, linear_num_key_heads=4, linear_num_value_heads=8,
            linear_key_head_dim=linear_head_dim, linear_value_head_dim=linear_head_dim,
            linear_conv_kernel_dim=4,
            layer_types=["linear_attention", "full_attention"] * (layers // 2))
        cls = transformers.Qwen3NextForCausalLM
    else:
        raise ValueError(f"unknown arch {arch}")
    return save_random(path, cfg, cls, dtype=dtype, seed=seed)


def save_random(path: Path, cfg, cls, *, dtype: str = "float32", seed: int = 0,
                std: float = 0.08, device: str = "cpu", beside: list | None = None,
                renames: list[tuple[str, str]] = (), fields: dict | None = None) -> Path:
    """A random ``cls`` of ``cfg`` at ``path``, drawn from ``seed`` on ``device`` and saved
    in ``dtype``: every matrix normal of ``std`` (wider than transformers' init, so that
    logits lie apart and greedy argmax is not decided by rounding), each head's attention
    sink of 2.0 (far apart: a head given another's sink changes the output).  Beside the
    weights, each of ``beside`` saved (default: the tokenizer of ``VOCAB`` words; a
    multimodal checkpoint's tokenizer and processor); ``renames``: (old, new) prefixes of
    weight names; ``fields``: config.json entries set over transformers' (a dict merged
    into the entry's dict)."""
    import torch

    tmp = staging(path)
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(cfg).to(getattr(torch, dtype))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
            elif name.endswith("sinks"):
                p.normal_(0.0, 2.0)
    model.save_pretrained(tmp, safe_serialization=True)
    del model
    if device != "cpu":
        torch.cuda.empty_cache()      # the engines the caller starts want the GPUs
    for part in [tokenizer()] if beside is None else beside:
        part.save_pretrained(tmp)
    if renames:
        from safetensors.torch import load_file, save_file

        for f in tmp.glob("*.safetensors"):
            weights = load_file(f)
            for old, new in renames:
                weights = {new + k[len(old):] if k.startswith(old) else k: v
                           for k, v in weights.items()}
            save_file(weights, f, metadata={"format": "pt"})
    meta = json.loads((tmp / "config.json").read_text())
    meta["torch_dtype"] = dtype
    for k, v in (fields or {}).items():
        meta[k] = {**meta.get(k, {}), **v} if isinstance(v, dict) else v
    (tmp / "config.json").write_text(json.dumps(meta, indent=1))
    tmp.rename(path)
    return path


def make_mamba2(root: Path, arch: str, *, groups: int, dtype: str = "float32",
                seed: int = 0) -> Path:
    """A tiny Mamba-2 hybrid (``arch``: nemotron_h, granitemoehybrid,
    falcon_h1, zamba2): 8 Mamba heads of 32 in ``groups`` groups, state 64,
    conv 4; attention 8 heads / 2 KV heads of 32.  Nemotron-H: Mamba,
    attention, Mamba, MLP layers; Granite 4.0-H: Mamba and attention layers,
    each with a MoE (4 experts, top-2) and a shared expert; Falcon-H1:
    attention and Mamba side by side in every layer; Zamba2: Mamba layers,
    the second and fourth each after one of two shared transformer blocks
    (8 heads of 64 over the hidden state and the embedding side by side),
    with LoRA adapters (rank 16) per layer, rotary."""
    import transformers

    path = Path(root) / f"{arch}-g{groups}-{dtype}-s{seed}"
    if (path / "config.json").exists():
        return path
    common = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=256,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    if arch == "nemotron_h":
        cfg = transformers.NemotronHConfig(
            **common, num_hidden_layers=4, hybrid_override_pattern="M*M-", head_dim=32,
            mamba_num_heads=8, mamba_head_dim=32, ssm_state_size=64, n_groups=groups,
            mamba_d_conv=4)
        cls = transformers.NemotronHForCausalLM
    elif arch == "granitemoehybrid":
        cfg = transformers.GraniteMoeHybridConfig(
            **common, num_hidden_layers=2, layer_types=["mamba", "attention"],
            num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=128,
            mamba_n_heads=8, mamba_d_head=32, mamba_n_groups=groups, mamba_d_state=64,
            mamba_d_conv=4, mamba_expand=1)
        cls = transformers.GraniteMoeHybridForCausalLM
    elif arch == "falcon_h1":
        cfg = transformers.FalconH1Config(
            **common, num_hidden_layers=2, head_dim=32, mamba_n_heads=8, mamba_d_head=32,
            mamba_n_groups=groups, mamba_d_state=64, mamba_d_conv=4, mamba_expand=1,
            mamba_d_ssm=256)
        cls = transformers.FalconH1ForCausalLM
    elif arch == "zamba2":
        # vLLM's Zamba2 attends with as many KV heads as query heads (head dim
        # 2*hidden/heads = 64) and ties the LM head to the embedding.
        cfg = transformers.Zamba2Config(
            **{**common, "num_key_value_heads": 8, "tie_word_embeddings": True},
            num_hidden_layers=4, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
            num_mem_blocks=2, use_shared_attention_adapter=True, adapter_rank=16,
            use_mem_rope=True, n_mamba_heads=8, mamba_ngroups=groups, mamba_d_state=64,
            mamba_d_conv=4, mamba_expand=1)
        cls = transformers.Zamba2ForCausalLM
    else:
        raise ValueError(f"unknown Mamba-2 hybrid {arch}")
    return save_random(path, cfg, cls, dtype=dtype, seed=seed)


# The hybrid (Qwen3-Next: Gated-DeltaNet and gated attention, MoE), in
# bfloat16, as the CPU GDN kernels take nothing else: 0.26's take linear head
# dims that are multiples of 32 and a float32 recurrent state (its CPU chunk
# kernel refuses a bf16 initial state), 0.32's head dims 64 or 128 and either
# state.  GDN: the engine arguments every run of it takes, the state as the
# release takes it (0.32: bf16, a layer's state then fits one block of <= 64
# tokens); GDN_F32: the float32 state on every release (test_e2e_hybrid: 0.32
# then covers both state dtypes).
LINEAR_HEAD_DIM = 32 if VERSION == "0.26.0" else 64
GDN_F32 = dict(dtype="bfloat16", mamba_ssm_cache_dtype="float32")
GDN = GDN_F32 if VERSION == "0.26.0" else dict(GDN_F32, mamba_ssm_cache_dtype="bfloat16")


def make_qwen3_next(root: Path) -> Path:
    """head_dim 256 (as the real checkpoints): the attention page of one
    32-token block then holds a GDN layer's state."""
    return make_model(root, "qwen3_next", heads=8, kv_heads=2, layers=4, head_dim=256,
                      dtype="bfloat16", linear_head_dim=LINEAR_HEAD_DIM)


# What a text prompt writes where an image goes, per multimodal arch.
IMAGE_PLACEHOLDER = {
    "gemma3_vl": "<start_of_image>",
    "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "llama4_vl": "<|image|>",
    "qwen3_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen3_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
}
# Each multimodal arch's vision tokens (tokenizer attribute -> token), right after
# <unk> <s> </s> in its tokenizer.
QWEN_VL_TOKENS = {"vision_start": "<|vision_start|>", "image_token": "<|image_pad|>",
                  "vision_end": "<|vision_end|>", "video_token": "<|video_pad|>"}
VL_TOKENS = {
    "gemma3_vl": {"boi_token": "<start_of_image>", "image_token": "<image_soft_token>",
                  "eoi_token": "<end_of_image>"},
    "qwen2_5_vl": QWEN_VL_TOKENS, "qwen3_vl": QWEN_VL_TOKENS, "qwen3_5_vl": QWEN_VL_TOKENS,
    "llama4_vl": {f"mark{i}": m for i, m in enumerate(
        ["<|image_start|>", "<|image|>", "<|patch|>", "<|image_end|>", "<|tile_x_separator|>",
         "<|tile_y_separator|>"])},
}
# Qwen3-VL's vision tower (Qwen3.5's too): 16-pixel patches merged 2x2.
QWEN3_VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4,
                    out_hidden_size=128, patch_size=16, spatial_merge_size=2,
                    temporal_patch_size=2, num_position_embeddings=64)


def vl_parts(arch: str, text: dict, vision: dict, *, pixels: dict | None = None,
             mm_tokens: int = 0, vocab: int = VOCAB, newlines: bool = True):
    """(config, model class, tokenizer, processor, weight renames) of the multimodal
    ``arch`` (a key of ``VL_TOKENS``) over the decoder config ``text`` and the vision
    tower's ``vision``: its tokenizer of ``vocab`` words holds the arch's vision tokens
    (``newlines``: and Gemma 3's newline runs), its image processor (PIL, as a user's) takes
    ``pixels`` (Qwen's budget) or the tower's image size (Gemma 3's, pooled to
    ``mm_tokens`` an image; Llama 4's, one tile)."""
    import transformers as tf

    tok = tokenizer(VL_TOKENS[arch], vocab=vocab, newlines=newlines)
    ids = tok.convert_tokens_to_ids
    side = vision.get("image_size")
    if arch == "gemma3_vl":
        cfg = tf.Gemma3Config(
            text_config=text, vision_config=tf.SiglipVisionConfig(**vision).to_dict(),
            mm_tokens_per_image=mm_tokens, boi_token_index=ids("<start_of_image>"),
            eoi_token_index=ids("<end_of_image>"), image_token_index=ids("<image_soft_token>"),
            tie_word_embeddings=True)
        processor = tf.Gemma3Processor(
            image_processor=tf.Gemma3ImageProcessorPil(size={"height": side, "width": side}),
            tokenizer=tok, image_seq_length=mm_tokens)
        # vLLM 0.26 reads SigLIP under vision_tower.vision_model., as the
        # published checkpoints have it; transformers 5 saves it one level up.
        return (cfg, tf.Gemma3ForConditionalGeneration, tok, processor,
                [("vision_tower.", "vision_tower.vision_model.")])
    if arch == "llama4_vl":
        cfg = tf.Llama4Config(text_config=text, vision_config=vision,
                              image_token_index=ids("<|patch|>"), tie_word_embeddings=False)
        processor = tf.Llama4Processor(
            image_processor=tf.Llama4ImageProcessor(size={"height": side, "width": side},
                                                    max_patches=1),
            tokenizer=tok, patch_size=vision["patch_size"])
        return cfg, tf.Llama4ForConditionalGeneration, tok, processor, []
    config, cls, video, proc = {
        "qwen2_5_vl": (tf.Qwen2_5_VLConfig, tf.Qwen2_5_VLForConditionalGeneration,
                       tf.Qwen2VLVideoProcessor, tf.Qwen2_5_VLProcessor),
        "qwen3_vl": (tf.Qwen3VLConfig, tf.Qwen3VLForConditionalGeneration,
                     tf.Qwen3VLVideoProcessor, tf.Qwen3VLProcessor),
        "qwen3_5_vl": (tf.Qwen3_5Config, tf.Qwen3_5ForConditionalGeneration,
                       tf.Qwen3VLVideoProcessor, tf.Qwen3VLProcessor)}[arch]
    cfg = config(text_config=text, vision_config=dict(vision),
                 image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                 vision_start_token_id=ids("<|vision_start|>"),
                 vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False)
    processor = proc(image_processor=tf.Qwen2VLImageProcessorPil(**pixels), tokenizer=tok,
                     video_processor=video(**pixels))
    return cfg, cls, tok, processor, []


def make_vl_model(root: Path, arch: str, *, dtype: str = "float32", seed: int = 0) -> Path:
    """A tiny random multimodal checkpoint with its processor (image
    processor + the word-level tokenizer with the family's image tokens):
    the language model is ``make_model``'s shape (8 heads, 2 KV heads, head
    dim 32, 2 layers); the vision tower has 4 heads, so that Shift's full-TP
    model can shard it over 4 ranks.  56x56 images give 4 image tokens."""
    path = Path(root) / f"{arch}-{dtype}-s{seed}"
    if (path / "config.json").exists():
        return path
    text = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                max_position_embeddings=4096, bos_token_id=1, eos_token_id=2)
    qwen3_pixels = dict(size={"shortest_edge": 64 * 64, "longest_edge": 128 * 64},
                        patch_size=16, merge_size=2)
    if arch == "gemma3_vl":
        text.update(sliding_window=32, query_pre_attn_scalar=32,
                    layer_types=["sliding_attention", "full_attention"])
        vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, image_size=56, patch_size=14, vision_use_head=False)
        more = dict(mm_tokens=4)
    elif arch == "qwen2_5_vl":
        # (Qwen2's head dim is hidden / heads, whatever head_dim says.)
        text.update(hidden_size=256, rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]})
        vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4,
                      out_hidden_size=256, patch_size=14, spatial_merge_size=2,
                      temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])
        more = dict(pixels=dict(min_pixels=56 * 56, max_pixels=56 * 56 * 4))
    elif arch == "qwen3_vl":
        # Deepstack: vision features of two encoder layers are added to the
        # first decoder layers' hidden states, per image token.
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6,
                                   "mrope_section": [4, 6, 6], "mrope_interleaved": True}
        vision = dict(QWEN3_VISION, deepstack_visual_indexes=[0, 1])
        more = dict(pixels=qwen3_pixels)
    elif arch == "qwen3_5_vl":
        # Qwen3.5 as published: the multimodal class over a Gated-DeltaNet
        # hybrid decoder (non-interleaved GDN projections, gated attention;
        # head dim 256 and the release's linear head dim, as make_qwen3_next),
        # M-RoPE, a Qwen3-VL-style vision tower without deepstack.
        text.update(head_dim=256, linear_num_key_heads=4, linear_num_value_heads=8,
                    linear_key_head_dim=LINEAR_HEAD_DIM, linear_value_head_dim=LINEAR_HEAD_DIM,
                    linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"],
                    rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                     "partial_rotary_factor": 0.25,
                                     "mrope_section": [11, 11, 10], "mrope_interleaved": True})
        vision, more = QWEN3_VISION, dict(pixels=qwen3_pixels)
    elif arch == "llama4_vl":
        # Chunked local attention (chunk 32 < the long prompt), a NoPE layer
        # (every 4th), MoE on every other layer, QK norm.
        text.update(num_hidden_layers=4, intermediate_size_mlp=256, num_local_experts=4,
                    num_experts_per_tok=1, interleave_moe_layer_step=2, attention_chunk_size=32,
                    no_rope_layer_interval=4, use_qk_norm=True, pad_token_id=0)
        vision = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                      num_attention_heads=4, image_size=56, patch_size=14,
                      vision_output_dim=128, projector_input_dim=128, projector_output_dim=128)
        more = {}
    else:
        raise ValueError(f"unknown multimodal arch {arch}")
    cfg, cls, tok, processor, renames = vl_parts(arch, text, vision, **more)
    return save_random(path, cfg, cls, dtype=dtype, seed=seed, beside=[tok, processor],
                       renames=renames)


JSON_WORDS = ("{", "}", '"a"', ":", ",", *"0123456789")


def with_json_words(model: Path, root: Path) -> Path:
    """``model`` with a tokenizer whose last ids are JSON's pieces
    (``JSON_WORDS``), so that a JSON-schema request can be satisfied: the
    same weights (linked), the same ids for every other word."""
    path = Path(root) / f"{model.name}-json"
    if (path / "config.json").exists():
        return path
    tmp = staging(path)
    for f in model.iterdir():
        if f.suffix in (".json", ".safetensors") and "token" not in f.name:
            (tmp / f.name).symlink_to(f.resolve())
    tokenizer(tail=JSON_WORDS).save_pretrained(tmp)
    tmp.rename(path)
    return path

