#!/usr/bin/env python3
"""Where the time of one step goes: a kernel-time breakdown (GEMMs,
attention, each collective, copies, sampling, launch gaps) of one long
prefill step and one large decode step, per layout.  Profile first, then
optimise: this is the evidence the SP speed work starts from.

    python3 -m benchmarks.step_profile --layout tp1 sp2 tp2 [--shape 8b] [--out DIR]
    python3 -m benchmarks.step_profile --report [--out DIR]      # table only

Each layout runs in its own process (an engine per process, as users run
it): vLLM's offline engine with dummy weights, steps driven one at a time
(``LLMEngine.step``), vLLM's own torch profiler around exactly the step of
interest, on every rank; rank 0's trace is summarised.  `--shape tiny
--device cpu` is a dry run on a machine without GPUs (CPU ops instead of
kernels).  Writes ``DIR/<layout>-<phase>.json`` and ``DIR/profile.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

LAYOUTS = {"tp1": dict(tensor_parallel_size=1), "tp2": dict(tensor_parallel_size=2),
           "sp2": dict(sequence_parallel_size=2), "tp4": dict(tensor_parallel_size=4),
           "tp2_sp2": dict(tensor_parallel_size=2, sequence_parallel_size=2),
           "sp4": dict(sequence_parallel_size=4),
           # SP=2 <-> TP=2 at the default threshold: a prefill step runs the SP
           # model, a decode step of <= 256 sequences the full-TP model
           "shift": dict(sequence_parallel_size=2, shift_parallel=True)}

# First match wins; names are CUDA kernel names (or CPU op names in a dry run).
CATEGORIES = [
    ("all-to-all", r"nccl.*(SendRecv|AllToAll|Send|Recv)|all_to_all|alltoall"),
    ("all-reduce", r"nccl.*AllReduce|all_reduce|allreduce|cross_device_reduce"),
    ("all-gather", r"nccl.*AllGather|all_gather|allgather"),
    ("other collectives", r"nccl"),
    ("attention", r"flash|fmha|attn|attention|paged|mha"),
    ("GEMM", r"gemm|cutlass|xmma|nvjet|cublas|matmul|onednn|mm\b|linear|sm\d\d_"),
    ("sampling", r"sampl|topk|top_k|argmax|softmax|gumbel|logsumexp|log_softmax"),
    ("norm, activation, rotary", r"rms|norm|silu|gelu|act_and_mul|rotary|rope"),
    ("copies, reshapes, gathers", r"copy|memcpy|memset|cat|index|gather|scatter|transpose|"
                                  r"contiguous|clone|fill|pad|elementwise|slice"),
]


def category(name: str) -> str:
    for cat, pattern in CATEGORIES:
        if re.search(pattern, name, flags=re.I):
            return cat
    return "other"


GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def kernels_of(events: list[dict]) -> tuple[list[dict], bool]:
    """(the GPU's kernels, copies and memsets among a trace's complete events, False); on a
    CPU dry run, with none, the top-level-ish CPU ops standing in for them, True."""
    kernels = [e for e in events if e.get("cat") in GPU_CATS]
    if kernels:
        return kernels, False
    return [e for e in events if e.get("cat") == "cpu_op"
            and e.get("name", "").startswith(("aten::", "vllm", "_C", "c10d"))], True


def summarize(trace: dict) -> dict:
    """Busy time per category (ms), the span from the first to the last
    kernel, and the gaps in it (launch overhead, host work, waits)."""
    kernels, cpu_run = kernels_of([e for e in trace.get("traceEvents", [])
                                   if e.get("ph") == "X"])
    unit = "cpu ops (dry run: nested ops double count)" if cpu_run else "kernels"
    by_cat: dict[str, float] = {}
    for e in kernels:
        c = category(e["name"])
        by_cat[c] = by_cat.get(c, 0.0) + e["dur"] / 1000
    busy = sum(e["dur"] for e in kernels) / 1000
    span = ((max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)) / 1000
            if kernels else 0.0)
    return dict(unit=unit, busy_ms=busy, span_ms=span, gaps_ms=max(span - busy, 0.0),
                by_category_ms=dict(sorted(by_cat.items(), key=lambda kv: -kv[1])),
                top=[(e["name"][:90], e["dur"] / 1000) for e in
                     sorted(kernels, key=lambda e: -e["dur"])[:10]])


def rank0_traces(folder: Path, since: float) -> list[Path]:
    """The traces rank 0 wrote under ``folder`` since ``since`` (vLLM names them
    ``<run>-rank-<r>.<time>.pt.trace.json.gz``; a DP engine's ``..._dp<i>_...``)."""
    return [p for p in folder.glob("*.pt.trace.json*") if p.stat().st_mtime >= since
            and re.search(r"rank[-_]?0\.", p.name)]


def rank0_trace(folder: Path, since: float) -> Path:
    """The newest of rank0_traces."""
    found = rank0_traces(folder, since)
    if not found:
        raise SystemExit(f"step_profile.py: no rank-0 trace written under {folder}")
    return max(found, key=lambda p: p.stat().st_mtime)


def load_trace(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def child(layout: str, shape: str, device: str, out: Path, prefill: int, decode: int) -> None:
    """One layout in this process: a prefill step and a decode step."""
    from vllm import LLM, SamplingParams

    from benchmarks.shapes import write_model

    model = write_model(out / "model", shape)
    traces = out / "traces" / layout
    traces.mkdir(parents=True, exist_ok=True)
    kw = dict(LAYOUTS[layout])
    world = kw.get("tensor_parallel_size", 1) * kw.get("sequence_parallel_size", 1)
    if world > 1:
        kw["distributed_executor_backend"] = "mp"
    # Synchronous steps: each engine.step() runs one forward and returns its
    # output, so the profiler window holds exactly that step (with async
    # scheduling the forward can fall outside it).  Host gaps between
    # kernels are therefore an upper bound of what serving sees.
    llm = LLM(str(model), load_format="dummy", skip_tokenizer_init=True, seed=0,
              async_scheduling=False,
              max_model_len=prefill + 64, max_num_batched_tokens=max(prefill, decode) + 64,
              max_num_seqs=max(decode, 8), enable_prefix_caching=False,
              enforce_eager=device == "cpu", dtype="bfloat16" if device != "cpu" else "float32",
              profiler_config=dict(profiler="torch", torch_profiler_dir=str(traces),
                                   torch_profiler_with_stack=False,
                                   torch_profiler_use_gzip=True), **kw)
    engine = llm.llm_engine
    vocab = 2000 if shape == "tiny" else 128000

    def prompt(n: int, seed: int) -> dict:
        return {"prompt_token_ids": [(seed * 7919 + i * 104729) % vocab + 10 for i in range(n)]}

    def run_steps(reqs: list[dict], max_tokens: int, profile_step: int, phase: str) -> bool:
        """Run the requests to the end, profiling one step; False when that
        step's GPU trace holds no kernels (seen once: SP=2's 1k prefill)."""
        ok = True
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                                detokenize=False)
        for i, p in enumerate(reqs):
            engine.add_request(f"{phase}-{time.time()}-{i}", p, params)
        step = 0
        while engine.has_unfinished_requests():
            if step == profile_step:
                since = time.time()
                llm.start_profile()
                engine.step()
                llm.stop_profile()
                time.sleep(2)                     # workers finish writing
                path = rank0_trace(traces, since)
                summary = summarize(load_trace(path))
                if device != "cpu" and summary["unit"] != "kernels":
                    print(f"step_profile.py: {layout} {phase}: no kernels in {path.name}",
                          flush=True)
                    ok = False
                summary.update(layout=layout, phase=phase, shape=shape, trace=path.name, tokens=(
                    prefill if phase == "prefill" else decode))
                (out / f"{layout}-{phase}.json").write_text(json.dumps(summary, indent=1))
                print(f"step_profile.py: {layout} {phase}: {summary['busy_ms']:.2f} ms busy, "
                      f"{summary['span_ms']:.2f} ms span", flush=True)
            else:
                engine.step()
            step += 1
        return ok

    run_steps([prompt(prefill, 1)], 1, -1, "warmup")           # compile, graphs, caches
    # One step: the whole prompt (tried again with a new prompt if the trace
    # came back empty).
    for attempt in range(3):
        if run_steps([prompt(prefill, 2 + attempt)], 1, 0, "prefill"):
            break
    # The decode step: all sequences prefilled in the first step, then
    # steps of `decode` single-token sequences; the third of them is profiled.
    for attempt in range(3):
        if run_steps([prompt(16, 100 + 1000 * attempt + i) for i in range(decode)], 6, 3, "decode"):
            break


def report(out: Path) -> str:
    order = list(LAYOUTS)
    rows = sorted((json.loads(p.read_text()) for p in out.glob("*-*.json")
                   if p.stem.split("-")[-1] in ("prefill", "decode")),
                  key=lambda r: order.index(r["layout"]))
    cats = [c for c, _ in CATEGORIES] + ["other"]
    lines = ["# Kernel time per step, rank 0 (ms)", ""]
    for phase in ("prefill", "decode"):
        sel = [r for r in rows if r["phase"] == phase]
        if not sel:
            continue
        lines += [f"## {phase} ({sel[0]['tokens']} tokens, shape {sel[0]['shape']}, "
                  f"{sel[0]['unit']})", "",
                  "| category | " + " | ".join(r["layout"] for r in sel) + " |",
                  "| --- |" + " --- |" * len(sel)]
        for c in cats:
            vals = [r["by_category_ms"].get(c, 0.0) for r in sel]
            if any(vals):
                lines.append(f"| {c} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
        lines.append("| **busy** | " + " | ".join(f"{r['busy_ms']:.2f}" for r in sel) + " |")
        lines.append("| gaps (span - busy) | " + " | ".join(f"{r['gaps_ms']:.2f}" for r in sel)
                     + " |")
        lines.append("| **span** | " + " | ".join(f"{r['span_ms']:.2f}" for r in sel) + " |")
        lines.append("")
    text = "\n".join(lines) + "\n"
    (out / "profile.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", nargs="*", default=[], choices=sorted(LAYOUTS))
    ap.add_argument("--shape", default="8b")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--prefill", type=int, default=8192)
    ap.add_argument("--decode", type=int, default=256)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "profile")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args.child, args.shape, args.device, args.out, args.prefill, args.decode)
        return
    for layout in args.layout:
        if all((args.out / f"{layout}-{p}.json").exists() for p in ("prefill", "decode")):
            print(f"step_profile.py: {layout} done already", flush=True)
            continue
        cmd = [sys.executable, "-m", "benchmarks.step_profile", "--child", layout,
               "--shape", args.shape, "--device", args.device, "--out", str(args.out),
               "--prefill", str(args.prefill), "--decode", str(args.decode)]
        with open(args.out / f"{layout}.log", "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                cwd=Path(__file__).resolve().parent.parent).returncode
        print(f"step_profile.py: {layout} exit {rc} (log {args.out / (layout + '.log')})",
              flush=True)
    print(report(args.out))


if __name__ == "__main__":
    main()
