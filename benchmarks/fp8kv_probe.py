#!/usr/bin/env python3
"""Do vLLM's FP8 KV-cache kernels give the same bits when the query, keys and
values are column views of one packed buffer, as the Ulysses exchange hands
them to the attention layer, as when they are contiguous, and when only the
values are a view, as plain TP hands them?  Asked of the kernels alone, on
one GPU, before any engine: the cache write (``reshape_and_cache_flash``,
per-head scales), the query's static FP8 quantization (``QuantFP8``, per
KV-head groups, eager and compiled) and FlashAttention's FP8 path with
per-head descales; each result is also held against a float32 attention over
the dequantized cache.

    python3 -m benchmarks.fp8kv_probe [--json OUT] [--md OUT]

Exit status 1 when either layout's result differs from the contiguous one's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

N, HEADS, KV_HEADS, HEAD, BLOCK = 300, 8, 2, 128, 16


def _attention_ref(q, k, v):
    """Causal float32 attention, [N, H, D] queries over [N, KV, D] keys and values."""
    import torch

    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = torch.einsum("nhd,mhd->hnm", q, k) * q.shape[-1] ** -0.5
    s = s.masked_fill(torch.ones_like(s[0], dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("hnm,mhd->nhd", s.softmax(-1), v)


def run() -> list[dict]:
    import torch
    from vllm import _custom_ops as ops
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape
    from vllm.platforms import current_platform
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    fp8 = current_platform.fp8_dtype()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    # the exchange's output: one row a token, the q, k and v columns side by side
    packed = torch.randn(N, (HEADS + 2 * KV_HEADS) * HEAD, device=dev, dtype=torch.bfloat16)
    views = packed.split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
    # plain TP's: q and k fresh from the rotary embedding, v a column view of the QKV output
    inputs = {"contiguous": [t.contiguous() for t in views], "column views": list(views),
              "TP's (v a view)": [views[0].contiguous(), views[1].contiguous(), views[2]]}
    k_scale = torch.tensor([0.01 * 2 ** h for h in range(KV_HEADS)], device=dev)
    v_scale = k_scale * 0.5
    q_scale = torch.ones(KV_HEADS, device=dev)
    blocks = -(-N // BLOCK)
    block_table = torch.arange(blocks, device=dev, dtype=torch.int32)[None]
    cu_q = torch.tensor([0, N], device=dev, dtype=torch.int32)
    seqused = torch.tensor([N], device=dev, dtype=torch.int32)

    with set_current_vllm_config(VllmConfig()):
        quant = QuantFP8(static=True, group_shape=GroupShape(-1, HEAD * HEADS // KV_HEADS))
    quants = {"native": lambda x: quant.forward_native(x, q_scale)[0],
              "cuda": lambda x: quant.forward_cuda(x, q_scale)[0]}
    quants["compiled native"] = torch.compile(quants["native"], dynamic=False)

    rows, outs = [], {}
    for how, (q, k, v) in inputs.items():
        # vLLM's FlashAttention cache: [blocks, KV heads, block, 2*D], K then V per head
        kv = torch.zeros(blocks, KV_HEADS, BLOCK, 2 * HEAD, device=dev, dtype=torch.uint8)
        k_cache, v_cache = kv.transpose(1, 2).split(HEAD, dim=-1)
        ops.reshape_and_cache_flash(k.view(N, KV_HEADS, HEAD), v.view(N, KV_HEADS, HEAD),
                                    k_cache, v_cache, torch.arange(N, device=dev), "fp8",
                                    k_scale, v_scale)
        qs, errors = {}, {}
        for name, f in quants.items():
            try:
                qs[name] = f(q)
            except Exception as e:  # noqa: BLE001 -- a kernel that refuses the layout is a finding
                errors[f"q {name}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        out = flash_attn_varlen_func(
            q=qs["native"].view(N, HEADS, HEAD), k=k_cache.view(fp8), v=v_cache.view(fp8),
            max_seqlen_q=N, cu_seqlens_q=cu_q, max_seqlen_k=N, seqused_k=seqused,
            softmax_scale=HEAD ** -0.5, causal=True, block_table=block_table, fa_version=3,
            q_descale=q_scale.expand(1, KV_HEADS), k_descale=k_scale.expand(1, KV_HEADS),
            v_descale=v_scale.expand(1, KV_HEADS))
        torch.cuda.synchronize()
        k_deq = k_cache.view(fp8).float().reshape(-1, KV_HEADS, HEAD)[:N] * k_scale[:, None]
        v_deq = v_cache.view(fp8).float().reshape(-1, KV_HEADS, HEAD)[:N] * v_scale[:, None]
        ref = _attention_ref(qs["native"].float().view(N, HEADS, HEAD), k_deq, v_deq)
        outs[how] = dict(kv=kv, out=out, **{f"q {n}": t for n, t in qs.items()})
        rows.append({"input": how, "q strides": list(q.stride()), "k strides": list(k.stride()),
                     **errors,
                     "FA3 vs float32 over the cache (max |d|)":
                         round(float((out.float() - ref).abs().max()), 5),
                     "cache vs keys (max |d| / max |k|)": round(float(
                         (k_deq - k.float().view(N, KV_HEADS, HEAD)).abs().max()
                         / k.float().abs().max()), 4)})
    def bits(t):
        return t.view(torch.uint8) if t.dtype == fp8 else t

    a = outs["contiguous"]
    for how in ("column views", "TP's (v a view)"):
        b = outs[how]
        rows.append({"input": f"{how} vs contiguous",
                     **{f"same {name}": bool(name in b and torch.equal(bits(a[name]),
                                                                         bits(b[name])))
                        for name in a}})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    a = ap.parse_args()
    rows = run()
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    lines = [f"- {json.dumps(r)}" for r in rows]
    if a.md:
        a.md.write_text("# FP8 KV-cache kernels: column views vs contiguous\n\n"
                        + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(v for r in rows[-2:] for k, v in r.items() if k.startswith("same")) else 1


if __name__ == "__main__":
    sys.exit(main())
