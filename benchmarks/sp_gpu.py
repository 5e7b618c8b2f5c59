#!/usr/bin/env python3
"""GPU evidence for the build and for Ulysses SP (run on the 2xH200 host).

    python3 sp_gpu.py ckpt DIR [--preset llama31_8b|tiny]   random checkpoint
    python3 sp_gpu.py engine DIR --tp N --sp M --out R.json  one layout
    python3 sp_gpu.py report R1.json R2.json ...             markdown tables
    python3 sp_gpu.py compare A.json B.json                  one pair, any two runs

Results may be gzipped (R.json.gz): the reference runs committed under
benchmarks/results/ are, to keep the tree that travels to the host small.
On the GPU host this runs as the plan benchmarks/plans/two-gpu-equivalence.sh.

Why a random *checkpoint* and not ``load_format="dummy"``: vLLM's dummy
loader fills each rank's weight shard independently, so TP=1 and TP=2 would
run different models.  Here every layout loads the same bytes (bf16, seeded
normal weights: std 0.02, embeddings std 1, norms 1), so greedy tokens and logprobs are
comparable.  No tokenizer: prompts are token ids (``skip_tokenizer_init``).

Each layout runs in its own process with the default engine settings of a
user on GPUs: torch.compile + CUDA graphs, the V2 model runner for Llama.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "attention_bias": False, "mlp_bias": False, "bos_token_id": 128000,
    "eos_token_id": 128001, "torch_dtype": "bfloat16", "initializer_range": 0.02,
}
TINY = dict(LLAMA31_8B, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, head_dim=32, vocab_size=1024,
            max_position_embeddings=8192, torch_dtype="float32",
            rope_scaling=None, bos_token_id=1, eos_token_id=2)
PRESETS = {"llama31_8b": LLAMA31_8B, "tiny": TINY}

# (name, length, prompt logprobs?) -- teacher-forced top-1 agreement needs
# prompt logprobs; for 16k tokens their [16k, vocab] float32 logits are
# too large to be worth it, so that prompt is compared by greedy tokens.
CHECK_PROMPTS = {"llama31_8b": [("p17", 17, True), ("p4000", 4000, True), ("p16000", 16000, False)],
                 "tiny": [("p17", 17, True), ("p400", 400, True), ("p1600", 1600, False)]}
TIMED = {"llama31_8b": [8192, 32768], "tiny": [1024, 2048]}
GEN_TOKENS = 16


def make_ckpt(out: Path, preset: str, seed: int = 0) -> None:
    import torch
    from safetensors.torch import save_file

    cfg = PRESETS[preset]
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, cfg["torch_dtype"])
    gen = torch.Generator(device=dev).manual_seed(seed)
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(dtype).cpu()

    index = {}
    # Embeddings of std 1 keep the residual stream dominated by the token
    # itself: a well-conditioned random model whose argmax is not flipped by
    # bf16 rounding differences between layouts (std 0.02 everywhere gave
    # ~90% top-1 agreement between TP=1 and TP=2 in our first run).
    save_file({"model.embed_tokens.weight": rnd(v, h, std=1.0),
               "model.norm.weight": torch.ones(h, dtype=dtype),
               "lm_head.weight": rnd(v, h)}, out / "embed.safetensors")
    for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        index[name] = "embed.safetensors"
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        t = {p + "self_attn.q_proj.weight": rnd(nh * d, h),
             p + "self_attn.k_proj.weight": rnd(nkv * d, h),
             p + "self_attn.v_proj.weight": rnd(nkv * d, h),
             p + "self_attn.o_proj.weight": rnd(h, nh * d),
             p + "mlp.gate_proj.weight": rnd(i, h), p + "mlp.up_proj.weight": rnd(i, h),
             p + "mlp.down_proj.weight": rnd(h, i),
             p + "input_layernorm.weight": torch.ones(h, dtype=dtype),
             p + "post_attention_layernorm.weight": torch.ones(h, dtype=dtype)}
        fname = f"layer{layer:03d}.safetensors"
        save_file(t, out / fname)
        index.update({k: fname for k in t})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {},
                                                                  "weight_map": index}))
    print(f"checkpoint {preset} written to {out}")


def prompt(length: int, seed: int, vocab: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(100, vocab - 100) for _ in range(length)]


def engine(ckpt: Path, tp: int, sp: int, out: Path, cpu: bool, eager: bool = False) -> None:
    import vllm
    from vllm import LLM, SamplingParams

    cfg = json.loads((ckpt / "config.json").read_text())
    preset = "tiny" if cfg["hidden_size"] == TINY["hidden_size"] else "llama31_8b"
    vocab = cfg["vocab_size"]
    timed = TIMED[preset]
    kwargs = dict(tensor_parallel_size=tp, skip_tokenizer_init=True, seed=0,
                  max_model_len=max(timed) + 256, max_num_batched_tokens=max(timed),
                  enable_prefix_caching=False)
    if sp > 1:
        kwargs["sequence_parallel_size"] = sp
    if os.environ.get("SHIFT"):      # Shift parallelism with this threshold
        kwargs.update(shift_parallel=True, shift_parallel_threshold=int(os.environ["SHIFT"]))
    if cpu:
        kwargs.update(enforce_eager=True, dtype="float32")
    else:
        kwargs.update(gpu_memory_utilization=0.85, enforce_eager=eager)
    t0 = time.time()
    llm = LLM(str(ckpt), **kwargs)
    start_s = time.time() - t0
    vc = llm.llm_engine.vllm_config
    info = {"layout": f"TP={tp} SP={sp}" + os.environ.get("LAYOUT_SUFFIX", ""),
            "tp": tp, "sp": sp, "vllm": vllm.__version__,
            "engine_start_s": round(start_s, 1),
            "compile_mode": str(vc.compilation_config.mode),
            "cudagraph_mode": str(vc.compilation_config.cudagraph_mode),
            "v2_model_runner": bool(getattr(vc, "use_v2_model_runner", False)),
            "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens}
    try:
        import torch

        info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        info["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass

    checks = {}
    for name, length, want_plp in CHECK_PROMPTS[preset][: 2 if os.environ.get("QUICK") else 3]:
        ids = prompt(length, seed=length, vocab=vocab)
        params = SamplingParams(max_tokens=GEN_TOKENS, temperature=0.0, logprobs=1,
                                prompt_logprobs=1 if want_plp else None,
                                ignore_eos=True, detokenize=False)
        o = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
        c = o.outputs[0]
        entry = {"tokens": list(c.token_ids),
                 "logprobs": [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]}
        if want_plp:
            top1, actual = [], []
            for t, lp in zip(ids[1:], o.prompt_logprobs[1:]):
                top1.append(next(k for k, v in lp.items() if v.rank == 1))
                actual.append(lp[t].logprob)
            entry["prompt_top1"], entry["prompt_logprobs"] = top1, actual
        checks[name] = entry

    # Prefill timing: time to the first token of one fresh prompt (no prefix
    # cache), median of 3 after one warm-up of the same length.
    timings = {}
    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False)
    for length in ([] if os.environ.get("QUICK") else timed):
        runs = []
        for rep in range(4):
            ids = prompt(length, seed=10_000 + 17 * rep + length, vocab=vocab)
            t = time.perf_counter()
            llm.generate([{"prompt_token_ids": ids}], one, use_tqdm=False)
            runs.append(time.perf_counter() - t)
        timings[str(length)] = {"runs_s": [round(r, 4) for r in runs[1:]],
                                "median_s": round(statistics.median(runs[1:]), 4)}
    out.write_text(json.dumps({"info": info, "checks": checks, "timings": timings}))
    print(f"@@done {info['layout']} start={start_s:.0f}s timings=" +
          json.dumps({k: v["median_s"] for k, v in timings.items()}), flush=True)


def compare(a: dict, b: dict) -> dict:
    res = {"same_greedy": 0, "prompts": 0, "top1_agree": 0, "top1_total": 0, "max_lp_diff": 0.0}
    for name, ea in a["checks"].items():
        if name not in b["checks"]:
            continue
        eb = b["checks"][name]
        res["prompts"] += 1
        res["same_greedy"] += ea["tokens"] == eb["tokens"]
        n = next((i for i, (x, y) in enumerate(zip(ea["tokens"], eb["tokens"])) if x != y),
                 len(ea["tokens"]))
        diffs = [abs(x - y) for x, y in zip(ea["logprobs"][:n], eb["logprobs"][:n])]
        if "prompt_top1" in ea:
            res["top1_total"] += len(ea["prompt_top1"])
            res["top1_agree"] += sum(x == y for x, y in zip(ea["prompt_top1"], eb["prompt_top1"]))
            diffs += [abs(x - y) for x, y in zip(ea["prompt_logprobs"], eb["prompt_logprobs"])]
        res["max_lp_diff"] = max([res["max_lp_diff"], *diffs])
        res.setdefault("first_divergence", {})[name] = None if n == len(ea["tokens"]) else n
    return res


def load(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def report(paths: list[Path]) -> str:
    runs = {r["info"]["layout"]: r for r in map(load, paths)}
    lines = ["## Engines", "",
             "| layout | vllm | device | compile | cudagraphs | V2 runner | start (s) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in runs.items():
        i = r["info"]
        lines.append(f"| {name} | {i['vllm']} | {i.get('device', '?')} | {i['compile_mode']} | "
                     f"{i['cudagraph_mode']} | {i['v2_model_runner']} | {i['engine_start_s']} |")
    lines += ["", "## Equivalence (greedy, teacher-forced top-1 over the prompts with prompt "
              "logprobs)", "",
              "| pair | same greedy tokens | first divergence | top-1 agreement | "
              "max logprob diff |",
              "| --- | --- | --- | --- | --- |"]
    names = list(runs)
    for x in range(len(names)):
        for y in range(x + 1, len(names)):
            c = compare(runs[names[x]], runs[names[y]])
            agree = c["top1_agree"] / max(1, c["top1_total"])
            lines.append(f"| {names[y]} vs {names[x]} | {c['same_greedy']}/{c['prompts']} | "
                         f"{c['first_divergence']} | "
                         f"{agree:.2%} ({c['top1_agree']}/{c['top1_total']}) | "
                         f"{c['max_lp_diff']:.3g} |")
    lengths = list(next(iter(runs.values()))["timings"])
    runs_with_t = {k: v for k, v in runs.items() if v["timings"]}
    base = runs.get("TP=1 SP=1")
    lines += ["", "## Prefill time (one prompt, max_tokens=1, median of 3 after a warm-up)", "",
              "| layout | " + " | ".join(f"{n} tokens (s)" for n in lengths) +
              " | " + " | ".join(f"speed-up vs TP=1 @{n}" for n in lengths) + " |",
              "| --- " * (1 + 2 * len(lengths)) + "|"]
    for name, r in runs_with_t.items():
        t = [r["timings"][n]["median_s"] for n in lengths]
        sp = [(base["timings"][n]["median_s"] / r["timings"][n]["median_s"]) if base
              else float("nan") for n in lengths]
        lines.append(f"| {name} | " + " | ".join(f"{x:.3f}" for x in t) + " | " +
                     " | ".join(f"{x:.2f}x" for x in sp) + " |")
    tp2 = runs.get("TP=2 SP=1")
    sp2 = runs.get("TP=1 SP=2")
    if tp2 and sp2:
        lines += ["", "SP=2 vs TP=2 prefill speed-up: " + ", ".join(
            f"{n} tokens {tp2['timings'][n]['median_s'] / sp2['timings'][n]['median_s']:.2f}x"
            for n in lengths)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ckpt")
    a.add_argument("dir", type=Path)
    a.add_argument("--preset", default="llama31_8b", choices=sorted(PRESETS))
    e = sub.add_parser("engine")
    e.add_argument("dir", type=Path)
    e.add_argument("--tp", type=int, default=1)
    e.add_argument("--sp", type=int, default=1)
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--cpu", action="store_true")
    e.add_argument("--eager", action="store_true")
    r = sub.add_parser("report")
    r.add_argument("results", type=Path, nargs="+")
    c = sub.add_parser("compare", help="two result files, e.g. from different hosts")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "ckpt":
        make_ckpt(args.dir, args.preset)
    elif args.cmd == "engine":
        engine(args.dir, args.tp, args.sp, args.out, args.cpu, args.eager)
    elif args.cmd == "compare":
        res = compare(load(args.a), load(args.b))
        res["top1_agreement"] = res["top1_agree"] / max(1, res["top1_total"])
        print(json.dumps(res, indent=1))
    else:
        sys.stdout.write(report(args.results))


if __name__ == "__main__":
    main()
