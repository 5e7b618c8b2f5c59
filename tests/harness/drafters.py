"""Speculative drafters for the random targets of ``models`` (and of the GPU harness,
benchmarks/equivalence.py): EAGLE and EAGLE-3 heads, and checkpoints with one
multi-token-prediction (MTP) layer (MiMo's, Qwen3-Next's and Qwen3.5's, DeepSeek-V3's and
GLM-4.5's).

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

A drafter's random tensors come from a ``noise(i, *shape)`` (unit normals): ``seeded``
gives the i-th tensor a stream of its own (the tests' drafters), ``drawn`` one stream in
the order asked (the GPU harness's).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.models import make_model, staging


def seeded(seed: int):
    """Noise whose i-th tensor is drawn from ``seed + i``."""
    import torch

    return lambda i, *shape: torch.randn(*shape, generator=torch.Generator().manual_seed(seed + i))


def drawn(seed: int):
    """Noise drawn from one stream seeded once, in the order the tensors are asked for."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return lambda i, *shape: torch.randn(*shape, generator=gen)


def tensors(ckpt: Path) -> dict:
    """Every tensor of a checkpoint, by name."""
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(ckpt).glob("*.safetensors")):
        out.update(load_file(f))
    return out


def layer(prefix: str, cfg: dict, qkv_in: int, noise, *, std: float = 0.02, first: int = 0,
          bias: bool = False) -> dict:
    """A Llama-style decoder layer of ``cfg``'s shapes, its q/k/v projections over
    ``qkv_in`` inputs: the seven matrices noise ``first`` .. ``first + 6`` times ``std``
    (Qwen2's q/k/v biases: ``first + 7``), its norms ones."""
    import torch

    h, heads, kv, hd = (cfg["hidden_size"], cfg["num_attention_heads"],
                        cfg["num_key_value_heads"], cfg["head_dim"])
    inter = cfg["intermediate_size"]
    shapes = {"self_attn.q_proj": (heads * hd, qkv_in), "self_attn.k_proj": (kv * hd, qkv_in),
              "self_attn.v_proj": (kv * hd, qkv_in), "self_attn.o_proj": (h, heads * hd),
              "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h), "mlp.down_proj": (h, inter)}
    t = {f"{prefix}{name}.weight": noise(first + i, *shape) * std
         for i, (name, shape) in enumerate(shapes.items())}
    for n in ("input_layernorm", "post_attention_layernorm"):
        t[f"{prefix}{n}.weight"] = torch.ones(h)
    if bias:
        for n, rows in (("q", heads), ("k", kv), ("v", kv)):
            t[f"{prefix}self_attn.{n}_proj.bias"] = noise(first + 7, rows * hd) * std
    return t


def picks(m, at: int):
    """``m`` (hidden x inputs) plus the identity on the inputs from column ``at``: the
    drafter passes that part of what it is given (the target's hidden state, or the
    token's embedding)."""
    import torch

    m[:, at:at + m.shape[0]] += torch.eye(m.shape[0])
    return m


def quiet(t: dict, scale: float) -> dict:
    """A copied layer's tensors with its outputs (o_proj, down_proj) scaled by ``scale``."""
    if scale == 1:
        return t
    return {k: v * scale if k.endswith(("o_proj.weight", "down_proj.weight")) else v
            for k, v in t.items()}


def write_head(path: Path, tensors: dict, target_cfg: dict, architectures: list[str],
               **fields) -> Path:
    """A one-layer drafter checkpoint at ``path``: ``tensors`` in the target's dtype, a
    Llama config of the target's shapes and rope with ``architectures`` and ``fields``."""
    import torch
    from safetensors.torch import save_file

    cfg = target_cfg
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    tmp = staging(path)
    save_file({k: v.to(getattr(torch, dtype)).contiguous() for k, v in tensors.items()},
              tmp / "model.safetensors", metadata={"format": "pt"})
    head = {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                "num_attention_heads", "num_key_value_heads", "head_dim",
                                "max_position_embeddings", "rms_norm_eps", "rope_theta",
                                "rope_scaling", "rope_parameters", "bos_token_id",
                                "eos_token_id", "hidden_act") if k in cfg}
    head.update(model_type="llama", architectures=architectures, num_hidden_layers=1,
                torch_dtype=dtype, **fields)
    (tmp / "config.json").write_text(json.dumps(head, indent=1))
    tmp.rename(path)
    return path


def write_mtp(path: Path, target: Path, weights: dict, extra: dict, cfg: dict) -> Path:
    """``target``'s checkpoint (its ``weights``, its other files but the config) plus the
    ``extra`` tensors, all in the dtype of the target's LM head, and ``cfg`` at ``path``: how
    MTP checkpoints ship."""
    from safetensors.torch import save_file

    tmp = staging(path)
    for f in target.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name not in (
                "config.json", "model.safetensors.index.json"):
            shutil.copy(f, tmp / f.name)
    dtype = weights["lm_head.weight"].dtype
    save_file({k: v.to(dtype).contiguous() for k, v in {**weights, **extra}.items()},
              tmp / "model.safetensors", metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    tmp.rename(path)
    return path


def write_eagle3(path: Path, target: Path, noise, *, std: float = 0.02,
                 fc_std: float = 0.02) -> Path:
    """An EAGLE-3 head at ``path`` (kept if there) for the Llama ``target``, as EAGLE-3
    checkpoints ship for Llama 3.1 (``LlamaForCausalLMEagle3``: one layer over [embedding |
    fc(hidden states)], no embedding of its own: vLLM lends it the target's); it reads the
    target's hidden states after the embedding, its middle layer and its last one.  ``fc``
    (noise times ``fc_std``) picks the last; the layer's matrices are noise times ``std``."""
    import torch

    if (path / "config.json").exists():
        return path
    cfg = json.loads((target / "config.json").read_text())
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    weights = tensors(target)
    t = {f"midlayer.{k}": v for k, v in layer("", cfg, 2 * h, noise, std=std).items()}
    t["midlayer.hidden_norm.weight"] = torch.ones(h)
    t["fc.weight"] = picks(noise(10, h, 3 * h) * fc_std, 2 * h)
    t["norm.weight"] = weights["model.norm.weight"].clone()
    t["lm_head.weight"] = weights["lm_head.weight"].clone()
    return write_head(path, t, cfg, ["LlamaForCausalLMEagle3"], tie_word_embeddings=False,
                      draft_vocab_size=cfg["vocab_size"], target_hidden_size=h,
                      eagle_aux_hidden_state_layer_ids=[0, layers // 2, layers])


def make_eagle3(root: Path, target: Path, *, seed: int = 0) -> Path:
    """``write_eagle3`` for the Llama ``target`` under ``root``: with ``models``' two
    layers it reads the hidden states after the embedding and each of them
    (``eagle_aux_hidden_state_layer_ids`` 0, 1, 2)."""
    return write_eagle3(Path(root) / f"eagle3-{target.name}-s{seed}", target, seeded(seed))


def make_eagle(root: Path, target: Path, *, seed: int = 0) -> Path:
    """An EAGLE (v1) head for the Llama ``target``, as EAGLE-1 checkpoints
    ship: a ``LlamaForCausalLM`` config with one layer (no input norm: vLLM
    drops it), ``fc`` over [token embedding | the target's last hidden
    state], no embedding or LM head of its own (vLLM lends the target's).
    ``fc`` picks the hidden state."""
    path = Path(root) / f"eagle-{target.name}-s{seed}"
    if (path / "config.json").exists():
        return path
    cfg = json.loads((target / "config.json").read_text())
    h, noise = cfg["hidden_size"], seeded(seed)
    t = layer("layers.0.", cfg, h, noise, first=50)
    del t["layers.0.input_layernorm.weight"]
    t["fc.weight"] = picks(noise(60, h, 2 * h) * 0.02, h)
    return write_head(path, t, cfg, ["LlamaForCausalLM"])


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
    h, noise, p = cfg["hidden_size"], seeded(seed), "model.mtp_layers.0."
    t = layer(p, cfg, h, noise, first=20, bias=True)
    # the target's hidden state, not the token
    t[p + "input_proj.weight"] = picks(noise(30, h, 2 * h) * 0.02, 0)
    for n in ("token_layernorm", "hidden_layernorm"):
        t[p + f"{n}.weight"] = torch.ones(h)
    weights = tensors(base)
    t[p + "final_layernorm.weight"] = weights["model.norm.weight"].clone()
    cfg.update(architectures=["MiMoForCausalLM"], num_nextn_predict_layers=1)
    return write_mtp(path, base, weights, t, cfg)


def make_mimo_config_mtp2(root: Path) -> Path:
    """``make_mimo``'s config with two MTP layers (``num_nextn_predict_layers``
    2, vLLM's ``n_predict``), config only: with ``num_speculative_tokens`` >= 2
    vLLM 0.34 picks its multi-module MTP speculator for it, which the config
    tests see refused under SP (no weights are read there)."""
    path = Path(root) / "mimo-mtp2-config"
    if (path / "config.json").exists():
        return path
    cfg = json.loads((make_mimo(root) / "config.json").read_text())
    cfg.update(num_nextn_predict_layers=2)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    return path


def write_qwen3_next_mtp(path: Path, target: Path, noise, *, fc_std: float = 0.02,
                         scale: float = 1.0) -> Path:
    """``target`` (a Qwen3-Next checkpoint, or a Qwen3.5 one: its multimodal class, the
    decoder under ``model.language_model``) with the MTP layer both ship (``mtp.*``: a gated
    full-attention decoder layer behind ``fc``), at ``path`` (kept if there), served with
    ``method: mtp``.  The layer is a copy of the target's last full-attention layer, so its
    shapes and MLP or MoE are the target's own, its outputs times ``scale``; ``fc`` (noise
    times ``fc_std``) picks the target's hidden state."""
    import torch

    if (path / "config.json").exists():
        return path
    cfg = json.loads((target / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    decoder = "model.language_model." if "text_config" in cfg else "model."
    h = text["hidden_size"]
    full = max(i for i, t in enumerate(text["layer_types"]) if t == "full_attention")
    weights = tensors(target)
    src = f"{decoder}layers.{full}."
    t = quiet({"mtp.layers.0." + k[len(src):]: v.clone() for k, v in weights.items()
               if k.startswith(src)}, scale)
    t["mtp.fc.weight"] = picks(noise(40, h, 2 * h) * fc_std, h)   # [embedding | hidden]
    t["mtp.norm.weight"] = weights[decoder + "norm.weight"].clone()
    for n in ("pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        t[f"mtp.{n}.weight"] = torch.zeros(h)   # these norms scale by 1 + weight
    # (Qwen3.5 counts its MTP layers in mtp_num_hidden_layers, Qwen3-Next in
    # num_nextn_predict_layers.)
    text["mtp_num_hidden_layers" if text is not cfg else "num_nextn_predict_layers"] = 1
    return write_mtp(path, target, weights, t, cfg)


def make_qwen3_next_mtp(root: Path, target: Path) -> Path:
    """``write_qwen3_next_mtp`` for a Qwen3-Next checkpoint of ``models``."""
    return write_qwen3_next_mtp(Path(root) / f"{target.name}-mtp1", target, seeded(0))


def write_deepseek_mtp(path: Path, target: Path, noise, *, fc_std: float = 0.02,
                       scale: float = 0.05, hidden: bool = False) -> Path:
    """``target`` (a DeepSeek-V3 or GLM-4.5 checkpoint) with the MTP layer both ship
    (``model.layers.<L>.*``: ``enorm``, ``hnorm``, ``eh_proj`` and ``shared_head`` around a
    decoder layer: MLA or GQA, and MoE), at ``path`` (kept if there), served with ``method:
    mtp``.  The layer is a copy of the target's last one, so its shapes and MoE are the
    target's own, its outputs times ``scale``; ``eh_proj`` (noise times ``fc_std``) picks
    the next token's embedding (``hidden``: the target's hidden state) out of [embedding |
    hidden]."""
    import torch

    if (path / "config.json").exists():
        return path
    cfg = json.loads((target / "config.json").read_text())
    h, last = cfg["hidden_size"], cfg["num_hidden_layers"]
    weights = tensors(target)
    src, p = f"model.layers.{last - 1}.", f"model.layers.{last}."
    t = quiet({p + k[len(src):]: v.clone() for k, v in weights.items() if k.startswith(src)},
              scale)
    t[p + "eh_proj.weight"] = picks(noise(40, h, 2 * h) * fc_std, h if hidden else 0)
    t[p + "enorm.weight"] = torch.ones(h)
    t[p + "hnorm.weight"] = torch.ones(h)
    t[p + "shared_head.norm.weight"] = weights["model.norm.weight"].clone()
    t[p + "shared_head.head.weight"] = weights["lm_head.weight"].clone()
    cfg["num_nextn_predict_layers"] = 1
    return write_mtp(path, target, weights, t, cfg)


def make_qwen3_5_mtp(root: Path, target: Path) -> Path:
    """``write_qwen3_next_mtp`` for a Qwen3.5 checkpoint of ``models``
    (``make_vl_model(..., "qwen3_5_vl")``), over a copy of it that repeats itself: its LM
    head its token embedding, the embedding doubled, so that the current token wins about
    half the steps (as made, this random model repeated no token and no draft was
    accepted).  The layer is quiet (``fc`` noise of 1e-4, outputs times 0.02), so that it
    predicts what the target does where it repeats."""
    path = Path(root) / f"{target.name}-mtp1"
    if (path / "config.json").exists():
        return path
    repeating = Path(root) / f"{target.name}-repeat"
    if not (repeating / "config.json").exists():
        weights = tensors(target)
        emb = weights["model.language_model.embed_tokens.weight"]
        weights["lm_head.weight"] = emb.clone()
        weights["model.language_model.embed_tokens.weight"] = emb * 2
        write_mtp(repeating, target, weights, {},
                  json.loads((target / "config.json").read_text()))
    return write_qwen3_next_mtp(path, repeating, seeded(0), fc_std=1e-4, scale=0.02)


def make_deepseek_mtp(root: Path, target: Path) -> Path:
    """``write_deepseek_mtp`` for a DeepSeek-V3 checkpoint of ``models``: its ``eh_proj``
    picks the next token's embedding, so that some drafts of this random model are
    accepted."""
    return write_deepseek_mtp(Path(root) / f"{target.name}-mtp1", target, seeded(0))
