"""Tiny random checkpoints, written with transformers' own classes.

Random weights are fine for equivalence tests: every layout must give the
same tokens as every other, whatever the weights.  Hidden sizes are kept
small so that a CPU engine with several ranks starts in under a minute.
Each checkpoint also gets a small word-level tokenizer so that the OpenAI
server (which needs one) can be tested on the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 512


def _tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(VOCAB - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>")
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}")
    fast.save_pretrained(path)


def make_model(root: Path, arch: str = "llama", *, heads: int = 8, kv_heads: int = 2,
               layers: int = 2, hidden: int = 128, head_dim: int = 32, intermediate: int = 256,
               dtype: str = "float32", seed: int = 0, experts: int = 4,
               linear_head_dim: int = 32) -> Path:
    """Write a random checkpoint under ``root`` and return its directory.

    The directory name encodes the arguments, so a cached checkpoint is reused
    by every test of a session."""
    import torch
    import transformers

    # vLLM's CPU attention kernels take head_dim in {32, 64, 80, 96, ...}.

    name = f"{arch}-h{heads}x{head_dim}-kv{kv_heads}-l{layers}-d{hidden}-{dtype}-s{seed}"
    if arch == "qwen3_next":
        name += f"-lin{linear_head_dim}"
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
        cfg, cls = transformers.MistralConfig(**common), transformers.MistralForCausalLM
    elif arch == "qwen3":
        cfg, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    elif arch == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(**common, num_experts=experts, num_experts_per_tok=2,
                                          moe_intermediate_size=intermediate // 2,
                                          decoder_sparse_step=1, norm_topk_prob=True)
        cls = transformers.Qwen3MoeForCausalLM
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
    torch.manual_seed(seed)
    model = cls(cfg).to(getattr(torch, dtype))
    # A wider init than the default keeps logits well separated, so greedy
    # argmax is not decided by float rounding.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.08)
            elif name.endswith("sinks"):      # one per head, far apart: a head
                p.normal_(0.0, 2.0)           # given another's sink changes the output
    tmp = path.with_suffix(".tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    cfg_json = json.loads((tmp / "config.json").read_text())
    cfg_json["torch_dtype"] = dtype
    (tmp / "config.json").write_text(json.dumps(cfg_json, indent=1))
    _tokenizer(tmp)
    tmp.rename(path)
    return path
