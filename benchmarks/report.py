"""`run.py report`: a result set's Markdown tables (ratios, the Shift paper's setting, the
bursty trace per phase, the rate curve, soak, traced windows, prefix-cache hits, leases) and
its PNG plots."""

from __future__ import annotations

import json

from benchmarks.fused_graphs import summary
from benchmarks.layouts import LAYOUTS, NO_SHIFT, PEER, UPSTREAM, set_dir
from benchmarks.workloads import BURSTS, PROF, base_workload, profiled, rate_of

# Published figures the 8-GPU rows are read against (not measured here).  The Shift paper,
# 8xH200, Llama-70B FP8, 4k in / 250 out; its bursty trace is its own (ours: BURSTS["burst"]).
# "tok/s" as the paper states it.  SEEDS: the seeds' published ratios (8xH100, FP8).
PAPER = {"shift": dict(ttft=102, tpot=10.1, tput=37400, burst_ttft=148, burst_tpot=51),
         "TP=8": dict(ttft=159, tpot=9.34, tput=24700, burst_ttft=3930, burst_tpot=85),
         "DP": dict(ttft=614, tpot=22.5, tput=45900, burst_ttft=1355, burst_tpot=83)}
SEEDS = {"TTFT, TP=2xSP=4 vs TP=2": 3.71, "throughput, TP=2xSP=4 vs TP=8": 1.409}


def load(shape: str) -> dict[str, dict[str, dict]]:
    res: dict[str, dict[str, dict]] = {}
    for f in sorted((set_dir(shape)).glob("*/*.json")):
        if f.stem in ("startup",) or profiled(f.stem):    # profiled runs: their own section
            continue
        res.setdefault(f.parent.name, {})[f.stem] = json.loads(f.read_text())
    return res


def table(intro: str, cells: list[str]) -> list[str]:
    """A report section's opening lines: its intro, then a Markdown table header."""
    return ["", intro, "", "| " + " | ".join(cells) + " |", "|" + " --- |" * len(cells)]


def cache_section(res: dict) -> list[str]:
    """Measured runs whose prompts the prefix cache held in part: their TTFT is no prefill.
    From the server's counters, where recorded (see seed_of)."""
    hits = [(n, w, r["server"]) for n, ws in res.items() for w, r in ws.items()
            if r.get("server", {}).get("prefix_cache_hits_tokens")]
    if not hits:
        return []
    out = table("Prefix-cache hits in measured runs (a TTFT with hits is not a prefill):",
                ["layout", "workload", "prompt tokens found / looked up"])
    for n, w, srv in hits:
        out.append(f"| {n} | {w} | {srv['prefix_cache_hits_tokens']:.0f} / "
                   f"{srv.get('prefix_cache_queries_tokens', 0):.0f} |")
    return out


def leases_section(shape: str) -> list[str]:
    """Which machine lease (and card) served each layout of the set: ratios compare rows of
    one lease."""
    rows: dict[str, list[str]] = {}
    cards: dict[str, str] = {}
    for f in sorted(set_dir(shape).glob("*/startup.json")):
        for run in json.loads(f.read_text()).get("runs", []):
            lid = run.get("lease", "no lease recorded")
            cards[lid] = run.get("card", "—")
            rows.setdefault(lid, []).append(f"{f.parent.name} ({','.join(run['workloads'])})")
    if not rows:
        return []
    out = table("Machine leases (a lease is one host, held once; the host keeps nothing "
                "between leases, and the card may differ):", ["lease", "card", "served"])
    for lid, served in rows.items():
        out.append(f"| {lid} | {cards[lid]} | {'; '.join(served)} |")
    fused = [(f.parent.name, run["fused_graphs"]) for f in sorted(set_dir(shape).glob(
        "*/startup.json")) for run in json.loads(f.read_text()).get("runs", [])
        if run.get("fused_graphs")]
    if fused:
        out += table("Compiled graphs with FlashInfer's fused all-reduce + RMSNorm, per model "
                     "and compile range (from each server's torch.compile cache, rank 0):",
                     ["layout", "fused ranges"])
        out += [f"| {n} | {summary(g)} |" for n, g in fused]
    return out


def report(shape: str) -> str:
    res = load(shape)
    lines = [f"## {set_dir(shape).name}: layouts x workloads", "",
             "| layout | TTFT 1k (ms) | TTFT 8k | TTFT 32k | TPOT 1 user (ms) | e2e 8k (s) "
             "| sat. output tok/s | sat. total tok/s | sat. TPOT p50 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def g(layout, w, key, scale=1.0, fmt="{:.0f}"):
        v = res.get(layout, {}).get(w, {}).get(key)
        return "—" if v is None else fmt.format(v * scale)

    for layout in LAYOUTS:
        if layout not in res:
            continue
        lines.append(f"| {layout} | {g(layout, 'lat1k', 'median_ttft_ms')} | "
                     f"{g(layout, 'lat8k', 'median_ttft_ms')} | "
                     f"{g(layout, 'lat32k', 'median_ttft_ms')} | "
                     f"{g(layout, 'lat1k', 'median_tpot_ms', fmt='{:.2f}')} | "
                     f"{g(layout, 'lat8k', 'median_e2el_ms', 1e-3, '{:.2f}')} | "
                     f"{g(layout, 'sat', 'output_throughput')} | "
                     f"{g(layout, 'sat', 'total_token_throughput')} | "
                     f"{g(layout, 'sat', 'median_tpot_ms', fmt='{:.1f}')} |")
    # Shift is also measured against SP=2 (which it must not lose to on long prompts),
    # and each of our layouts against the peer's same layout.  The rows of the 2000/250
    # workloads only (the paper's setting has its own ratios below).
    refs = [r for r in ("tp1", "tp2", "dp2", "tp4", "tp2_ep", "dp2_ep") if r in res]

    def refs_of(layout):
        if not any(w in res[layout] for w in ("lat1k", "sat")):
            return []
        own = [PEER[layout]] if layout in PEER else []
        if layout in NO_SHIFT:
            own.append(NO_SHIFT[layout])
        return [r for r in refs + own if r in res and r != layout]
    if any(refs_of(layout) for layout in res):
        lines += table("Ratios (TTFT and TPOT: reference / layout, higher is faster; throughput: "
                       "layout / reference):",
                       ["layout", "vs", "TTFT 8k", "TTFT 32k", "TPOT 1 user", "sat. output tok/s"])
        for layout in res:
            for ref in refs_of(layout):
                cells = [ratio_cell(res, layout, ref, (w,), key, inverse, "{:.3f}")
                         for w, key, inverse in (("lat8k", "median_ttft_ms", True),
                                                 ("lat32k", "median_ttft_ms", True),
                                                 ("lat1k", "median_tpot_ms", True),
                                                 ("sat", "output_throughput", False))]
                lines.append(f"| {layout} | {ref} | " + " | ".join(cells) + " |")
        if any("†" in line for line in lines):
            lines += ["", CROSS_LEASE]
    groups: dict[str, list[str]] = {}     # one layout served by several servers
    for n in LAYOUTS:
        if n in res:
            groups.setdefault(json.dumps(LAYOUTS[n]), []).append(n)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if groups:
        lines += table("Same layout, several servers (each its own launch): mean (min – max) of "
                       "the servers' medians; a difference between two installs smaller than the "
                       "spread within one is not a measured difference:",
                       ["install, arguments", "servers", "TTFT 1k (ms)", "TTFT 8k (ms)",
                        "TPOT 1 user (ms)", "sat. output tok/s"])
        for key, names in groups.items():
            install, _, args = json.loads(key)

            def spread(w, k, fmt):
                v = [res[n][w][k] for n in names if k in res[n].get(w, {})]
                if not v:
                    return "—"
                return (f"{fmt.format(sum(v) / len(v))} "
                        f"({fmt.format(min(v))} – {fmt.format(max(v))})")
            lines.append(f"| {install} `{' '.join(args)}` | {', '.join(names)} | "
                         f"{spread('lat1k', 'median_ttft_ms', '{:.1f}')} | "
                         f"{spread('lat8k', 'median_ttft_ms', '{:.1f}')} | "
                         f"{spread('lat1k', 'median_tpot_ms', '{:.2f}')} | "
                         f"{spread('sat', 'output_throughput', '{:.0f}')} |")
    split = [(n, w) for n in LAYOUTS for w in ("lat1k", "lat8k", "lat32k")
             if res.get(n, {}).get(w, {}).get("server", {}).get("ttft_ms")]
    if split:
        lines += table("Where one user's TTFT goes (means, ms; server figures from its /metrics): "
                       "queue and prefill inside the engine; the rest of the server's TTFT "
                       "(tokenization, input processing, the trip to the engine core and back); "
                       "the client's TTFT beyond the server's (the first token's detokenization, "
                       "HTTP). No GPU count shrinks the last two:",
                       ["layout", "prompt", "client TTFT", "server TTFT", "queue", "prefill",
                        "frontend ↔ engine", "client − server"])
        for n, w in split:
            r, sv = res[n][w], res[n][w]["server"]
            inner = sv.get("queue_ms", 0.0) + sv.get("prefill_ms", 0.0)
            lines.append(f"| {n} | {w[3:]} | {r['mean_ttft_ms']:.1f} | {sv['ttft_ms']:.1f} | "
                         f"{sv.get('queue_ms', float('nan')):.1f} | "
                         f"{sv.get('prefill_ms', float('nan')):.1f} | "
                         f"{sv['ttft_ms'] - inner:.1f} | "
                         f"{r['mean_ttft_ms'] - sv['ttft_ms']:.1f} |")
    lines += paper_sections(res)
    curves = [n for n in LAYOUTS if any(rate_of(w) for w in res.get(n, {}))]
    if curves:
        lines += table("Latency-throughput (Poisson arrivals, q4k_N: 4000 in / 250 out at N a "
                       "second; `latency_throughput.png`):",
                       ["layout", "workload", "achieved output tok/s", "TTFT p50 / p99 (ms)",
                        "TPOT p50 / p99 (ms)", "failed"])
        for n in curves:
            for w in sorted((w for w in res[n] if rate_of(w)), key=lambda w: (w[0], rate_of(w))):
                lines.append(f"| {n} | {w} | {g(n, w, 'output_throughput')} | "
                             f"{g(n, w, 'median_ttft_ms')} / {g(n, w, 'p99_ttft_ms')} | "
                             f"{g(n, w, 'median_tpot_ms', fmt='{:.2f}')} / "
                             f"{g(n, w, 'p99_tpot_ms', fmt='{:.2f}')} | {g(n, w, 'failed')} |")
    soaks = [n for n in LAYOUTS if "soak" in res.get(n, {})]
    if soaks:
        lines += table("Soak (mixed lengths at saturation, half streamed, 10% cancelled by the "
                       "client):",
                       ["layout", "requests", "seconds", "plain / streamed / cancelled", "errors",
                        "hung", "short", "output tokens", "left running, waiting, KV use",
                        "GPU MiB before → after"])
        for n in soaks:
            r = res[n]["soak"]
            k = r["kinds"]
            mem = r.get("gpu_memory_used_mib", {})
            lines.append(f"| {n} | {r['requests']} | {r['seconds']:.0f} | "
                         f"{k['plain']} / {k['stream']} / {k['cancelled']} | "
                         f"{len(r['errors'])} | {r['hung']} | {len(r['short'])} | "
                         f"{r['output_tokens']} | {tuple(r['left_running_waiting_kv'])} | "
                         f"{mem.get('before')} → {mem.get('after')} |")
    profiles = sorted((f for f in set_dir(shape).glob("*/prof*.json") if profiled(f.stem)),
                      key=lambda f: (list(LAYOUTS).index(f.parent.name)
                                     if f.parent.name in LAYOUTS else len(LAYOUTS), f.name))
    if profiles:
        from benchmarks.serve_profile import markdown
        lines += ["", f"Served under load, traced ({PROF}<workload>: rank 0, the window's "
                  "steps grouped by kind and model; the traced steps run slower than "
                  "untraced ones):", ""]
        for f in profiles:
            p = json.loads(f.read_text())
            p["layout"] = f"{p['layout']} / {base_workload(p['workload'])}, traced from " \
                          f"{p['after_s']:.0f} s in"
            lines.append(markdown([p]))
    lines += cache_section(res)
    lines += leases_section(shape)
    text = "\n".join(lines) + "\n"
    set_dir(shape).mkdir(parents=True, exist_ok=True)
    (set_dir(shape) / "report.md").write_text(text)
    plot(shape, res)
    return text


def first_of(r: dict, *workloads: str) -> tuple[str, dict]:
    """(name, result) of the first of workloads a layout has, else ("", {})."""
    return next(((w, r[w]) for w in workloads if w in r), ("", {}))


SATS = ("sat4k", "sat4k_500", "sat4k_small")          # the 4k/250 saturation workloads
CROSS_LEASE = ("† the two rows come from different machine leases (or one carries no lease): "
               "not a ratio of one lease; serve them again side by side (`run.py --tag`).")


def ratio_cell(res: dict, n: str, ref: str, workloads: tuple[str, ...], key: str,
               inverse: bool, fmt: str = "{:.2f}") -> str:
    """ref / n (inverse: latencies) or n / ref of the first workload both rows have, marked †
    when the two results come from different machine leases."""
    w = next((w for w in workloads if w in res[n] and w in res[ref]), None)
    a = res[n].get(w, {}).get(key) if w else None
    b = res[ref].get(w, {}).get(key) if w else None
    if not a or not b:
        return "—"
    mark = "" if res[n][w].get("lease") == res[ref][w].get("lease") else "†"
    return fmt.format(b / a if inverse else a / b) + f"×{mark}"


def card_of(r: dict) -> str:
    """The card(s) a layout's results were measured on (their leases' nvidia-smi names)."""
    cards = sorted({x["card"] for x in r.values() if isinstance(x, dict) and x.get("card")})
    return ", ".join(cards) or "—"


def paper_refs(res: dict, n: str) -> list[str]:
    """What a layout of the paper's setting is compared to: TP and DP on as many GPUs (the DP
    row holds the pair with TP), the peer's same layout, shift's own layout without shift."""
    q = next((q for q in ("_fp8kv", "_fp8") if n.endswith(q)), "")
    base = n[:len(n) - len(q)] if q else n
    tp, dp = UPSTREAM.get(LAYOUTS[n][1], ("", ""))
    if not tp or base == dp:
        return []
    # at 8 GPUs dp4_tp2 is also the seeds' TP=2 for one user (one replica serves one request)
    own = [f"{tp}{q}", f"{dp}{q}" if dp else "", PEER.get(n, ""),
           f"{NO_SHIFT[base]}{q}" if base in NO_SHIFT else ""]
    return [r for r in own if r and r in res and r != n]


def paper_sections(res: dict) -> list[str]:
    """The Shift paper's setting (4k in / 250 out at one user and at saturation, long
    prompts, the bursty trace): one row per layout, the paper's own rows beside them, ratios
    against TP and DP on as many GPUs, the peer's same layout and shift's layout without
    shift, and the trace per phase."""
    rows = [n for n in LAYOUTS if any(w in res.get(n, {}) for w in
                                      ("lat4k", *SATS, "lat128k", *BURSTS))]
    if not rows:
        return []

    def v(n, w, key, fmt="{:.0f}"):
        x = res[n].get(w, {}).get(key)
        return "—" if x is None else fmt.format(x)
    out = table("The Shift paper's setting (4k in / 250 out; at once: sat4k 1000, sat4k_500 500 "
                "(the paper's load per GPU on 4), sat4k_small 64; the bursty trace over all its "
                "requests; the paper's rows are its published figures, 8xH200 FP8, not measured "
                "here):",
                ["layout", "TTFT 4k 1 user (ms)", "TPOT 4k 1 user (ms)", "sat. total tok/s",
                 "sat. output tok/s", "sat. TPOT p50 (ms)", "TTFT 8k", "TTFT 32k", "TTFT 128k",
                 "bursty: trace", "TTFT p50 / p99", "TPOT p50 / p99", "card"])
    for n in rows:
        sat, _ = first_of(res[n], *SATS)
        b, _ = first_of(res[n], *BURSTS)
        out.append(f"| {n} | {v(n, 'lat4k', 'median_ttft_ms')} | "
                   f"{v(n, 'lat4k', 'median_tpot_ms', '{:.2f}')} | "
                   f"{v(n, sat, 'total_token_throughput')} | {v(n, sat, 'output_throughput')} | "
                   f"{v(n, sat, 'median_tpot_ms', '{:.1f}')} | {v(n, 'lat8k', 'median_ttft_ms')} | "
                   f"{v(n, 'lat32k', 'median_ttft_ms')} | {v(n, 'lat128k', 'median_ttft_ms')} | "
                   f"{b or '—'} | {v(n, b, 'median_ttft_ms')} / {v(n, b, 'p99_ttft_ms')} | "
                   f"{v(n, b, 'median_tpot_ms', '{:.1f}')} / {v(n, b, 'p99_tpot_ms', '{:.1f}')} | "
                   f"{card_of(res[n])} |")
    for name, p in PAPER.items():
        out.append(f"| *paper: {name}* | {p['ttft']} | {p['tpot']} | {p['tput']} (tok/s) | | | "
                   f"| | | paper's | {p['burst_ttft']} / | {p['burst_tpot']} / | 8xH200 |")
    pairs = [(n, r) for n in rows for r in paper_refs(res, n)]
    cols = [(("lat4k",), "median_ttft_ms", True), (("lat4k",), "median_tpot_ms", True),
            (SATS, "output_throughput", False), (("lat8k",), "median_ttft_ms", True),
            (("lat32k",), "median_ttft_ms", True), (("lat128k",), "median_ttft_ms", True),
            (tuple(BURSTS), "median_ttft_ms", True), (tuple(BURSTS), "median_tpot_ms", True)]
    head = ["layout", "vs", "TTFT 4k", "TPOT 4k", "sat. tok/s", "TTFT 8k", "TTFT 32k",
            "TTFT 128k", "bursty TTFT p50", "bursty TPOT p50"]
    if pairs:
        out += table("Ratios against TP and DP on as many GPUs, the peer's same layout and "
                     "shift's own layout without shift (TTFT and TPOT: reference / layout, "
                     "higher is faster; throughput: layout / reference; saturation and bursty "
                     "trace: the first workload both rows ran); the paper's own ratios (8 GPUs) "
                     "below:", head)
        for n, r in pairs:
            out.append(f"| {n} | {r} | " + " | ".join(
                ratio_cell(res, n, r, ws, key, inverse) for ws, key, inverse in cols) + " |")
        s, t, d = PAPER["shift"], PAPER["TP=8"], PAPER["DP"]
        for name, ref in (("TP=8", t), ("DP", d)):
            out.append(f"| *paper: shift* | *{name}* | {ref['ttft'] / s['ttft']:.2f}× | "
                       f"{ref['tpot'] / s['tpot']:.2f}× | {s['tput'] / ref['tput']:.2f}× | | | | "
                       f"{ref['burst_ttft'] / s['burst_ttft']:.2f}× | "
                       f"{ref['burst_tpot'] / s['burst_tpot']:.2f}× |")
        out += (["", CROSS_LEASE] if any("†" in line for line in out) else []) + [
                "", "The seeds (8xH100, Llama-70B FP8): "
                + "; ".join(f"{k} {x:.2f}×" for k, x in SEEDS.items()) + "."]
    bursty = [(n, b) for n in rows for b in BURSTS if b in res[n]]
    if bursty:
        out += table("The bursty trace per phase (`burst_timeline.png`: TTFT and TPOT of every "
                     "request by arrival time; a burst's requests arrive within one second):",
                     ["layout", "trace", "phase", "requests", "TTFT p50 / p99 (ms)",
                      "TPOT p50 / p99 (ms)"])
        for n, b in bursty:
            for phase, st in res[n][b]["phases"].items():
                out.append(f"| {n} | {b} | {phase} | {st['completed']} of {st['requests']} | "
                           f"{st['median_ttft_ms']:.0f} / {st['p99_ttft_ms']:.0f} | "
                           f"{st['median_tpot_ms']:.1f} / {st['p99_tpot_ms']:.1f} |")
    return out


def plot(shape: str, res: dict) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    names = [n for n in LAYOUTS if n in res]
    # one user's TPOT from lat1k or lat4k (the paper's); saturation likewise
    for ax, (ws, key, title) in zip(axes, [(("lat8k",), "median_ttft_ms", "TTFT 8k, 1 user (ms)"),
                                            (("lat1k", "lat4k"), "median_tpot_ms",
                                             "TPOT, 1 user (ms)"),
                                            (("sat", *SATS), "output_throughput",
                                             "output tok/s at saturation")]):
        vals = [first_of(res[n], *ws)[1].get(key, 0) or 0 for n in names]
        ax.bar(names, vals)
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(set_dir(shape) / "layouts.png", dpi=100)
    curves = [n for n in names if any(rate_of(w) for w in res[n])]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for n in curves:
        pts = sorted((r["output_throughput"], r["median_ttft_ms"], r["median_tpot_ms"])
                     for w, r in res[n].items() if rate_of(w))
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{n} (4k/250)")
        axes[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=f"{n} (4k/250)")
    for ax, t in zip(axes, ["p50 TTFT (ms)", "p50 TPOT (ms)"]):
        ax.set_xlabel("achieved output tok/s")
        ax.set_ylabel(t)
        if curves:
            ax.legend()
    fig.tight_layout()
    if curves:
        fig.savefig(set_dir(shape) / "latency_throughput.png", dpi=100)
    plt.close("all")
    bursty = [(n, b) for n in names for b in BURSTS if b in res[n]]
    if bursty:
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        shaded = set()
        for n, b in bursty:
            rows = [r for r in res[n][b]["rows"] if "ttft" in r]
            for ax, key, scale in ((axes[0], "ttft", 1e3), (axes[1], "tpot", 1e3)):
                ax.plot([r["start"] for r in rows], [scale * r[key] for r in rows], ".",
                        label=f"{n} ({b})", alpha=0.7)
            for phase in res[n][b]["phases"]:
                at = [r["scheduled"] for r in res[n][b]["rows"] if r["phase"] == phase]
                if phase.startswith("burst") and (b, phase) not in shaded and at:
                    shaded.add((b, phase))
                    for ax in axes:
                        ax.axvspan(min(at), max(at) + 0.2, color="orange", alpha=0.2)
        for ax, t in zip(axes, ["TTFT (ms)", "TPOT (ms)"]):
            ax.set_xlabel("arrival (s from the trace's start; bursts shaded)")
            ax.set_ylabel(t)
            ax.set_yscale("log")
            ax.legend()
        fig.tight_layout()
        fig.savefig(set_dir(shape) / "burst_timeline.png", dpi=100)
        plt.close("all")
