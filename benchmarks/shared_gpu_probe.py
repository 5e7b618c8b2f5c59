#!/usr/bin/env python3
"""Which collectives work between processes that share one GPU, and which of
them a CUDA graph can capture: the question under the one-GPU tier
(``harness.shared_gpu``), asked of torch alone before any engine.

    python3 -m benchmarks.shared_gpu_probe [--worlds 2,4] [--json OUT] [--md OUT]

Four ways to connect the ranks, each at every world size asked:
  gloo         torch's gloo group handed CUDA tensors
  nccl         plain NCCL (it refuses two ranks on one bus id of one host:
               "Duplicate GPU detected")
  nccl-hostid  NCCL with a distinct NCCL_HOSTID per process: each rank looks
               like a host of its own, so NCCL takes its network transport
               (sockets over loopback) between them
  nccl-multirank  NCCL with NCCL_MULTI_RANK_GPU_ENABLE=1, the switch NCCL
               2.30's refusal names ("Multiple Ranks are using the same
               GPU/Partition"): NCCL's own support for ranks sharing a GPU,
               if it holds, and whichever transport it then picks
Each rank checks every collective's numbers against the sum it must give,
then (NCCL only) captures an all-reduce, an all-gather and an all-to-all in
one CUDA graph and checks a replay on new inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

MODES = ("gloo", "nccl", "nccl-hostid", "nccl-multirank")


def _hostid_env(rank: int) -> dict[str, str]:
    return {"NCCL_HOSTID": f"shared-gpu-probe-{os.getpid()}-{rank}", "NCCL_SOCKET_IFNAME": "lo"}


def _rank(rank: int, world: int, mode: str, port: int, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if mode == "nccl-hostid":
        os.environ.update(_hostid_env(rank))
    elif mode == "nccl-multirank":
        os.environ["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
    out: dict[str, str] = {}

    def check(name, fn):
        try:
            t0 = time.time()
            fn()
            torch.cuda.synchronize()
            out[name] = f"ok {time.time() - t0:.3f}s"
        except Exception as e:  # noqa: BLE001 - the probe's table records any failure
            out[name] = f"FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}"

    def expect(got, want, what):
        if not torch.equal(got.cpu(), want.cpu()):
            raise AssertionError(f"{what}: {got.flatten()[:8].tolist()} != "
                                 f"{want.flatten()[:8].tolist()}")

    n = 1 << 16
    full = sum(range(1, world + 1))

    def all_reduce():
        y = torch.full((n,), float(rank + 1), device=dev)
        dist.all_reduce(y)
        expect(y, torch.full((n,), float(full)), "all_reduce")

    def all_gather():      # a flat output: gloo takes no other
        y = torch.empty(world * n, device=dev)
        dist.all_gather_into_tensor(y, torch.full((n,), float(rank), device=dev))
        expect(y.view(world, n), torch.arange(world).float()[:, None].expand(world, n),
               "all_gather")

    def all_to_all():
        inp = torch.arange(world, device=dev, dtype=torch.float32).repeat_interleave(4) + 100 * rank
        o = torch.empty_like(inp)
        dist.all_to_all_single(o, inp)
        want = (torch.arange(world).float() * 100 + rank).repeat_interleave(4)
        expect(o, want, "all_to_all")

    def reduce_scatter():
        inp = torch.full((world * 4,), float(rank + 1), device=dev)
        o = torch.empty(4, device=dev)
        dist.reduce_scatter_tensor(o, inp)
        expect(o, torch.full((4,), float(full)), "reduce_scatter")

    def broadcast():
        y = torch.full((n,), float(rank), device=dev)
        dist.broadcast(y, src=world - 1)
        expect(y, torch.full((n,), float(world - 1)), "broadcast")

    def send_recv():       # a ring: pipeline parallelism's pattern
        y = torch.full((n,), float(rank), device=dev)
        r = torch.empty(n, device=dev)
        ops = [dist.P2POp(dist.isend, y, (rank + 1) % world),
               dist.P2POp(dist.irecv, r, (rank - 1) % world)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        expect(r, torch.full((n,), float((rank - 1) % world)), "send_recv")

    def subgroups():       # two groups of half the ranks each, as TP inside SP
        half = world // 2
        groups = [dist.new_group(list(range(i, i + half))) for i in (0, half)]
        g = groups[rank // half]
        y = torch.full((8,), float(rank + 1), device=dev)
        dist.all_reduce(y, group=g)
        lo = (rank // half) * half
        expect(y, torch.full((8,), float(sum(range(lo + 1, lo + half + 1)))), "subgroup")

    def graph():
        a = torch.empty(n, device=dev)
        g_in = torch.empty(n, device=dev)
        g_out = torch.empty(world, n, device=dev)
        t_in = torch.empty(world * 4, device=dev)
        t_out = torch.empty_like(t_in)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):          # warm-up outside the capture
            dist.all_reduce(a)
            dist.all_gather_into_tensor(g_out, g_in)
            dist.all_to_all_single(t_out, t_in)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            dist.all_reduce(a)
            dist.all_gather_into_tensor(g_out, g_in)
            dist.all_to_all_single(t_out, t_in)
        for k in (1.0, 3.0):               # two replays on new inputs
            a.fill_(k * (rank + 1))
            g_in.fill_(k * rank)
            t_in.copy_(torch.arange(world, device=dev, dtype=torch.float32)
                       .repeat_interleave(4) * k + rank)
            cg.replay()
            torch.cuda.synchronize()
            expect(a, torch.full((n,), k * full), "graph all_reduce")
            expect(g_out, k * torch.arange(world).float()[:, None].expand(world, n),
                   "graph all_gather")
            expect(t_out, (torch.full((world,), k * rank) + torch.arange(world))
                   .repeat_interleave(4), "graph all_to_all")

    try:
        backend = "gloo" if mode == "gloo" else "nccl"
        dist.init_process_group(backend, rank=rank, world_size=world,
                                device_id=None if backend == "gloo" else dev)
        checks = [("all_reduce", all_reduce), ("all_gather", all_gather),
                  ("all_to_all", all_to_all), ("reduce_scatter", reduce_scatter),
                  ("broadcast", broadcast), ("send_recv", send_recv)]
        if world >= 4:
            checks.append(("subgroups", subgroups))
        if backend == "nccl":
            checks.append(("cuda_graph", graph))
        for name, fn in checks:
            check(name, fn)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        out["init"] = f"FAIL {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        traceback.print_exc()
    q.put((rank, out))


def probe(mode: str, world: int, port: int, timeout: float = 90) -> dict:
    """One mode at one world size: each rank's results, or the ranks that hung."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, mode, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    got: dict[int, dict] = {}
    deadline = time.time() + timeout
    while len(got) < world and time.time() < deadline:
        try:
            r, res = q.get(timeout=max(0.1, deadline - time.time()))
            got[r] = res
        except Exception:  # noqa: BLE001 - queue.Empty: the deadline passed
            break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    ranks = [got.get(r, {"init": f"FAIL hang: no answer in {timeout:.0f} s"})
             for r in range(world)]
    names = list(dict.fromkeys(k for r in ranks for k in r))
    cells = {}
    for k in names:
        vals = [r.get(k, "FAIL hang") for r in ranks]
        bad = [v for v in vals if not v.startswith("ok")]
        cells[k] = bad[0] if bad else "ok " + max(v.split()[1] for v in vals)
    return cells


def table(results: dict) -> str:
    checks = list(dict.fromkeys(k for cells in results.values() for k in cells))
    lines = ["| mode, ranks | " + " | ".join(checks) + " |",
             "|---|" + "---|" * len(checks)]
    for key, cells in results.items():
        lines.append(f"| {key} | " + " | ".join(cells.get(k, "-") for k in checks) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    import torch

    head = (f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
            f"{torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} visible GPU(s)")
    print(head, flush=True)
    results = {}
    port = 29650
    for world in map(int, a.worlds.split(",")):
        for mode in a.modes.split(","):
            port += 1
            results[f"{mode}, {world}"] = probe(mode, world, port)
            print(mode, world, json.dumps(results[f"{mode}, {world}"]), flush=True)
    md = f"{head}\n\n{table(results)}\n"
    print(md)
    if a.json:
        Path(a.json).write_text(json.dumps({"env": head, "results": results}, indent=1))
    if a.md:
        Path(a.md).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
