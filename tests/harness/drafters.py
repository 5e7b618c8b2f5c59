"""Tiny speculative drafters for the tiny targets of ``models``: EAGLE and
EAGLE-3 heads, and checkpoints with one multi-token-prediction (MTP) layer
(MiMo's, Qwen3-Next's).

Random drafters would propose random tokens and have nothing accepted, so
each is built to *predict like its target*: it reads the target's last
hidden state (the EAGLE heads' ``fc`` picks it out of what it is given;
the MTP layer's ``input_proj`` likewise), passes it through a layer with small
random weights (so its attention and MLP still move the result, and a
wrong exchange shows), and scores it with the target's own final norm and
LM head.  So it proposes roughly the target's token for the position it
was given: right whenever the target repeats itself, which the tiny random
models do.  Both are written as the real checkpoints are (names, config
fields), loaded by vLLM's own classes.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.models import make_model


def _small(*shape: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * 0.02


def _layer(prefix: str, hidden: int, heads: int, kv_heads: int, head_dim: int,
           intermediate: int, qkv_in: int, seed: int, bias: bool = False) -> dict:
    import torch

    t = {
        f"{prefix}self_attn.q_proj.weight": _small(heads * head_dim, qkv_in, seed=seed),
        f"{prefix}self_attn.k_proj.weight": _small(kv_heads * head_dim, qkv_in, seed=seed + 1),
        f"{prefix}self_attn.v_proj.weight": _small(kv_heads * head_dim, qkv_in, seed=seed + 2),
        f"{prefix}self_attn.o_proj.weight": _small(hidden, heads * head_dim, seed=seed + 3),
        f"{prefix}mlp.gate_proj.weight": _small(intermediate, hidden, seed=seed + 4),
        f"{prefix}mlp.up_proj.weight": _small(intermediate, hidden, seed=seed + 5),
        f"{prefix}mlp.down_proj.weight": _small(hidden, intermediate, seed=seed + 6),
        f"{prefix}input_layernorm.weight": torch.ones(hidden),
        f"{prefix}post_attention_layernorm.weight": torch.ones(hidden),
    }
    if bias:   # Qwen2's q/k/v projections
        for n, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            t[f"{prefix}self_attn.{n}_proj.bias"] = _small(rows * head_dim, seed=seed + 7)
    return t


def _target_tensors(target: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(target.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _with_extra_layer(path: Path, target: Path, weights: dict, extra: dict, cfg: dict) -> Path:
    """Write ``target``'s checkpoint plus the ``extra`` tensors (cast to the
    target's dtype) and ``cfg`` at ``path``: how MTP checkpoints ship."""
    from safetensors.torch import save_file

    tmp = path.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in target.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "config.json":
            (tmp / f.name).write_bytes(f.read_bytes())
    dtype = weights["lm_head.weight"].dtype
    save_file({**weights, **{k: v.to(dtype).contiguous() for k, v in extra.items()}},
              tmp / "model.safetensors", metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    tmp.rename(path)
    return path


def make_eagle3(root: Path, target: Path, *, seed: int = 0) -> Path:
    """An EAGLE-3 head (``LlamaForCausalLMEagle3``, one layer, no embedding
    of its own: vLLM lends it the target's) for the Llama ``target``; it
    reads the target's hidden states after the embedding and each of its
    two layers (``eagle_aux_hidden_state_layer_ids`` 0, 1, 2)."""
    import torch

    cfg, path, (h, heads, kv, hd) = _head_for(root, target, "eagle3", seed)
    if (path / "config.json").exists():
        return path
    layers = cfg["num_hidden_layers"]
    tgt = _target_tensors(target)
    t = {f"midlayer.{k}": v for k, v in
         _layer("", h, heads, kv, hd, cfg["intermediate_size"], 2 * h, seed).items()}
    t["midlayer.hidden_norm.weight"] = torch.ones(h)
    fc = _small(h, 3 * h, seed=seed + 10)
    fc[:, 2 * h:] += torch.eye(h)            # the target's last hidden state
    t["fc.weight"] = fc
    t["norm.weight"] = tgt["model.norm.weight"].float().clone()
    t["lm_head.weight"] = tgt["lm_head.weight"].float().clone()
    return _write_head(path, t, cfg, architectures=["LlamaForCausalLMEagle3"],
                       draft_vocab_size=cfg["vocab_size"], target_hidden_size=h,
                       tie_word_embeddings=False,
                       eagle_aux_hidden_state_layer_ids=[0, layers // 2, layers])


def make_eagle(root: Path, target: Path, *, seed: int = 0) -> Path:
    """An EAGLE (v1) head for the Llama ``target``, as EAGLE-1 checkpoints
    ship: a ``LlamaForCausalLM`` config with one layer (no input norm: vLLM
    drops it), ``fc`` over [token embedding | the target's last hidden
    state], no embedding or LM head of its own (vLLM lends the target's).
    ``fc`` picks the hidden state."""
    import torch

    cfg, path, (h, heads, kv, hd) = _head_for(root, target, "eagle", seed)
    if (path / "config.json").exists():
        return path
    t = _layer("layers.0.", h, heads, kv, hd, cfg["intermediate_size"], h, seed + 50)
    del t["layers.0.input_layernorm.weight"]
    fc = _small(h, 2 * h, seed=seed + 60)
    fc[:, h:] += torch.eye(h)
    t["fc.weight"] = fc
    return _write_head(path, t, cfg, architectures=["LlamaForCausalLM"])


def _head_for(root: Path, target: Path, kind: str, seed: int):
    """The Llama ``target``'s config, the ``kind`` head's folder, and the
    attention shapes the head copies (hidden, heads, KV heads, head dim)."""
    cfg = json.loads((target / "config.json").read_text())
    shapes = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
              cfg["head_dim"])
    return cfg, Path(root) / f"{kind}-{target.name}-s{seed}", shapes


def _write_head(path: Path, tensors: dict, target_cfg: dict, **fields) -> Path:
    """A one-layer drafter checkpoint: ``tensors`` in the target's dtype, a
    config of the target's shapes with ``fields``."""
    import torch
    from safetensors.torch import save_file

    cfg = target_cfg
    dtype = getattr(torch, cfg.get("torch_dtype") or cfg.get("dtype") or "float32")
    tmp = path.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(dtype).contiguous() for k, v in tensors.items()},
              tmp / "model.safetensors")
    head = {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                "num_attention_heads", "num_key_value_heads", "head_dim",
                                "max_position_embeddings", "rms_norm_eps", "rope_theta",
                                "bos_token_id", "eos_token_id") if k in cfg}
    head.update(model_type="llama", num_hidden_layers=1,
                torch_dtype=cfg.get("torch_dtype", "float32"), **fields)
    (tmp / "config.json").write_text(json.dumps(head, indent=1))
    tmp.rename(path)
    return path


def make_mimo(root: Path, *, seed: int = 0) -> Path:
    """A MiMo checkpoint (``MiMoForCausalLM``: a Qwen2 decoder, 8 q / 2 KV
    heads of 32, plus one MTP layer, ``model.mtp_layers.0.*``), served as the
    target and, with ``method: mtp``, as its own drafter."""
    import torch

    path = Path(root) / f"mimo-mtp1-s{seed}"
    if (path / "config.json").exists():
        return path
    # (vLLM's Qwen2 takes head_dim = hidden / heads: 32, which CPU attention runs.)
    base = make_model(root, "qwen2", hidden=256, seed=seed)
    cfg = json.loads((base / "config.json").read_text())
    h, heads, kv, hd = (cfg["hidden_size"], cfg["num_attention_heads"],
                        cfg["num_key_value_heads"], cfg["head_dim"])
    p = "model.mtp_layers.0."
    t = _layer(p, h, heads, kv, hd, cfg["intermediate_size"], h, seed + 20, bias=True)
    proj = _small(h, 2 * h, seed=seed + 30)
    proj[:, :h] += torch.eye(h)              # the target's hidden state, not the token
    t[p + "input_proj.weight"] = proj
    for n in ("token_layernorm", "hidden_layernorm"):
        t[p + f"{n}.weight"] = torch.ones(h)
    weights = _target_tensors(base)
    t[p + "final_layernorm.weight"] = weights["model.norm.weight"].float().clone()
    cfg.update(architectures=["MiMoForCausalLM"], num_nextn_predict_layers=1)
    return _with_extra_layer(path, base, weights, t, cfg)



def make_qwen3_next_mtp(root: Path, target: Path) -> Path:
    """``target`` (a Qwen3-Next checkpoint of ``models``) with the MTP layer
    Qwen3-Next ships (``mtp.*``: a gated full-attention MoE decoder layer
    behind ``fc``), served with ``method: mtp``.  The layer is a copy of the
    target's last full-attention layer, so its shapes and MoE are the
    target's own; ``fc`` picks the target's hidden state."""
    import torch

    path = Path(root) / f"{target.name}-mtp1"
    if (path / "config.json").exists():
        return path
    cfg = json.loads((target / "config.json").read_text())
    h = cfg["hidden_size"]
    full = max(i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention")
    weights = _target_tensors(target)
    src = f"model.layers.{full}."
    t = {"mtp.layers.0." + k[len(src):]: v.clone() for k, v in weights.items()
         if k.startswith(src)}
    fc = _small(h, 2 * h, seed=40)
    fc[:, h:] += torch.eye(h)                # [embedding | hidden]: the hidden state
    t["mtp.fc.weight"] = fc
    t["mtp.norm.weight"] = weights["model.norm.weight"].clone()
    for n in ("pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        t[f"mtp.{n}.weight"] = torch.zeros(h)   # Qwen3-Next's norms scale by 1 + weight
    cfg["num_nextn_predict_layers"] = 1
    return _with_extra_layer(path, target, weights, t, cfg)


def make_deepseek_mtp(root: Path, target: Path) -> Path:
    """``target`` (a DeepSeek-V3 checkpoint of ``models``) with the MTP layer
    DeepSeek-V3 ships (``model.layers.<L>.*``: ``enorm``, ``hnorm``,
    ``eh_proj`` and ``shared_head`` around a decoder layer: MLA and MoE),
    served with ``method: mtp``.  The layer is a copy of the target's last
    one, so its shapes and MoE are the target's own, its outputs scaled down
    and ``eh_proj`` picking the next token's embedding, so that some drafts
    of this random model are accepted."""
    import torch

    path = Path(root) / f"{target.name}-mtp1"
    if (path / "config.json").exists():
        return path
    cfg = json.loads((target / "config.json").read_text())
    h, last = cfg["hidden_size"], cfg["num_hidden_layers"]
    weights = _target_tensors(target)
    src, p = f"model.layers.{last - 1}.", f"model.layers.{last}."
    t = {p + k[len(src):]: v.clone() for k, v in weights.items() if k.startswith(src)}
    eh = _small(h, 2 * h, seed=40)
    eh[:, :h] += torch.eye(h)                # [embedding | hidden]: the embedding
    t[p + "eh_proj.weight"] = eh
    for k in [k for k in t if k.endswith(("o_proj.weight", "down_proj.weight"))]:
        t[k] = t[k] * 0.05
    t[p + "enorm.weight"] = torch.ones(h)
    t[p + "hnorm.weight"] = torch.ones(h)
    t[p + "shared_head.norm.weight"] = weights["model.norm.weight"].clone()
    t[p + "shared_head.head.weight"] = weights["lm_head.weight"].clone()
    cfg["num_nextn_predict_layers"] = 1
    return _with_extra_layer(path, target, weights, t, cfg)
