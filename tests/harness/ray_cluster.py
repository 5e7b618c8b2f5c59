"""A Ray cluster on this machine for the Ray executor tests: a head and
optional more nodes, each `ray start`ed on a loopback address, `ray stop`
after.

Loopback only: Ray turns 127.0.0.1 into the machine's routable address
unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (its local-only mode), which the
head, the engine and its Ray workers all get (``LOOPBACK``); vLLM's own
sockets follow VLLM_HOST_IP.

Ray stops its workers with ray.kill, which runs no exit handlers: the
shared-memory segments of their CPU all-reduce and message queues stay in
/dev/shm (upstream's, with or without SP).  ``ray_nodes`` removes the ones
that appeared while it ran and that no process maps."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .net import free_port
from .repo import VERSION

LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VLLM_HOST_IP": "127.0.0.1",
            "RAY_USAGE_STATS_ENABLED": "0"}
# Ray folds workers' log lines that differ only in numbers (and then tags
# them with one of the workers).
NO_DEDUP = {"RAY_DEDUP_LOGS": "0"}
SHM = Path("/dev/shm")


def _mapped_shm() -> set[str]:
    """Names under /dev/shm that some live process maps."""
    names = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if " /dev/shm/" in line:
                names.add(line.split(" /dev/shm/", 1)[1].split(" (deleted)")[0])
    return names


def _remove_leaked_shm(before: set[str]) -> list[str]:
    if not SHM.is_dir():
        return []
    leaked = sorted(n for n in set(os.listdir(SHM)) - before - _mapped_shm()
                    if n.startswith(("psm_", "sem.")) or "-cpushm_" in n)
    for name in leaked:
        (SHM / name).unlink(missing_ok=True)
    return leaked


def _kill_cluster(tmp: str, port: int) -> None:
    """SIGKILL every process of this cluster at once: those started with its
    temp dir or its GCS port on their command line.  `ray stop --force`
    kills the same processes, but class by class with a wait between (~6 s
    a cluster); after this it finds nothing left but what it stops anyway."""
    marks = (tmp.encode(), b":%d\x00" % port)
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:                # gone, or not ours to read
            continue
        if int(proc.name) != os.getpid() and any(m in cmdline for m in marks):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except OSError:
                pass


@contextmanager
def ray_nodes(*nodes: tuple[str, int], env: dict[str, str]):
    """A Ray cluster of `nodes` (address, CPUs), the first its head, all
    on this machine; `ray stop` after (it stops every Ray process of the
    machine: a test run starts no other)."""
    ray = str(Path(sys.executable).with_name("ray"))
    # Short: Ray's socket paths under it must fit a unix socket's 107 bytes.
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    port = free_port()
    extra, env = env, {**os.environ, **env, "TORCHDYNAMO_DISABLE": "1"}
    before = set(os.listdir(SHM)) if SHM.is_dir() else set()
    head, cpus = nodes[0]
    commands = [["--head", "--node-ip-address", head, "--port", str(port), "--temp-dir", tmp,
                 "--include-dashboard=false", "--ray-client-server-port", str(free_port()),
                 "--num-cpus", str(cpus)]]
    commands += [["--address", f"{head}:{port}", "--node-ip-address", ip, "--num-cpus", str(n)]
                 for ip, n in nodes[1:]]
    try:
        for args in commands:
            started = subprocess.run([ray, "start", *args, "--disable-usage-stats"], env=env,
                                     text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, timeout=120)
            assert started.returncode == 0, started.stdout[-3000:]
            assert args[args.index("--node-ip-address") + 1] in started.stdout, \
                started.stdout[-3000:]
        yield {"RAY_ADDRESS": f"{head}:{port}", **extra, **NO_DEDUP}
    finally:
        _kill_cluster(tmp, port)
        subprocess.run([ray, "stop", "--force"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_leaked_shm(before)


def check_ray_ranks(log: str, actor: str, tp: int, sp: int, pp: int = 1) -> None:
    """The ranks were Ray actors of the executor asked for, with SP groups:
    rank 0's SP line, from such an actor.  From 0.32 the compiled-graph
    executor's actors pass on their warnings but not vLLM's INFO lines;
    there: one actor of that class per rank, named as the DAG is torn down
    (the SP groups show in the run's per-rank reports and its result)."""
    sp_line = f"Ulysses SP: rank 0 is SP rank 0 of {sp}, full-TP rank 0 of {tp * sp}"
    if any(f"({actor} pid=" in line and sp_line in line for line in log.splitlines()):
        return
    named = set(re.findall(rf"Actor\({actor}, ([0-9a-f]+)\)", log))
    assert VERSION != "0.26.0" and actor == "RayWorkerWrapper" and len(named) == tp * sp * pp, \
        log[-3000:]
