#!/usr/bin/env python3
"""Where a served layout's time goes under load: a window of consecutive
engine steps, traced on rank 0 while `vllm bench serve` keeps the server
busy, summarised per kind of step.  `step_profile.py` profiles one step of
an offline engine; a saturation row that misses its target needs the steps
a server really runs (prefill chunks mixed with decodes, Shift switching
models, host work between steps), so this reads the trace vLLM's own
profiler writes when `run.py` serves a `prof_<workload>` (see there).

    python3 -m benchmarks.serve_profile TRACE.pt.trace.json.gz [--layout NAME]

What it reports, for the window and per (step kind, model) group:
- steps and their tokens: vLLM annotates each step with its prefill
  ("context") and decode ("generation") requests and tokens;
- which model ran it: a step with all-to-all kernels ran the SP model, one
  without ran TP (under Shift: the full-TP model);
- CUDA graph or eager: whether the step's host side launched a graph;
- GPU time: kernels launched from the step's host span (sampling, launched
  after the forward's annotation ends, counts to the step before it);
- the step's period (its first kernel to the next step's first kernel) and
  how much of the window the GPU was idle: host-bound steps show as idle;
- per group, its kernels by name (calls and microseconds a step, the
  largest first): two layouts whose steps differ by a fraction of a
  millisecond (Shift's one-user decode against TP's) differ in which
  kernels, which a category cannot say.  The traces stay on the host.

On a CPU dry run (the tiny shape) there are no kernels: CPU ops stand in.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
from pathlib import Path

from benchmarks.step_profile import CATEGORIES, GPU_CATS, category, kernels_of, load_trace

STEP = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
TOP_KERNELS = 40          # per group, in the summary: [name, calls a step, us a step]


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (us in, ms out)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total / 1000


def kernel_name(name: str, width: int = 100) -> str:
    """A kernel's name as a key: templated CUDA names run to kilobytes, and
    their head (the function and its first arguments) tells them apart."""
    name = re.sub(r"^void ", "", name)
    return name if len(name) <= width else name[:width - 1] + "…"


def steps_of(trace: dict) -> list[dict]:
    """One record per annotated step, in order, with its kernels attached."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation"
                    and STEP.fullmatch(e.get("name", ""))), key=lambda e: e["ts"])
    starts = [s["ts"] for s in steps]
    kernels, cpu_run = kernels_of(events)
    # a kernel belongs to the step whose host span (or the gap after it) launched it
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}
    graphs = sorted(e["ts"] for e in events if e.get("cat") in LAUNCH_CATS
                    and e.get("name", "").startswith(("cudaGraphLaunch", "cuGraphLaunch")))
    out = []
    for s in steps:
        m = STEP.fullmatch(s["name"])
        ctx_reqs, ctx_tok, gen_reqs, gen_tok = map(int, m.groups())
        n = bisect.bisect_left(graphs, s["ts"])
        out.append(dict(ts=s["ts"], host_ms=s["dur"] / 1000, ctx_reqs=ctx_reqs, ctx_tokens=ctx_tok,
                        gen_reqs=gen_reqs, gen_tokens=gen_tok, kernels=[],
                        graph=n < len(graphs) and graphs[n] <= s["ts"] + s["dur"]))
    unmatched = 0
    for k in kernels:
        t = k["ts"] if cpu_run else launch_ts.get(k.get("args", {}).get("correlation"))
        if t is None:        # no launch recorded for it: its own start (runs after its launch)
            t, unmatched = k["ts"], unmatched + 1
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0:
            out[i]["kernels"].append(k)
    if out:
        out[0]["unmatched_kernels"] = unmatched
    for st in out:
        ks = st.pop("kernels")
        cats: dict[str, float] = {}
        names: dict[str, list[float]] = {}          # kernel -> [calls, us]
        for k in ks:
            c = category(k["name"])
            cats[c] = cats.get(c, 0.0) + k["dur"] / 1000
            n = names.setdefault(kernel_name(k["name"]), [0, 0.0])
            n[0] += 1
            n[1] += k["dur"]
        st.update(gpu_ms=sum(k["dur"] for k in ks) / 1000, by_category_ms=cats, by_kernel=names,
                  first=min((k["ts"] for k in ks), default=None),
                  last=max((k["ts"] + k["dur"] for k in ks), default=None),
                  model="SP" if cats.get("all-to-all") else "TP",
                  kind="prefill+decode" if st["ctx_tokens"] else "decode",
                  intervals=[(k["ts"], k["ts"] + k["dur"]) for k in ks])
    return out


def summarize_serving(trace: dict, layout: str = "") -> dict:
    steps = steps_of(trace)
    unmatched = steps[0].pop("unmatched_kernels", 0) if steps else 0
    unit = "kernels" if any(e.get("cat") in GPU_CATS for e in trace.get("traceEvents", [])
                            if e.get("ph") == "X") else "cpu ops (dry run)"
    timed = [s for s in steps if s["first"] is not None]
    for a, b in zip(timed, timed[1:]):
        a["period_ms"] = (b["first"] - a["first"]) / 1000
    # the window: the first step's first kernel to the last step's first kernel (the last
    # step's own period is unknown, so it stays out of every per-step mean below)
    window = timed[:-1]
    span = (timed[-1]["first"] - timed[0]["first"]) / 1000 if len(timed) > 1 else 0.0
    busy = _union_ms([iv for s in window for iv in s["intervals"]])
    groups: dict[str, dict] = {}
    for s in window:
        g = groups.setdefault(f"{s['kind']}, {s['model']}", dict(
            steps=0, graph_steps=0, tokens=0, ctx_tokens=0, gen_tokens=0, period_ms=0.0,
            gpu_ms=0.0, host_ms=0.0, by_category_ms={}, by_kernel={}))
        g["steps"] += 1
        g["graph_steps"] += s["graph"]
        g["tokens"] += s["ctx_tokens"] + s["gen_tokens"]
        g["ctx_tokens"] += s["ctx_tokens"]
        g["gen_tokens"] += s["gen_tokens"]
        for key in ("period_ms", "gpu_ms", "host_ms"):
            g[key] += s[key]
        for c, v in s["by_category_ms"].items():
            g["by_category_ms"][c] = g["by_category_ms"].get(c, 0.0) + v
        for name, (calls, us) in s["by_kernel"].items():
            k = g["by_kernel"].setdefault(name, [0, 0.0])
            k[0] += calls
            k[1] += us
    for g in groups.values():
        n = g["steps"]
        g["mean"] = {k: g[k] / n for k in ("tokens", "ctx_tokens", "gen_tokens", "period_ms",
                                           "gpu_ms", "host_ms")}
        g["mean"]["by_category_ms"] = {c: v / n for c, v in sorted(
            g["by_category_ms"].items(), key=lambda kv: -kv[1])}
        g["share_of_window"] = g["period_ms"] / span if span else 0.0
        kernels = sorted(g.pop("by_kernel").items(), key=lambda kv: -kv[1][1])
        g["mean"]["kernels"] = sum(c for _, (c, _) in kernels) / n
        g["mean"]["top_kernels"] = [[name, round(c / n, 2), round(us / n, 2)]
                                    for name, (c, us) in kernels[:TOP_KERNELS]]
    # kernels without a recorded launch were placed by their own start time (with async
    # scheduling that can be the next step's host span): a high count makes the groups rough
    return dict(layout=layout, unit=unit, steps=len(window), window_ms=span,
                kernels_placed_by_time=unmatched,
                gpu_busy_ms=busy, gpu_idle_share=(1 - busy / span) if span else 0.0,
                tokens_per_s=(sum(s["ctx_tokens"] + s["gen_tokens"] for s in window) / span * 1e3
                              if span else 0.0),
                groups=dict(sorted(groups.items(), key=lambda kv: -kv[1]["period_ms"])))


def markdown(summaries: list[dict]) -> str:
    """One table per summary: a column per step group."""
    lines = []
    cats = [c for c, _ in CATEGORIES] + ["other"]
    for s in summaries:
        gs = s["groups"]
        lines += [f"### {s['layout'] or 'trace'}: {s['steps']} steps in {s['window_ms']:.0f} ms, "
                  f"device idle {100 * s['gpu_idle_share']:.1f}%, {s['tokens_per_s']:.0f} "
                  f"scheduled tokens/s ({s['unit']}, rank 0"
                  + (f"; {s['kernels_placed_by_time']} kernels placed by time, not launch"
                     if s.get("kernels_placed_by_time") else "") + ")", "",
                  "| per step (means) | " + " | ".join(gs) + " |",
                  "| --- |" + " --- |" * len(gs)]

        def row(name: str, fn) -> None:
            lines.append(f"| {name} | " + " | ".join(fn(g) for g in gs.values()) + " |")
        row("steps (share of the window)",
            lambda g: f"{g['steps']} ({100 * g['share_of_window']:.0f}%)")
        row("CUDA graph steps", lambda g: str(g["graph_steps"]))
        row("tokens: prefill + decode",
            lambda g: f"{g['mean']['ctx_tokens']:.0f} + {g['mean']['gen_tokens']:.0f}")
        row("**period** (ms)", lambda g: f"{g['mean']['period_ms']:.2f}")
        row("GPU busy (ms)", lambda g: f"{g['mean']['gpu_ms']:.2f}")
        row("host span of the forward (ms)", lambda g: f"{g['mean']['host_ms']:.2f}")
        for c in cats:
            if any(g["mean"]["by_category_ms"].get(c) for g in gs.values()):
                row(f"  {c} (ms)", lambda g, c=c: f"{g['mean']['by_category_ms'].get(c, 0.0):.2f}")
        # (summaries written before the per-kernel counts have neither)
        if all("kernels" in g["mean"] for g in gs.values()):
            row("kernels", lambda g: f"{g['mean']['kernels']:.0f}")
        lines.append("")
        for name, g in gs.items():
            if not g["mean"].get("top_kernels"):
                continue
            lines += [f"{name}: the largest kernels a step (calls, µs)", "",
                      "| kernel | calls | µs |", "| --- | --- | --- |"]
            lines += [f"| `{k}` | {c:g} | {us:.1f} |" for k, c, us in g["mean"]["top_kernels"][:15]]
            lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--layout", default="")
    a = ap.parse_args()
    s = summarize_serving(load_trace(a.trace), a.layout)
    print(json.dumps({k: v for k, v in s.items() if k != "groups"}))
    print(markdown([s]))


if __name__ == "__main__":
    main()
