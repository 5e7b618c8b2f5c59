#!/usr/bin/env python3
"""The GPU equivalence suite: every model family at every layout, against TP=1.

    python3 equivalence.py ckpt FAMILY DIR                write the seeded random checkpoint
    python3 equivalence.py engine FAMILY DIR LAYOUT OUT   one engine, one JSON
    python3 equivalence.py family FAMILY DIR OUTDIR L..   the layouts at once, one process each
    python3 equivalence.py report OUTDIR [--md FILE]      distances, bounds, pass/fail

Why this shape: bfloat16 on a GPU is never bit-exact across layouts (each
splits its sums differently), so a layout is held to the noise of upstream's
own splits: its mean prompt-logprob distance from TP=1 must be at most 1.5x
the larger of plain TP=2's and TP=4's (whichever ran) on the same prompts.
A crash, a hang (the caller's timeout) or a NaN fails the row.  Greedy
tokens against TP=1, and a second round's (prefix-cache hits) against the
first, are reported, not judged: on random weights the top two logits lie
close, and a near-tie rounds either way in another sum order (plain TP=2
keeps TP=1's 16 tokens on as few as 0 of 5 prompts on 4xH200).  Each layout runs at vLLM's
defaults for a user on GPUs (torch.compile, CUDA graphs, FlashInfer where
installed, the default GDN backend) unless the family's entry says eager.

The checkpoints are written with transformers' own classes from shapes
taken from the published config.json of each family (head dims, GQA ratio,
sliding windows, sinks, MoE routing), with fewer and narrower layers so that
every layout of a family runs at once on one host: the paths are the real
ones, the arithmetic smaller.  Weights are seeded normals (std 0.05):
loaded by every layout byte for byte, unlike ``--load-format dummy``, which
fills each rank's shard on its own.  Prompts are token ids (no tokenizer):
short, medium, and long ones that chunk (``max_num_batched_tokens``) and
outrun the sliding windows; a second round of the same prompts reads the
prefix cache.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Never NVLink multicast on these hosts (hostpaths.sh says why): FlashInfer's
# fused all-reduce takes the workspace vLLM falls back to without multicast.
os.environ.setdefault("VLLM_FLASHINFER_ALLREDUCE_BACKEND", "trtllm")
VOCAB = 32000
# family -> (transformers config class, model class, config kwargs, notes)
FAMILIES: dict[str, dict] = {
    # Llama-3.1-8B: head_dim 128, GQA 4:1, llama3 rope scaling.
    "llama": dict(cfg="LlamaConfig", cls="LlamaForCausalLM", kw=dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
        num_key_value_heads=4, head_dim=128, rope_theta=500000.0, max_position_embeddings=131072,
        rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"})),
    # Qwen3-30B-A3B: head_dim 128, QK norm, 128 experts top-8 (here 16 top-4).
    "qwen3_moe": dict(cfg="Qwen3MoeConfig", cls="Qwen3MoeForCausalLM", kw=dict(
        hidden_size=1024, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=16,
        num_key_value_heads=4, head_dim=128, num_experts=16, num_experts_per_tok=4,
        moe_intermediate_size=512, decoder_sparse_step=1, norm_topk_prob=True,
        rope_theta=1000000.0)),
    # gpt-oss-20b: head_dim 64, sinks, sliding 128 / full alternating, MoE
    # (32 experts top-4; here 8 top-2).  ONE KV head: fewer than TP*SP, the
    # case that crashed at start-up under Shift.
    "gpt_oss": dict(cfg="GptOssConfig", cls="GptOssForCausalLM", sinks=True, kw=dict(
        hidden_size=1024, intermediate_size=512, num_hidden_layers=4, num_attention_heads=16,
        num_key_value_heads=1, head_dim=64, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2,
        max_position_embeddings=131072,
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "truncate": False, "original_max_position_embeddings": 4096})),
    # Qwen3-Next-80B-A3B: Gated-DeltaNet (16 key / 32 value heads of 128) and
    # gated attention (head_dim 256) 3:1, MoE with a shared expert.
    "qwen3_next": dict(cfg="Qwen3NextConfig", cls="Qwen3NextForCausalLM", kw=dict(
        hidden_size=1024, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=256, num_experts=16, num_experts_per_tok=4,
        moe_intermediate_size=512, shared_expert_intermediate_size=512, decoder_sparse_step=1,
        norm_topk_prob=True, linear_num_key_heads=8, linear_num_value_heads=16,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"])),
    # Gemma 3 (text): head_dim 256, sliding 512 : global 5:1, QK norm.
    "gemma3": dict(cfg="Gemma3TextConfig", cls="Gemma3ForCausalLM", kw=dict(
        hidden_size=1152, intermediate_size=3072, num_hidden_layers=6, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256, sliding_window=512,
        layer_types=["sliding_attention"] * 5 + ["full_attention"])),
    # Llama 4 Scout (text): head_dim 128, QK norm, chunked local attention
    # (8192 there, 512 here, so the long prompts cross chunks) with a NoPE
    # global layer every fourth, MoE 16 experts top-1 with a shared expert.
    "llama4": dict(cfg="Llama4TextConfig", cls="Llama4ForCausalLM", kw=dict(
        hidden_size=1024, intermediate_size=1024, intermediate_size_mlp=2048,
        num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4, head_dim=128,
        num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=1,
        attention_chunk_size=512, no_rope_layers=[1, 1, 1, 0], use_qk_norm=True,
        layer_types=["chunked_attention"] * 3 + ["full_attention"], rope_theta=500000.0)),
    # GLM-4.5-Air: head_dim 128, partial rotary 0.5, a dense first layer,
    # grouped top-k MoE with a shared expert.
    "glm4_moe": dict(cfg="Glm4MoeConfig", cls="Glm4MoeForCausalLM", kw=dict(
        hidden_size=1024, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=16,
        num_key_value_heads=4, head_dim=128, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=1, moe_intermediate_size=512, first_k_dense_replace=1,
        partial_rotary_factor=0.5, use_qk_norm=True, n_group=1, topk_group=1,
        num_nextn_predict_layers=0)),
}
# layout -> (tensor_parallel_size, sequence_parallel_size, shift, GPUs)
LAYOUTS = {"tp1": (1, 1, False, 1), "tp2": (2, 1, False, 2), "sp2": (1, 2, False, 2),
           "shift": (1, 2, True, 2), "tp4": (4, 1, False, 4), "tp2sp2": (2, 2, False, 4),
           "tp2sp2_shift": (2, 2, True, 4)}
BOUNDS = ("tp2", "tp4")
# LAYOUT+SPEC: speculative decoding in that layout (CUDA graphs with the
# drafter), judged by its acceptance rate against TP=1's with the same
# drafter (within 5 points).  Repetitive prompts give n-gram lookup something
# to find; the target as its own draft model should accept nearly every draft.
SPECS = {"ngram": dict(method="ngram", num_speculative_tokens=3, prompt_lookup_max=3,
                       prompt_lookup_min=2),
         "draft": dict(method="draft_model", num_speculative_tokens=3)}
PROMPT_LENGTHS = (17, 300, 1500, 3000)
MAX_BATCHED = 1024          # the 1500- and 3000-token prompts prefill in chunks
GEN = 16


def make_ckpt(family: str, out: Path, seed: int = 0) -> None:
    import torch
    import transformers

    spec = FAMILIES[family]
    kw = dict(vocab_size=VOCAB, max_position_embeddings=8192, bos_token_id=1, eos_token_id=2,
              tie_word_embeddings=False)
    kw.update(spec["kw"])
    cfg = getattr(transformers, spec["cfg"])(**kw)
    torch.manual_seed(seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = getattr(transformers, spec["cls"])(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.05)
            elif name.endswith("sinks"):
                p.normal_(0.0, 2.0)
    tmp = out.with_suffix(".tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    meta = json.loads((tmp / "config.json").read_text())
    meta["torch_dtype"] = "bfloat16"
    (tmp / "config.json").write_text(json.dumps(meta, indent=1))
    tmp.rename(out)


def prompts(seed: int = 1, spec: str | None = None) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    out = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in PROMPT_LENGTHS]
    if spec:
        out += [[rng.randrange(3, VOCAB) for _ in range(k)] * (600 // k) for k in (3, 4, 5, 7)]
    out.append(out[-1][:2500] + [rng.randrange(3, VOCAB) for _ in range(100)])  # a shared prefix
    return out


def run_engine(family: str, ckpt: Path, layout: str, out: Path) -> None:
    from vllm import LLM, SamplingParams

    base, _, spec = layout.partition("+")
    tp, sp, shift, _ = LAYOUTS[base]
    kwargs = dict(model=str(ckpt), skip_tokenizer_init=True, tensor_parallel_size=tp,
                  max_model_len=4096, max_num_batched_tokens=MAX_BATCHED, seed=0,
                  gpu_memory_utilization=float(os.environ.get("EQ_GPU_UTIL", "0.15")),
                  kv_cache_memory_bytes=int(os.environ.get("EQ_KV_BYTES", 2 << 30)))
    if sp > 1:
        kwargs["sequence_parallel_size"] = sp
    if shift:
        kwargs["shift_parallel"] = True
    if FAMILIES[family].get("eager"):
        kwargs["enforce_eager"] = True
    if spec:
        kwargs["speculative_config"] = dict(SPECS[spec])
        kwargs["disable_log_stats"] = False      # the draft and accept counters
        if spec == "draft":
            kwargs["speculative_config"]["model"] = str(ckpt)
    t0 = time.time()
    llm = LLM(**kwargs)
    start_s = time.time() - t0
    cfg = llm.llm_engine.vllm_config
    pass_cfg = cfg.compilation_config.pass_config
    ps = prompts(spec=spec or None)
    inputs = [{"prompt_token_ids": p} for p in ps]
    gen = GEN * 4 if spec else GEN        # enough drafts to judge a rate by
    first = SamplingParams(max_tokens=gen, temperature=0.0, prompt_logprobs=0, logprobs=0,
                           detokenize=False)
    again = SamplingParams(max_tokens=gen, temperature=0.0, logprobs=0, detokenize=False)
    t0 = time.time()
    r1 = llm.generate(inputs, first, use_tqdm=False)
    r2 = llm.generate(inputs, again, use_tqdm=False)
    run_s = time.time() - t0

    def lp(entry, tok):
        return None if entry is None else float(entry[tok].logprob)

    rows = []
    for p, a, b in zip(ps, r1, r2):
        plp = [lp(e, t) for e, t in zip(a.prompt_logprobs, p)][1:]
        rows.append({"len": len(p), "prompt_lp": plp,
                     "tokens": list(a.outputs[0].token_ids),
                     "gen_lp": [lp(e, t) for e, t in
                                zip(a.outputs[0].logprobs, a.outputs[0].token_ids)],
                     "tokens_cached": list(b.outputs[0].token_ids),
                     "cached_tokens": b.num_cached_tokens})
    names = {"vllm:spec_decode_num_draft_tokens": "drafted",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    # (Only a speculative engine logs stats: get_metrics() asserts on any other.)
    counts = {names[m.name]: m.value for m in llm.get_metrics()
              if m.name in names} if spec else {}
    out.write_text(json.dumps({
        "family": family, "layout": layout, "spec": counts, "tp": tp, "sp": sp, "shift": shift,
        "start_s": round(start_s, 1), "run_s": round(run_s, 2),
        "enforce_eager": cfg.model_config.enforce_eager,
        "cudagraph_mode": str(cfg.compilation_config.cudagraph_mode),
        "compile_mode": str(cfg.compilation_config.mode),
        "fuse_allreduce_rms": bool(getattr(pass_cfg, "fuse_allreduce_rms", False)),
        "attention_backend": _attention_backend(llm),
        "rows": rows}))
    print(f"{family} {layout}: start {start_s:.0f} s, run {run_s:.1f} s -> {out}", flush=True)


def _attention_backend(llm) -> str:
    try:
        return str(llm.llm_engine.vllm_config.attention_config.backend)
    except Exception:  # noqa: BLE001 - informative only
        return "?"


def run_family(family: str, ckpt: Path, outdir: Path, layouts: list[str], timeout: int) -> int:
    """Every layout of a family at once (each its own process, GPUs shared):
    a family's engines mostly compile on the CPU, so together they take
    about as long as the slowest."""
    outdir.mkdir(parents=True, exist_ok=True)
    if not (ckpt / "config.json").exists():
        make_ckpt(family, ckpt)
    procs = {}
    for layout in layouts:
        out = outdir / f"{family}.{layout}.json"
        if out.exists() or out.with_suffix(".json.gz").exists():   # resumed from a results folder
            continue
        gpus = LAYOUTS[layout.partition("+")[0]][3]
        env = dict(os.environ)
        if gpus == 1:      # TP=1 beside the others, on the last GPU
            env["CUDA_VISIBLE_DEVICES"] = str(_gpu_count() - 1)
        log = open(outdir / f"{family}.{layout}.log", "w")
        procs[layout] = (subprocess.Popen(
            [sys.executable, __file__, "engine", family, str(ckpt), layout, str(out)],
            stdout=log, stderr=subprocess.STDOUT, env=env), log)
        time.sleep(float(os.environ.get("EQ_STAGGER_S", "5")))
    deadline = time.time() + timeout
    rc = 0
    for layout, (proc, log) in procs.items():
        try:
            proc.wait(max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            (outdir / f"{family}.{layout}.failed").write_text(f"hang: killed after {timeout} s\n")
        log.close()
        if proc.returncode:
            rc = 1
            tail = (outdir / f"{family}.{layout}.log").read_text().splitlines()[-40:]
            (outdir / f"{family}.{layout}.failed").write_text(
                f"exit {proc.returncode}\n" + "\n".join(tail) + "\n")
            print(f"{family} {layout}: FAILED (exit {proc.returncode})", flush=True)
    return rc


def _gpu_count() -> int:
    import torch
    return torch.cuda.device_count()


def _distance(a: dict, ref: dict) -> dict:
    diffs, nan = [], False
    for ra, rr in zip(a["rows"], ref["rows"]):
        for x, y in zip(ra["prompt_lp"], rr["prompt_lp"]):
            if x is None or y is None:
                continue
            if math.isnan(x) or math.isinf(x):
                nan = True
                continue
            diffs.append(abs(x - y))
    same = sum(ra["tokens"] == rr["tokens"] for ra, rr in zip(a["rows"], ref["rows"]))
    cached_same = sum(ra["tokens_cached"] == ra["tokens"] for ra in a["rows"])
    return {"mean": statistics.fmean(diffs) if diffs else float("nan"),
            "max": max(diffs) if diffs else float("nan"), "nan": nan, "greedy_same": same,
            "cached_same": cached_same, "n": len(a["rows"]),
            "cached_tokens": sum(r["cached_tokens"] or 0 for r in a["rows"])}


def _rate(r: dict) -> float:
    s = r.get("spec") or {}
    return s.get("accepted", 0) / s["drafted"] if s.get("drafted") else float("nan")


def _spec_row(lines: list[str], family: str, name: str, r: dict, ref: dict | None) -> bool:
    """A drafter's acceptance within 5 points of TP=1's with the same drafter."""
    nan = any(x is not None and not math.isfinite(x) for row in r["rows"] for x in row["prompt_lp"])
    if ref is None or name.startswith("tp1+"):
        lines.append(f"| {family} | {name} | acceptance {_rate(r):.3f} ({r['spec']}) | (reference) "
                     f"| | | | | {r['fuse_allreduce_rms']} | {r['start_s']} | |")
        return not nan
    ok = not nan and abs(_rate(r) - _rate(ref)) <= 0.05
    lines.append(f"| {family} | {name} | acceptance {_rate(r):.3f} vs TP=1's {_rate(ref):.3f} "
                 f"| ≤ 5 points | | | | | {r['fuse_allreduce_rms']} | {r['start_s']} "
                 f"| {'pass' if ok else '**FAIL**'} |")
    return ok


def report(outdir: Path, md: Path | None) -> int:
    runs: dict[str, dict[str, dict]] = {}
    for f in sorted([*outdir.glob("*.json"), *outdir.glob("*.json.gz")]):
        r = json.loads(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_text())
        runs.setdefault(r["family"], {})[r["layout"]] = r
    failed = {f.name.rsplit(".", 1)[0]: f.read_text().splitlines()[0]
              for f in outdir.glob("*.failed")}
    lines = ["| family | layout | mean \\|Δ logprob\\| vs TP=1 | bound (1.5 × max TP=2/TP=4) "
             "| max | greedy = TP=1 | 2nd round = 1st | prefix-cache tokens | fused AR+norm "
             "| start s | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    bad = 0
    for family in FAMILIES:
        lay = runs.get(family, {})
        names = sorted({*lay, *(k.split(".", 1)[1] for k in failed if k.startswith(family + "."))},
                       key=_order)
        ref = lay.get("tp1")
        bound_src = [_distance(lay[b], ref)["mean"] for b in BOUNDS if b in lay and ref]
        bound = 1.5 * max(bound_src) if bound_src else float("nan")
        for name in names:
            if f"{family}.{name}" in failed:
                bad += 1
                lines.append(f"| {family} | {name} | — | — | — | — | — | — | — | — | "
                             f"**FAIL**: {failed[f'{family}.{name}']} |")
                continue
            r = lay[name]
            if "+" in name:
                spec_ref = lay.get("tp1+" + name.partition("+")[2])
                bad += not _spec_row(lines, family, name, r, spec_ref)
                continue
            if name == "tp1" or ref is None:
                lines.append(f"| {family} | {name} | (reference) | | | | "
                             f"{sum(x['tokens_cached'] == x['tokens'] for x in r['rows'])}/"
                             f"{len(r['rows'])} | "
                             f"{sum(x['cached_tokens'] or 0 for x in r['rows'])} | "
                             f"{r['fuse_allreduce_rms']} | {r['start_s']} | |")
                continue
            d = _distance(r, ref)
            ok = not d["nan"] and (name in BOUNDS or d["mean"] <= bound)
            bad += not ok
            lines.append(
                f"| {family} | {name} | {d['mean']:.4f} | "
                f"{'' if name in BOUNDS else f'{bound:.4f}'} | "
                f"{d['max']:.3f} | {d['greedy_same']}/{d['n']} | {d['cached_same']}/{d['n']} | "
                f"{d['cached_tokens']} | {r['fuse_allreduce_rms']} | {r['start_s']} | "
                f"{'pass' if ok else '**FAIL**'}{' (NaN)' if d['nan'] else ''} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if md:
        md.write_text(text)
    return 1 if bad else 0


def _layout(name: str) -> str:
    base, plus, spec = name.partition("+")
    if base not in LAYOUTS or (plus and spec not in SPECS):
        raise argparse.ArgumentTypeError(
            f"{name}: a layout of {', '.join(LAYOUTS)}, optionally +{' or +'.join(SPECS)}")
    return name


def _order(name: str) -> tuple:
    base, _, spec = name.partition("+")
    return (spec, list(LAYOUTS).index(base))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("ckpt")
    c.add_argument("family", choices=FAMILIES)
    c.add_argument("dir", type=Path)
    e = sub.add_parser("engine")
    e.add_argument("family", choices=FAMILIES)
    e.add_argument("dir", type=Path)
    e.add_argument("layout", type=_layout)
    e.add_argument("out", type=Path)
    f = sub.add_parser("family")
    f.add_argument("family", choices=FAMILIES)
    f.add_argument("dir", type=Path)
    f.add_argument("outdir", type=Path)
    f.add_argument("layouts", nargs="+", type=_layout)
    f.add_argument("--timeout", type=int, default=600)
    r = sub.add_parser("report")
    r.add_argument("outdir", type=Path)
    r.add_argument("--md", type=Path)
    a = ap.parse_args()
    if a.cmd == "ckpt":
        make_ckpt(a.family, a.dir)
    elif a.cmd == "engine":
        run_engine(a.family, a.dir, a.layout, a.out)
    elif a.cmd == "family":
        sys.exit(run_family(a.family, a.dir, a.outdir, a.layouts, a.timeout))
    else:
        sys.exit(report(a.outdir, a.md))


if __name__ == "__main__":
    main()
