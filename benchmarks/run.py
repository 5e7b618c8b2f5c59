"""Serving benchmarks through the real server: layouts x workloads, with `vllm serve` and
`vllm bench serve`, resumable, one JSON per (layout, workload), a Markdown table with ratios
and PNG plots.  From the repository root, on the GPU host (after benchmarks/host-setup.sh):

    python3 -m benchmarks.run setup                      # model dirs + tokenizers
    python3 -m benchmarks.run layout tp1 sp2 shift ...   # run what is not done yet
    python3 -m benchmarks.run report                     # table + plots

Results live in $BENCH_DIR/res (BENCH_DIR defaults to /root/bench) and are archived to
$OUT/res.tgz after every workload, so a call cut short by its time limit loses at most the
workload it was in; the next call skips whatever is already there.  `--shape tiny` serves a
small model on the CPU engine: a dry run on a machine without GPUs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchmarks import server as srv
from benchmarks import workloads as wl
from benchmarks.fused_graphs import fused_graphs, summary
from benchmarks.layouts import BENCH, DRY, LAYOUTS, MAX_LEN_ARG, TAG, max_model_len, set_dir
from benchmarks.report import report
from benchmarks.shapes import SHAPES, write_model


def dry_layout(layout: str, shape: str, workloads: list[str], extra: list[str]) -> None:
    """What run_layout would start for a layout, printed: the server, then each workload not
    done yet (a result set resumed from an earlier run skips what it holds)."""
    model = BENCH / "models" / shape
    out_dir = set_dir(shape) / layout
    done = [w for w in workloads if (out_dir / f"{w}.json").exists()]
    todo = [w for w in workloads if w not in done]
    install, gpus, _ = LAYOUTS[layout]
    print(f"[dry] {layout} ({install}, {gpus} GPU{'s' * (gpus > 1)}) -> {out_dir}"
          + (f"; done already: {','.join(done)}" if done else ""))
    if not todo:
        return
    if not (model / "config.json").exists():
        print(f"[dry]   (no model at {model} yet: the plan's `model` step writes it)")
    todo, extra = wl.with_profiler(todo, extra, shape, layout)
    print(f"[dry]   serve: {srv.env_shown(layout, shape)} "
          + " ".join(srv.serve_cmd(layout, shape, model, "PORT", extra)))
    if install == "arctic":
        print(f"[dry]   check: the server log says {srv.ARCTIC_ENABLED!r}")
    client = False
    for w in todo:
        benched = wl.base_workload(w) in wl.WORKLOADS
        if benched and not client:   # the client in full once, then each one's load
            client = True
            args = wl.measured(w, out_dir, wl.bench_args(w, shape))
            print("[dry]   client (after one warm-up prompt of another seed): "
                  + " ".join(wl.bench_cmd(model, "PORT", wl.seed_of(w), args)))
        if benched:
            print(f"[dry]   {w} (seed {wl.seed_of(w)}): " + " ".join(wl.bench_args(w, shape)) + (
                f"; traced: {wl.PROFILE[1]} steps from {wl.profile_after(w):.0f} s in"
                if wl.profiled(w) else ""))
        elif w in wl.BURSTS:
            isl, osl, arrivals = wl.burst_schedule(w, shape)
            print(f"[dry]   {w}: run.py's replay, {len(arrivals)} requests of {isl} in / {osl} "
                  f"out over {arrivals[-1][1]:.0f} s")
        else:
            print(f"[dry]   {w}: run.py's own ({wl.SPECIAL_WORKLOADS[w]})")


def run_layout(layout: str, shape: str, workloads: list[str], extra: list[str]) -> None:
    if DRY[0]:
        dry_layout(layout, shape, workloads, extra)
        return
    model = BENCH / "models" / shape
    if not (model / "config.json").exists():
        # Each server would start and die on the missing path: say it once.
        raise SystemExit(f"run.py: no model at {model}: run `run.py setup --shape {shape}` "
                         f"first (a plan's `model` step)")
    out_dir = set_dir(shape) / layout
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [w for w in workloads if not (out_dir / f"{w}.json").exists()]
    if not todo:
        print(f"{layout}: done already", flush=True)
        return
    todo, extra = wl.with_profiler(todo, extra, shape, layout)
    info = srv.lease()
    installed = srv.check_install(layout, shape)
    # A layout served again for more workloads keeps each server's log.
    runs = json.loads((out_dir / "startup.json").read_text()).get("runs", []) \
        if (out_dir / "startup.json").exists() else []
    log = out_dir / ("server.log" if not runs else f"server.{len(runs) + 1}.log")
    t0 = time.time()
    proc, port, base = srv.serve(layout, shape, model, log, extra)
    started = time.time() - t0
    runs.append({"seconds": started, "log": log.name, "workloads": todo, "lease": info["id"],
                 "card": info["card"], "vllm": installed, "serve_args": extra,
                 "env": srv.env_shown(layout, shape)})
    runs[-1]["fused_graphs"] = fused_graphs(log.read_text(errors="replace"))
    (out_dir / "startup.json").write_text(json.dumps({"seconds": started, "runs": runs}))
    print(f"{layout}: server up in {started:.0f} s ({installed}; lease {info['id']}, "
          f"{info['card']}); fused all-reduce: {summary(runs[-1]['fused_graphs']) or 'no graphs'}",
          flush=True)
    failed = []
    try:
        # The peer's rows must run its patches, the others must not (tiny: no plugin at all).
        plugin = srv.ARCTIC_ENABLED in log.read_text(errors="replace")
        if shape != "tiny" and plugin != (LAYOUTS[layout][0] == "arctic"):
            raise RuntimeError(f"{layout}: the server log {'says' if plugin else 'lacks'} "
                               f"{srv.ARCTIC_ENABLED!r}")
        for w in todo:      # one workload failing does not stop the others
            t1 = time.time()
            try:
                if w == "ctx":
                    wl.context_sweep(base, out_dir, max_model_len(shape))
                elif w == "soak":
                    wl.soak(shape, out_dir, base)
                elif w in wl.BURSTS:
                    wl.burst_trace(w, shape, base, out_dir)
                elif wl.profiled(w):
                    wl.profile_run(layout, w, shape, model, port, out_dir)
                else:
                    wl.bench(layout, w, shape, model, port, out_dir)
                srv.stamp(out_dir / f"{w}.json", info)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"!! {e}", flush=True)
                failed.append(w)
            print(f"{layout}/{w}: {time.time() - t1:.0f} s", flush=True)
            srv.copy_out()
        if failed:
            raise RuntimeError(f"{layout}: failed workloads {failed}")
    finally:
        with open(out_dir / "metrics.txt", "w") as f:
            try:
                f.write(urllib.request.urlopen(base + "/metrics", timeout=30).read().decode())
            except Exception as e:  # noqa: BLE001 - a report, not a check
                f.write(f"# /metrics unavailable: {e}\n")
        srv.stop(proc)
        srv.copy_out()


def run_layouts(layouts: list[str], shape: str, workloads: list[str], extra: list[str]) -> None:
    """run_layout for each layout; one failing does not stop the others."""
    failed = []
    for layout in layouts:
        try:
            run_layout(layout, shape, workloads, extra)
        except Exception as e:  # noqa: BLE001
            print(f"!! {layout}: {e}", flush=True)
            failed.append(layout)
    if failed:
        sys.exit(f"run.py: failed: {failed}")


def beside(into: str, anchor: str, new: list[str], shape: str, workloads: list[str],
           extra: list[str]) -> None:
    """A ratio compares rows of one machine lease.  When the ``new`` layouts' rows and
    ``anchor``'s (those workloads, in the result set of --tag) come from different leases --
    ``new`` ran on a later lease than ``anchor``, after a RESUME -- serve ``anchor`` again on
    this lease into the result set <shape>-<into>, beside a copy of the new rows if they are
    this lease's, else beside the new layouts served again too; `report --tag INTO` then
    holds the comparison.  Nothing to do when they share a lease already, in their own set
    or in <shape>-<into> (a RESUME that brought in the comparison made on one lease, which
    ended before the next step).  The new rows must exist (a failed one is run again by its
    own step first); the anchor's need not (a workload added to the comparison later)."""
    rows, named = set_dir(shape), " ".join(new)
    if srv.one_lease(rows, [anchor, *new], workloads):
        print(f"beside: {anchor} and {named} share a lease")
        return
    TAG[:] = [into]
    to = set_dir(shape)
    if to.is_dir() and srv.one_lease(to, [anchor, *new], workloads):
        print(f"beside: {anchor} and {named} share a lease in {to.name}")
        return
    missing = [f"{n}/{w}" for n in new for w in workloads if not (rows / n / f"{w}.json").exists()]
    if missing and not DRY[0]:
        print(f"beside: missing {' '.join(missing)}: nothing served beside {anchor}")
        sys.exit(1)
    if missing:
        print("beside (dry): no rows yet; should they end on two leases:")
    serve = [anchor]
    if srv.one_lease(rows, new, workloads, this=True):
        print(f"beside: {named} ran on this lease: their rows are copied to {to}")
        for n in [] if DRY[0] else new:
            if not (to / n).is_dir():
                shutil.copytree(rows / n, to / n)
    else:
        print(f"beside: {named} not (all) on this lease: served again beside {anchor}")
        serve += new
    sys.stdout.flush()
    run_layouts(serve, shape, workloads, extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["setup", "layout", "report", "beside", "probe"],
                    help="beside ANCHOR NEW... --into TAG: ANCHOR and NEW's rows of --workloads "
                    "on one machine lease, served again into <shape>-TAG where they are not "
                    "(plan-lib.sh's `beside`)")
    ap.add_argument("layouts", nargs="*")
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--tag", help="result set $BENCH_DIR/res/<shape>-<tag> instead of <shape>: "
                    "a layout served again on a later lease, beside the rows it is compared to")
    ap.add_argument("--into", help="beside: the tag of the result set the comparison goes into")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the servers and clients `layout` would start (and what a resumed "
                    "result set skips), start nothing; also BENCH_DRY_RUN=1")
    ap.add_argument("--workloads", default=",".join(wl.DEFAULT_WORKLOADS),
                    help=f"comma list of {sorted(wl.WORKLOADS) + sorted(wl.SPECIAL_WORKLOADS)}")
    ap.add_argument("--serve-args", default="", help="extra `vllm serve` arguments")
    ap.add_argument("--profile-after", type=float, default=wl.PROFILE[0],
                    help=f"{wl.PROF}<workload>: seconds into the load before tracing")
    ap.add_argument("--profile-steps", type=int, default=wl.PROFILE[1],
                    help=f"{wl.PROF}<workload>: engine steps traced")
    ap.add_argument("--max-model-len", type=int,
                    help="serve with this context (default 34000; lat128k needs 131072)")
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)         # probe (internal)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.max_model_len:
        MAX_LEN_ARG.append(a.max_model_len)
    wl.PROFILE[:] = [a.profile_after, a.profile_steps]
    if a.tag:
        TAG.append(a.tag)
    DRY[0] = DRY[0] or a.dry_run
    if a.what in ("layout", "beside"):
        bad = [layout for layout in a.layouts if layout not in LAYOUTS]
        if bad or not a.layouts:
            sys.exit(f"run.py: unknown layouts {bad}: name them from {sorted(LAYOUTS)}")
        bad = [w for w in a.workloads.split(",") if not wl.known_workload(w)]
        if bad:
            sys.exit(f"run.py: unknown workloads {bad}: name them from "
                     f"{sorted(wl.WORKLOADS) + sorted(wl.SPECIAL_WORKLOADS)}, or {wl.PROF}<one of "
                     "the first>")
    if a.what == "probe":
        wl.probe(a.port, a.tokenizer, a.workloads, a.probe_out)
    elif a.what == "setup" and DRY[0]:
        print(f"[dry] setup: config.json and tokenizer of the {a.shape} shape -> "
              f"{BENCH / 'models' / a.shape}")
    elif a.what == "setup":
        print("model:", write_model(BENCH / "models" / a.shape, a.shape))
    elif a.what == "beside":
        if not a.into or len(a.layouts) < 2:
            sys.exit("run.py: beside ANCHOR NEW... --into TAG")
        beside(a.into, a.layouts[0], a.layouts[1:], a.shape, a.workloads.split(","),
               a.serve_args.split())
    elif a.what == "layout":
        run_layouts(a.layouts, a.shape, a.workloads.split(","), a.serve_args.split())
    else:
        print(report(a.shape))
        srv.copy_out()


if __name__ == "__main__":
    main()
