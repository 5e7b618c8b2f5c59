"""The served model: a real Llama-3.1 shape's config.json beside a word-level tokenizer over
its whole vocabulary whose decode -> encode round-trips (what `vllm bench serve`'s random
dataset needs), served with --load-format dummy: the host downloads nothing.  `tiny` is a
2-layer shape for the CPU dry run."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA_31_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8)
LLAMA_31_70B = dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                    num_attention_heads=64, num_key_value_heads=8)
TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2)
# Qwen/Qwen3-30B-A3B's config.json: the MoE shape of the expert-parallel rows (128 experts
# top-8 of 768; ~61 GB in bf16, so SP=2 without EP holds all of it on each GPU).
QWEN3_30B_A3B = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                     hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                     num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                     num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                     decoder_sparse_step=1, norm_topk_prob=True, mlp_only_layers=[],
                     rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                     rope_scaling=None)
SHAPES = {"8b": (LLAMA_31_8B, 128256), "70b": (LLAMA_31_70B, 128256), "tiny": (TINY, 2048),
          "a3b": (QWEN3_30B_A3B, 151936)}


def word(i: int) -> str:
    """The i-th word of the generated vocabulary: 'w' + base 36, at most 5
    characters, so a 32k-token prompt stays a modest ~200 kB request."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = digits[r] + out
        if i == 0:
            return "w" + out


def write_model(path: Path, shape: str) -> Path:
    """config.json of a real shape (a Llama-3.1, or a whole config of its
    own) and a word-level tokenizer over its whole vocabulary."""
    dims, vocab = SHAPES[shape]
    path.mkdir(parents=True, exist_ok=True)
    if "architectures" in dims:
        cfg = dict(vocab_size=vocab, hidden_act="silu", torch_dtype="bfloat16",
                   tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **dims)
    else:
        cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=vocab,
                   hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5,
                   rope_theta=500000.0, torch_dtype="bfloat16", tie_word_embeddings=False,
                   bos_token_id=1, eos_token_id=2,
                   head_dim=dims["hidden_size"] // dims["num_attention_heads"],
                   rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=8192,
                                     rope_type="llama3"),
                   **dims)
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    _write_tokenizer(path, vocab)
    return path


def _write_tokenizer(path: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # Llama 3's own special-token names: besides being faithful, they make the
    # longest token 17 characters, as in the real vocabulary.  vLLM rejects a
    # prompt longer than (longest token) x (context) characters before
    # tokenizing; with only short words a 32k prompt (6 characters a token
    # with its space) fails that bound although it fits the context.
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    words = ["<unk>", bos, eos] + [word(i) for i in range(vocab - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token=bos,
                                   eos_token=eos)
    fast.save_pretrained(path)
    ids = list(range(3, 3 + 500))
    assert fast(fast.decode(ids), add_special_tokens=False)["input_ids"] == ids, "no round trip"
