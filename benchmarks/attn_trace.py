#!/usr/bin/env python3
"""Where does an SP layout's attention first depart from TP=1's?  One
attention layer, one prefill step, every rank: what the backend was handed
(query, keys, values, the step's metadata), what the cache holds for the
step's tokens afterwards, and what it wrote to the output.  Then each rank's
heads are held against the same heads of TP=1's dump, bit for bit.

A GPU diagnostic for the one-GPU tier (equivalence.py ``EQ_TRACE_DIR``): on
each worker ``install`` wraps the layer's ``impl.forward``; the first call
outside graph capture with at least ``min_tokens`` tokens is saved to
``<dir>/<layout>/rank<R>.pt`` (tensors in their own bytes: FP8 as uint8).

    python3 -m benchmarks.attn_trace compare TRACE_DIR [--ref tp1] [--md OUT] [--json OUT]

A rank's heads are chunk ``r`` of ``n`` where (r, n) is the plain TP over
TP*SP whose heads it attends with (``ulysses.attention_head_shard``), so
TP=2's and SP=2's dumps read the same way.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TENSORS = ("query", "key", "value", "cache_k", "cache_v", "output")
META = ("query_start_loc", "seq_lens", "slot_mapping", "max_query_len", "max_seq_len",
        "scheduler_metadata")


def _head_shard() -> tuple[int, int]:
    try:
        from vllm.distributed.ulysses import attention_head_shard

        return attention_head_shard()
    except Exception:          # a wheel without SP
        from vllm.distributed.parallel_state import get_tp_group

        tp = get_tp_group()
        return tp.rank_in_group, tp.world_size


def _own_bytes(t):
    """A CPU copy keeping the exact bits (FP8 as uint8, its dtype beside it)."""
    import torch

    t = t.detach()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return {"bits": t.view(torch.uint8).cpu().clone(), "dtype": str(t.dtype)}
    return {"bits": t.cpu().clone(), "dtype": str(t.dtype)}


def install(worker, out_dir: str, layer: int = 0, min_tokens: int = 256) -> str:
    """On a worker: wrap the ``layer``-th decoder layer's attention backend so
    that its first eligible call is saved.  Returns the layer's name."""
    import torch

    model = worker.model_runner.model
    pat = re.compile(rf"(^|\.)layers\.{layer}\.")
    found = [m for m in model.modules()
             if getattr(m, "impl", None) is not None and hasattr(m, "layer_name")
             and pat.search(m.layer_name)]
    if not found:
        raise RuntimeError(f"no attention layer of decoder layer {layer}")
    attn = found[0]
    impl = attn.impl
    orig = impl.forward
    shard = _head_shard()
    path = Path(out_dir) / f"rank{torch.distributed.get_rank()}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = [False]

    def forward(lay, query, key, value, kv_cache, attn_metadata, *args, **kwargs):
        out = orig(lay, query, key, value, kv_cache, attn_metadata, *args, **kwargs)
        n = getattr(attn_metadata, "num_actual_tokens", 0)
        if done[0] or n < min_tokens or (query.is_cuda
                                          and torch.cuda.is_current_stream_capturing()):
            return out
        done[0] = True
        if query.is_cuda:
            torch.cuda.synchronize()
        output = kwargs.get("output", args[0] if args else out)
        rec = {"layer": attn.layer_name, "head_shard": shard, "n": n,
               "strides": {k: list(t.stride()) for k, t in
                           (("query", query), ("key", key), ("value", value))},
               "scales": {k: getattr(lay, f"_{k}_scale").flatten().tolist()
                          for k in ("q", "k", "v")}}
        for name, t in (("query", query), ("key", key), ("value", value), ("output", output)):
            rec[name] = _own_bytes(t[:n])
        if kv_cache.dim() == 4 and kv_cache.shape[-1] == 2 * impl.head_size:
            # FlashAttention's cache on 0.33: [blocks, KV heads, block, 2*D]
            slots = attn_metadata.slot_mapping[:n].long()
            blocks, offs = slots // kv_cache.shape[2], slots % kv_cache.shape[2]
            rows = kv_cache.transpose(1, 2)[blocks, offs]          # [n, KV heads, 2*D]
            if impl.kv_cache_dtype.startswith("fp8"):
                rows = rows.view(torch.float8_e4m3fn)
            k_rows, v_rows = rows.split(impl.head_size, dim=-1)
            rec["cache_k"], rec["cache_v"] = _own_bytes(k_rows), _own_bytes(v_rows)
        for name in META:
            v = getattr(attn_metadata, name, None)
            rec[name] = v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v
        torch.save(rec, path)
        return out

    impl.forward = forward
    return attn.layer_name


def _floats(rec: dict):
    import torch

    t = rec["bits"]
    if rec["dtype"].startswith("torch.float8"):
        t = t.view(getattr(torch, rec["dtype"].removeprefix("torch.")))
    return t.float()


def _heads(t, shard: tuple[int, int]):
    """The heads of TP=1's [n, H, D] tensor that shard (r, n) holds."""
    r, size = shard
    per = t.shape[1] // size
    return t[:, r * per:(r + 1) * per]


def _digest(t) -> str:
    """A short name for a metadata tensor's bytes: the same name, the same tensor."""
    import hashlib

    import torch

    if not isinstance(t, torch.Tensor):
        return str(t)
    raw = t.contiguous().view(-1).view(torch.uint8).numpy()
    return f"{list(t.shape)} {hashlib.sha1(raw).hexdigest()[:8]}"


def compare_one(ref: dict, got: dict) -> dict:
    import torch

    row = {"layer": got["layer"], "head_shard": list(got["head_shard"]), "n": got["n"],
           "strides": got["strides"]}
    n = min(ref["n"], got["n"])
    row["same step"] = (ref["n"] == got["n"] and all(
        torch.equal(ref[k], got[k]) for k in ("query_start_loc", "seq_lens")
        if isinstance(ref.get(k), torch.Tensor) and isinstance(got.get(k), torch.Tensor)))
    for name in TENSORS:
        if name not in ref or name not in got:
            row[name] = "not dumped"
            continue
        a, b = _floats(ref[name])[:n], _floats(got[name])[:n]
        a = _heads(a, got["head_shard"]).reshape(n, -1)
        b = b.reshape(n, -1)
        if a.shape != b.shape:
            row[name] = f"shapes differ: {list(a.shape)} vs {list(b.shape)}"
            continue
        bad = (a != b).any(dim=1)
        d = (a - b).abs()
        row[name] = {"equal": not bool(bad.any()), "rows differing": int(bad.sum()),
                     "first row differing": int(bad.nonzero()[0]) if bad.any() else None,
                     "max |d|": round(float(d.max()), 6), "mean |d|": round(float(d.mean()), 8)}
    row["scheduler_metadata"] = _digest(got.get("scheduler_metadata"))
    return row


def compare(trace_dir: Path, ref_layout: str = "tp1") -> tuple[list[dict], str]:
    """Every other layout's ranks against ``ref_layout``'s dump; and the
    reference's scheduler metadata, named as the rows name theirs."""
    import torch

    ref = torch.load(trace_dir / ref_layout / "rank0.pt", weights_only=False)
    rows = []
    for d in sorted(p for p in trace_dir.iterdir() if p.is_dir() and p.name != ref_layout):
        for f in sorted(d.glob("rank*.pt")):
            got = torch.load(f, weights_only=False)
            rows.append({"layout": d.name, "rank": f.stem, **compare_one(ref, got)})
    return rows, _digest(ref.get("scheduler_metadata"))


def to_md(rows: list[dict], ref_layout: str, ref_digest: str) -> str:
    out = [f"# Attention layer dumps against {ref_layout}'s, head for head", "",
           "| layout | rank | heads (r of n) | same step | " + " | ".join(TENSORS)
           + " | scheduler metadata |",
           "|---" * (5 + len(TENSORS)) + "|"]
    for r in rows:
        cells = []
        for name in TENSORS:
            v = r[name]
            cells.append(v if isinstance(v, str) else "equal" if v["equal"] else
                         f"{v['rows differing']}/{r['n']} rows, from {v['first row differing']}, "
                         f"max {v['max |d|']}")
        out.append(f"| {r['layout']} | {r['rank']} | {r['head_shard'][0]} of "
                   f"{r['head_shard'][1]} | {r['same step']} | " + " | ".join(cells)
                   + f" | {r['scheduler_metadata']} |")
    out += ["", f"{ref_layout}'s scheduler metadata: {ref_digest}"]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("trace_dir", type=Path)
    c.add_argument("--ref", default="tp1")
    c.add_argument("--md", type=Path)
    c.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows, ref_digest = compare(a.trace_dir, a.ref)
    md = to_md(rows, a.ref, ref_digest)
    print(md)
    if a.md:
        a.md.write_text(md)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    sys.exit(0 if rows else 1)


if __name__ == "__main__":
    main()
