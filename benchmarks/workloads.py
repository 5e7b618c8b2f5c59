"""The workloads a server is measured with and the client that runs each: `vllm bench serve`
(random dataset, exact lengths), run.py's own bursty replay, the context sweep, the soak
(tests/harness/client.py's), and `prof_<workload>`, a window of the server's steps traced under
that workload's load."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from benchmarks.layouts import BENCH, ROOT, set_dir
from benchmarks.server import env_for, gpu_memory_mib, metric, scrape, server_means, server_times
from benchmarks.shapes import SHAPES, word
from harness.client import post

# name -> `vllm bench serve` arguments (random dataset; exact output lengths).
WORKLOADS = {
    "lat1k": ["--random-input-len", "1024", "--random-output-len", "128", "--num-prompts", "8",
              "--max-concurrency", "1"],
    "lat8k": ["--random-input-len", "8192", "--random-output-len", "128", "--num-prompts", "6",
              "--max-concurrency", "1"],
    "lat32k": ["--random-input-len", "32768", "--random-output-len", "64", "--num-prompts", "4",
               "--max-concurrency", "1"],
    "sat": ["--random-input-len", "2000", "--random-output-len", "250", "--num-prompts", "600"],
    # The Shift paper's setting: 4k in / 250 out, one user and at saturation; its curve.
    # lat128k needs --max-model-len 131072 (the shape's max_position_embeddings).
    "lat4k": ["--random-input-len", "4000", "--random-output-len", "250", "--num-prompts", "6",
              "--max-concurrency", "1"],
    "sat4k": ["--random-input-len", "4000", "--random-output-len", "250", "--num-prompts", "1000"],
    # 4 GPUs: the paper's load per GPU (1000 at once on 8), half of sat4k's time
    "sat4k_500": ["--random-input-len", "4000", "--random-output-len", "250",
                  "--num-prompts", "500"],
    "lat128k": ["--random-input-len", "130000", "--random-output-len", "64", "--num-prompts", "2",
                "--max-concurrency", "1"],
    # the one-H200 dry run: the same 4k/250 saturation, small enough for one GPU and a 70B
    "sat4k_small": ["--random-input-len", "4000", "--random-output-len", "250",
                    "--num-prompts", "64"],
}
for _r in (1, 2, 4, 8, 16, 32, 64):                 # the paper's curve: 4k/250, Poisson arrivals
    WORKLOADS[f"q4k_{_r}"] = ["--random-input-len", "4000", "--random-output-len", "250",
                              "--num-prompts", str(max(16, 8 * _r)), "--request-rate", str(_r)]


# `prof_<workload>`: the workload's load again, vLLM's torch profiler tracing PROFILE[1] engine
# steps on every rank once the server has run it PROFILE[0] seconds (steady load; a workload of
# many users: with one user the client's one-prompt test run looks the same), the client stopped
# once rank 0's trace is written; that trace summarised per kind of step (`serve_profile.py`)
# is the result, `prof_<workload>.json`.  `prof<N>_<workload>` starts its window N s in
# instead (a load's phases differ: at 5 s every layout prefills, at 30 s a full KV cache may
# leave only decodes); one server runs several windows, one after another.  It runs after the
# layout's other workloads: a profiler once started annotates every later step.  Traces stay
# under $BENCH_DIR/traces (too large for res.tgz).
PROF = "prof_"
PROFILE = [30.0, 40]                                # run.py --profile-after, --profile-steps
_PROFILED = re.compile(r"prof(\d+)?_(.+)")


def profiled(workload: str) -> bool:
    return _PROFILED.fullmatch(workload) is not None


def base_workload(workload: str) -> str:
    m = _PROFILED.fullmatch(workload)
    return m.group(2) if m else workload


def profile_after(workload: str) -> float:
    """Seconds into the load before `workload`'s window: its own N, else --profile-after."""
    m = _PROFILED.fullmatch(workload)
    return float(m.group(1)) if m and m.group(1) else PROFILE[0]


def known_workload(workload: str) -> bool:
    return (base_workload(workload) in WORKLOADS if profiled(workload)
            else workload in WORKLOADS or workload in SPECIAL_WORKLOADS)


def rate_of(workload: str) -> float | None:
    """Requests/s of a latency-throughput workload (q4k_N: 4000/250 at N a second)."""
    m = re.fullmatch(r"q4k_(\d+)", workload)
    return float(m.group(1)) if m else None


# Bursty arrivals, replayed by run.py itself (`burst_trace`): phases of (name, seconds,
# requests), each phase's requests at uniform random times inside it (seeded), so bursts of
# many requests land on a server still decoding the quiet phase's.  4000 in / 250 out, as the
# paper's 4k/250; `burst` is the 8-GPU trace, `burst1` the one-H200 dry run's.
BURSTS = {
    "burst": dict(isl=4000, osl=250, phases=[
        ("quiet1", 20.0, 20), ("burst1", 1.0, 128), ("quiet2", 30.0, 30), ("burst2", 1.0, 256),
        ("quiet3", 30.0, 30)]),
    "burst1": dict(isl=4000, osl=250, phases=[
        ("quiet1", 10.0, 5), ("burst1", 1.0, 16), ("quiet2", 15.0, 6), ("burst2", 1.0, 24),
        ("quiet3", 10.0, 4)]),
}
DEFAULT_WORKLOADS = ["lat1k", "lat8k", "lat32k", "sat"]
SPECIAL_WORKLOADS = {"ctx": "context sweep: HTTP 400 past --max-model-len, healthy after",
                     "soak": "1200 mixed requests at 256 users, 10% cancelled mid-stream",
                     **{b: "bursty arrivals, TTFT/TPOT per phase" for b in BURSTS}}


def bench_args(workload: str, shape: str) -> list[str]:
    args = list(WORKLOADS[base_workload(workload)])
    if shape == "tiny":      # keep the dry run small
        args = [str(min(int(a), 256)) if a.isdigit() else a for a in args]
    return args


def bench_cmd(model: Path, port: int | str, seed: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
            "--backend", "vllm", "--model", "m", "--tokenizer", str(model),
            "--port", str(port), "--dataset-name", "random", "--ignore-eos",
            "--seed", str(seed), "--num-warmups", "0", *extra]


def seed_of(workload: str) -> int:
    """The client's seed for a workload's prompts: its own, so that no two workloads on one
    server send the same prompts.  vLLM's random dataset makes prompt i a run of consecutive
    token ids from offset[i] + i, the offsets drawn from the seed after the lengths: two
    workloads of one seed and one prompt count (lat8k and lat4k, 6 each) send prompts of which
    one is the other's prefix, and a TTFT measured on it is a cache hit, not a prefill
    (docs/benchmarks.md: the rows this touched).  A warm-up (one prompt)
    and a profile (`prof_<w>`, <w>'s load again) take the seed of their own name."""
    return zlib.crc32(workload.encode()) % 1_000_000


def measured(workload: str, out_dir: Path, args: list[str]) -> list[str]:
    """`vllm bench serve` arguments of a workload's measured run (after its warm-up)."""
    return ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(out_dir),
            "--result-filename", f"{workload}.json", *args]


def warm_up(args: list[str]) -> list[str]:
    """A workload's arguments for one prompt (of another seed: see bench and seed_of)."""
    n = args.index("--num-prompts") + 1
    return args[:n] + ["1"] + args[n + 1:]


def bench(layout: str, workload: str, shape: str, model: Path, port: int, out_dir: Path) -> None:
    args = bench_args(workload, shape)
    base = f"http://127.0.0.1:{port}"

    def cmd(seed: int, extra: list[str]) -> list[str]:
        return bench_cmd(model, port, seed, extra)
    # Warm up with one prompt of another seed, not `vllm bench`'s own warm-up:
    # that one repeats the first measured prompt, which then hits the prefix
    # cache (one request in every latency workload was a cache hit), and it
    # would fall inside the server's /metrics window.
    warm = warm_up(args)
    log = out_dir / f"{workload}.log"
    with open(log, "w") as out:
        subprocess.run(cmd(seed_of("warm-" + workload), warm), stdout=out,
                       stderr=subprocess.STDOUT, env=env_for(layout, shape), timeout=900)
        before = server_times(base)
        rc = subprocess.run(cmd(seed_of(workload), measured(workload, out_dir, args)),
                            stdout=out, stderr=subprocess.STDOUT,
                            env=env_for(layout, shape), timeout=900).returncode
    result = out_dir / f"{workload}.json"
    if rc != 0 or not result.exists():
        raise RuntimeError(f"{layout}/{workload}: bench failed (rc={rc}):\n"
                           + log.read_text()[-3000:])
    r = json.loads(result.read_text())
    if "itls" in r:   # per request: keep start, TTFT, end-to-end; drop the token-level lists
        r["e2els"] = [t + sum(i) if t else None for t, i in zip(r["ttfts"], r.pop("itls"))]
        r.pop("generated_texts", None)
    r["server"] = server_means(before, server_times(base))
    result.write_text(json.dumps(r))
    hits = r["server"].get("prefix_cache_hits_tokens")
    if hits:
        print(f"{layout}/{workload}: the prefix cache held {hits:.0f} of its prompt tokens: "
              "its TTFT is not all prefill", flush=True)
    want = int(args[args.index("--num-prompts") + 1])
    if r.get("completed") != want or r.get("failed", 0):
        result.rename(result.with_suffix(".failed.json"))    # not done: rerun next time
        # `vllm bench` keeps only the HTTP reason ("Bad Request"): replay the
        # same prompts to record what the server said.
        subprocess.run([sys.executable, "-m", "benchmarks.run", "probe", "--port", str(port),
                        "--tokenizer", str(model), "--workloads", workload, "--probe-out",
                        str(out_dir / f"{workload}.errors.json")],
                       env=env_for(layout, shape), cwd=ROOT, timeout=900)
        raise RuntimeError(f"{layout}/{workload}: {r.get('completed')} of {want} requests "
                           f"completed, {r.get('failed')} failed")


def post_profiler(base: str, path: str) -> None:
    """POST to the server's profiler; a failure is printed (a profile is a report, not a
    check)."""
    try:
        urllib.request.urlopen(urllib.request.Request(base + path, method="POST"), timeout=600)
    except (OSError, urllib.error.URLError) as e:
        print(f"run.py: POST {path}: {e}", flush=True)


def trace_dir(shape: str, layout: str) -> Path:
    return BENCH / "traces" / set_dir(shape).name / layout


def profiler_args(shape: str, layout: str) -> list[str]:
    """`vllm serve`'s profiler, off until /start_profile: PROFILE[1] steps on every rank,
    no stacks or shapes (a small trace, little overhead), the API server not traced."""
    d = trace_dir(shape, layout)
    d.mkdir(parents=True, exist_ok=True)
    return ["--profiler-config", json.dumps(dict(
        profiler="torch", torch_profiler_dir=str(d.resolve()), torch_profiler_with_stack=False,
        torch_profiler_dump_cuda_time_total=False, ignore_frontend=True,
        max_iterations=PROFILE[1]), separators=(",", ":"))]


def with_profiler(todo: list[str], extra: list[str], shape: str,
                  layout: str) -> tuple[list[str], list[str]]:
    """Profiled runs last (PROF says why), and the server's profiler when there is one."""
    todo = sorted(todo, key=profiled)
    if todo[-1:] and profiled(todo[-1]):
        extra = [*extra, *profiler_args(shape, layout)]
    return todo, extra


def running(base: str) -> float:
    """Requests the server runs now (all engines), 0 when /metrics cannot be read."""
    return sum(metric(scrape(base) or "", "vllm:num_requests_running"))


def settled(paths: list[Path], quiet: float = 5.0, limit: float = 300.0) -> None:
    """Wait until no file of ``paths`` has grown for ``quiet`` seconds: a worker writes its
    trace straight into its final name (gzip, tens of MiB at 70B)."""
    end, last, still = time.time() + limit, None, time.time()
    while time.time() < end:
        sizes = [p.stat().st_size if p.exists() else -1 for p in paths]
        if sizes != last:
            last, still = sizes, time.time()
        elif time.time() - still >= quiet:
            return
        time.sleep(1)


def profile_run(layout: str, workload: str, shape: str, model: Path, port: int,
                out_dir: Path) -> None:
    """`prof_<w>`: <w>'s load, traced for PROFILE[1] steps from PROFILE[0] s (`prof<N>_<w>`:
    N s) after it reached the server; once rank 0's trace is written the client is stopped
    (the rest of the load would tell nothing more, and the server aborts what it was
    sending).  Writes `<workload>.json`: the window's summary (`serve_profile.py`), DP:
    engine 0's rank 0."""
    from benchmarks.serve_profile import summarize_serving
    from benchmarks.step_profile import load_trace, rank0_traces
    args = bench_args(workload, shape)
    base = f"http://127.0.0.1:{port}"
    env = env_for(layout, shape)
    after = profile_after(workload)
    with open(out_dir / f"{workload}.log", "w") as out:
        subprocess.run(bench_cmd(model, port, seed_of("warm-" + workload), warm_up(args)),
                       stdout=out, stderr=subprocess.STDOUT, env=env, timeout=900)
        since = time.time()
        client = subprocess.Popen(bench_cmd(model, port, seed_of(workload), args), stdout=out,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            # From the load's arrival, not the client's start (its imports, its prompts and
            # its one-prompt test run come first): the server running more than one request.
            users = args[args.index("--max-concurrency") + 1] if "--max-concurrency" in args else ""
            while running(base) < (1 if users == "1" else 2) and client.poll() is None:
                time.sleep(0.5)
            time.sleep(after)
            if client.poll() is not None:
                raise RuntimeError(f"{layout}/{workload}: the load ended (rc={client.returncode}) "
                                   f"before {after:.0f} s: trace earlier")
            post_profiler(base, "/start_profile")
            deadline = time.time() + 600
            while not rank0_traces(trace_dir(shape, layout), since) and time.time() < deadline:
                if client.poll() is not None:      # the load ended first: write what was traced
                    post_profiler(base, "/stop_profile")
                    break
                time.sleep(2)
        finally:
            if client.poll() is None:
                os.killpg(client.pid, signal.SIGINT)
                try:
                    client.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(client.pid, signal.SIGKILL)
                    client.wait()
        post_profiler(base, "/stop_profile")        # ready for another window
    found = rank0_traces(trace_dir(shape, layout), since)
    if not found:
        raise RuntimeError(f"{layout}/{workload}: no rank-0 trace under {trace_dir(shape, layout)}")
    path = min(found, key=lambda p: ("dp0_" not in p.name, -p.stat().st_mtime))
    settled([path])
    summary = summarize_serving(load_trace(path), layout)
    summary.update(workload=workload, trace=path.name, after_s=after)
    (out_dir / f"{workload}.json").write_text(json.dumps(summary, indent=1))
    print(f"{layout}/{workload}: {summary['steps']} steps traced, GPU idle "
          f"{100 * summary['gpu_idle_share']:.1f}%", flush=True)


def probe(port: int, tokenizer: str, workload: str, out: Path) -> None:
    """Send a workload's prompts (same dataset and seed as `vllm bench`) one
    at a time and keep every non-200 answer with its body."""
    from vllm.benchmarks.datasets import RandomDataset
    from vllm.tokenizers import get_tokenizer

    args = WORKLOADS[workload]
    val = lambda k: int(args[args.index(k) + 1])  # noqa: E731
    reqs = RandomDataset(random_seed=seed_of(workload)).sample(
        tokenizer=get_tokenizer(tokenizer), num_requests=val("--num-prompts"),
        input_len=val("--random-input-len"), output_len=val("--random-output-len"))
    errors = []
    for i, rq in enumerate(reqs):
        body = {"model": "m", "prompt": rq.prompt, "ignore_eos": True,
                "max_tokens": rq.expected_output_len}
        try:
            post(f"http://127.0.0.1:{port}/v1/completions", body, 600).read()
        except urllib.error.HTTPError as e:
            errors.append({"request": i, "prompt_len": rq.prompt_len, "status": e.code,
                           "body": e.read().decode(errors="replace")[:2000]})
    out.write_text(json.dumps({"requests": len(reqs), "errors": errors}, indent=1))
    print(f"probe: {len(errors)} of {len(reqs)} failed -> {out}", flush=True)


def context_sweep(base: str, out_dir: Path, max_model_len: int) -> None:
    """Seed 002's method: grow the prompt until past --max-model-len.  The
    longest prompt that fits (with its 16 output tokens) must be served, one
    token more gets HTTP 400, and the server keeps serving."""
    fits = max_model_len - 16
    lengths = [n for n in (1024 * 2 ** k for k in range(8)) if n < fits] + [fits, fits + 1]
    rows = []
    for n in lengths:
        prompt = " ".join(word((i * 7919) % 100000) for i in range(n))
        body = {"model": "m", "prompt": prompt, "max_tokens": 16, "ignore_eos": True}
        t0 = time.time()
        try:
            json.load(post(base + "/v1/completions", body, 600))
            rows.append({"prompt_tokens": n, "status": 200, "seconds": time.time() - t0})
        except urllib.error.HTTPError as e:
            rows.append({"prompt_tokens": n, "status": e.code, "seconds": time.time() - t0,
                         "body": e.read().decode(errors="replace")[:500]})
    alive = urllib.request.urlopen(base + "/health", timeout=30).status
    (out_dir / "ctx.json").write_text(json.dumps({"rows": rows, "health_after": alive}, indent=1))
    want = [200] * (len(lengths) - 1) + [400]
    if [r["status"] for r in rows] != want or alive != 200:
        raise RuntimeError(f"context sweep: statuses {[r['status'] for r in rows]}, want {want}; "
                           f"/health {alive}")


def burst_schedule(name: str, shape: str) -> tuple[int, int, list[tuple[str, float]]]:
    """(input tokens, output tokens, [(phase, arrival s)] sorted) of a BURSTS trace; the tiny
    shape keeps its phases' order with 128/16 tokens, a quarter of the time and <= 8 requests a
    phase."""
    import random
    spec = BURSTS[name]
    isl, osl, phases = spec["isl"], spec["osl"], spec["phases"]
    if shape == "tiny":
        isl, osl = 128, 16
        phases = [(p, secs / 4, min(n, 8)) for p, secs, n in phases]
    rng = random.Random(0)
    arrivals, t = [], 0.0
    for phase, secs, n in phases:
        arrivals += [(phase, t + rng.uniform(0, secs)) for _ in range(n)]
        t += secs
    return isl, osl, sorted(arrivals, key=lambda a: a[1])


def pct(xs: list[float], p: float) -> float:
    """The p-quantile (0..1) of xs, nearest rank; nan when empty."""
    xs = sorted(xs)
    return xs[round(p * (len(xs) - 1))] if xs else float("nan")


def burst_trace(name: str, shape: str, base: str, out_dir: Path) -> None:
    """Replay a BURSTS trace against the server: every request streamed (/v1/completions,
    ignore_eos, exact lengths), sent at its arrival time whatever is still running.  Per
    request: phase, arrival, TTFT, TPOT ((last token - first) / (tokens - 1)); per phase and
    over all: median and p99 of both -> <name>.json."""
    import asyncio
    import random

    import aiohttp  # a vLLM requirement: the image's Python has it

    isl, osl, arrivals = burst_schedule(name, shape)
    vocab = min(100000, SHAPES[shape][1] - 3)
    rng = random.Random(seed_of(name))
    # distinct random words: no prefix-cache hits; one word is one token (+ BOS = isl)
    prompts = [" ".join(word(rng.randrange(vocab)) for _ in range(isl - 1)) for _ in arrivals]

    async def one(session, prompt: str, at: float, t0: float) -> dict:
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        start = time.perf_counter()
        body = {"model": "m", "prompt": prompt, "max_tokens": osl, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        first = last = None
        tokens = 0
        try:
            async with session.post(base + "/v1/completions", json=body) as resp:
                if resp.status != 200:
                    return {"start": start - t0, "error": f"HTTP {resp.status}: "
                            + (await resp.text())[:300]}
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if chunk.get("choices") and chunk["choices"][0].get("text"):
                        last = time.perf_counter()
                        first = first or last
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        except (TimeoutError, aiohttp.ClientError) as e:
            return {"start": start - t0, "error": repr(e)[:300]}
        if first is None or tokens != osl:
            return {"start": start - t0, "error": f"{tokens} of {osl} tokens"}
        return {"start": start - t0, "ttft": first - start,
                "tpot": (last - first) / max(1, tokens - 1), "e2el": last - start}

    async def replay() -> list[dict]:
        timeout = aiohttp.ClientTimeout(total=1800)
        async with aiohttp.ClientSession(timeout=timeout,
                                         connector=aiohttp.TCPConnector(limit=0)) as session:
            warm = " ".join(word(rng.randrange(vocab)) for _ in range(isl - 1))
            await one(session, warm, 0.0, time.perf_counter())     # warm-up, not measured
            t0 = time.perf_counter() + 0.5
            return await asyncio.gather(*(one(session, p, at, t0)
                                          for p, (_, at) in zip(prompts, arrivals)))

    before = server_times(base)
    t_start = time.time()
    rows = asyncio.run(replay())
    seconds = time.time() - t_start
    for row, (phase, at) in zip(rows, arrivals):
        row.update(phase=phase, scheduled=at)

    def stats(rs: list[dict]) -> dict:
        ok = [r for r in rs if "ttft" in r]
        ttft, tpot = [1e3 * r["ttft"] for r in ok], [1e3 * r["tpot"] for r in ok]
        return {"requests": len(rs), "completed": len(ok),
                "median_ttft_ms": pct(ttft, .5), "p99_ttft_ms": pct(ttft, .99),
                "median_tpot_ms": pct(tpot, .5), "p99_tpot_ms": pct(tpot, .99)}
    phases = list(dict.fromkeys(p for p, _ in arrivals))
    result = {"trace": name, "input_len": isl, "output_len": osl, "seconds": seconds,
              "phases": {p: stats([r for r in rows if r["phase"] == p]) for p in phases},
              **stats(rows),
              "output_throughput": osl * sum("ttft" in r for r in rows) / seconds,
              "server": server_means(before, server_times(base)),
              "rows": rows}
    out = out_dir / f"{name}.json"
    out.write_text(json.dumps(result))
    errors = [r for r in rows if "error" in r]
    if errors:
        out.rename(out.with_suffix(".failed.json"))              # not done: rerun next time
        raise RuntimeError(f"{name}: {len(errors)} of {len(rows)} failed, e.g. "
                           f"{errors[0]['error']}")


def soak(shape: str, out_dir: Path, base: str) -> None:
    """The benchmarks issue's soak: >= 1000 mixed-length requests at
    saturation, half streamed, 10% dropped by the client mid-stream (the
    CPU tests run the same client, tests/harness/client.py, at 100).  It
    passes with no error, no hang (watchdog), every other request complete
    with its tokens, /health good, nothing left running, and each GPU's
    memory.used back within 512 MiB of its level before the soak."""
    from harness.client import Soak, run_soak

    tiny = shape == "tiny"
    cfg = Soak(requests=120 if tiny else 1200, concurrency=16 if tiny else 256,
               prompt_words=(2, 200) if tiny else (16, 4000),
               max_tokens=(1, 32) if tiny else (1, 512),
               cancel_tokens=300 if tiny else 2000, word=word,
               vocab=(0, min(100000, SHAPES[shape][1] - 3)), watchdog_s=900)
    before = gpu_memory_mib()
    summary = run_soak(base, "m", cfg)
    after = gpu_memory_mib()
    summary["gpu_memory_mib"] = {"before": before, "after": after}
    grown = [a - b for a, b in zip(after, before) if a - b > 512]
    if grown:
        summary["problems"].append(f"GPU memory.used grew by {grown} MiB over the soak")
    (out_dir / "soak.json").write_text(json.dumps(summary, indent=1))
    if summary["problems"]:
        (out_dir / "soak.json").rename(out_dir / "soak.failed.json")   # not done: rerun next time
        raise RuntimeError(f"soak: {summary['problems']}")
