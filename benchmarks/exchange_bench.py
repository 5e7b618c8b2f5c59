#!/usr/bin/env python3
"""How fast can SP=2 exchange heads for tokens?  Ways to do the Ulysses
all-to-all timed alone, at the step sizes of an 8k prefill (large transfers per layer)
and a 256-sequence decode (many small latency-bound calls; docs/benchmarks.md has the
profiles).  The fastest correct one is wanted before the
model's exchange is changed.

    python3 -m benchmarks.exchange_bench [--out DIR]          # 2 GPUs
    python3 -m benchmarks.exchange_bench --device cpu          # dry run (gloo)

Ways (each checked for the right blocks before it is timed):
  pynccl      ours today: vLLM's NCCL communicator, grouped send/recv, plus a
              copy of the own block (needs vLLM on the path)
  pynccl_self the same with the own block sent to self inside the NCCL group
  p2p         the same through torch's NCCL process group
  a2a_single  torch's all_to_all_single over NCCL
  symm_put    symmetric memory: write the peer's block straight into its
              buffer (one copy kernel over NVLink), own block locally, then a
              barrier; two buffers alternate so one barrier per exchange is
              enough (a buffer is rewritten only after the peer passed the
              next barrier, i.e. after it consumed it)
Times: CUDA events around 200 back-to-back exchanges (eager), and the same in
one CUDA graph for the ways the server captures (pynccl, symm_put).  Writes DIR/exchange[TAG].json
(with the NCCL_* settings it ran under) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Llama-3.1-8B per layer at SP=2: q 32 heads, k and v 8 heads, head dim 128.
# Per-peer block widths: q/k/v going out (48 heads / 2 * 128), attention
# output coming back (32 heads / 2 * 128).
WIDTHS = {"qkv": 3072, "out": 2048}
STEPS = {"decode256": 128, "prefill1k": 512, "prefill8k": 4096}   # tokens per rank


def expected(rank: int, n: int, w: int, device, dtype) -> torch.Tensor:
    # block j of rank r's input holds r*10 + j; after the exchange block j
    # of rank r holds what rank j sent it: j*10 + r.
    return torch.stack([torch.full((n, w), float(j * 10 + rank), device=device, dtype=dtype)
                        for j in range(2)])


def make_input(rank: int, n: int, w: int, device, dtype) -> torch.Tensor:
    return torch.stack([torch.full((n, w), float(rank * 10 + j), device=device, dtype=dtype)
                        for j in range(2)])


class PyNccl:
    """Ours exactly: vLLM's own NCCL communicator, grouped send/recv on the
    current stream (what ulysses._all_to_all runs, captured in graphs)."""
    name = "pynccl"
    graphs = True

    def __init__(self, rank, device):
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator

        self.rank, self.peer = rank, 1 - rank
        self.comm = PyNcclCommunicator(dist.new_group(backend="gloo"), device)
        if self.comm.disabled:
            raise RuntimeError("PyNcclCommunicator is disabled")

    def __call__(self, x):
        out = torch.empty_like(x)
        out[self.rank].copy_(x[self.rank])
        self.comm.group_start()
        self.comm.send(x[self.peer], self.peer)
        self.comm.recv(out[self.peer], self.peer)
        self.comm.group_end()
        return out


class PyNcclSelf(PyNccl):
    """As ours, but the own block goes through NCCL too (a send/recv to self
    in the same group): the copy then runs inside the NCCL kernel, beside the
    peer transfer, instead of as a separate memcpy before it."""
    name = "pynccl_self"

    def __call__(self, x):
        out = torch.empty_like(x)
        self.comm.group_start()
        for j in (self.rank, self.peer):
            self.comm.send(x[j], j)
            self.comm.recv(out[j], j)
        self.comm.group_end()
        return out


class P2P:
    """torch's NCCL process group: timed eager only (a failed capture of its
    internal stream could leave one rank waiting on the other)."""
    name = "p2p"
    graphs = False

    def __init__(self, rank, device):
        self.rank, self.peer = rank, 1 - rank

    def __call__(self, x):
        out = torch.empty_like(x)
        out[self.rank].copy_(x[self.rank])
        ops = [dist.P2POp(dist.isend, x[self.peer], self.peer),
               dist.P2POp(dist.irecv, out[self.peer], self.peer)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        return out


class A2ASingle:
    name = "a2a_single"
    graphs = False

    def __init__(self, rank, device):
        pass

    def __call__(self, x):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return out


class SymmPut:
    name = "symm_put"
    graphs = True

    def __init__(self, rank, device, max_elems=2 * 4096 * 3072, dtype=torch.bfloat16):
        import torch.distributed._symmetric_memory as symm_mem

        self.rank, self.peer = rank, 1 - rank
        if hasattr(symm_mem, "enable_symm_mem_for_group"):     # required by older torch
            symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
        self.bufs = [symm_mem.empty(max_elems, dtype=dtype, device=device) for _ in range(2)]
        self.hdls = [symm_mem.rendezvous(b, dist.group.WORLD) for b in self.bufs]
        self.turn = 0

    def __call__(self, x):
        i, self.turn = self.turn, 1 - self.turn
        hdl, shape = self.hdls[i], x.shape
        mine = self.bufs[i][: x.numel()].view(shape)
        theirs = hdl.get_buffer(self.peer, tuple(shape), x.dtype)
        theirs[self.rank].copy_(x[self.peer])      # over NVLink, into the peer's buffer
        mine[self.rank].copy_(x[self.rank])
        hdl.barrier(channel=i)
        return mine


def timed(fn, x, iters, graph):
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn(x)
        run = g.replay
    else:
        def run():
            for _ in range(iters):
                fn(x)
    run()                                   # warm
    torch.cuda.synchronize()
    dist.barrier()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    run()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / iters   # µs per exchange


def worker(rank, port, device_kind, out, iters, tag):
    cpu = device_kind == "cpu"
    device = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if not cpu:
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if cpu else "nccl", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=2, device_id=None if cpu else device)
    dtype = torch.float32 if cpu else torch.bfloat16
    ways = [P2P, A2ASingle] + ([] if cpu else [PyNccl, SymmPut, PyNcclSelf])  # the least sure last
    rows = []
    for cls in ways:
        try:
            fn = cls(rank, device)
        except Exception as e:  # noqa: BLE001 - a way this host lacks is a row, not a crash
            rows.append({"way": cls.name, "error": f"{type(e).__name__}: {e}"})
            continue
        for step, n in STEPS.items():
            if cpu and n > 512:
                continue
            for what, w in WIDTHS.items():
                x = make_input(rank, n, w, device, dtype)
                row = {"way": cls.name, "step": step, "exchange": what, "tokens_per_rank": n,
                       "mb_each_way": n * w * x.element_size() / 1e6}
                got = fn(x)
                if not torch.equal(got, expected(rank, n, w, device, dtype)):
                    row["error"] = "wrong blocks"
                    rows.append(row)
                    continue
                if not cpu:
                    for graph in (False, True) if cls.graphs else (False,):
                        key = "graph_us" if graph else "eager_us"
                        try:
                            row[key] = timed(fn, x, iters, graph)
                        except Exception as e:  # noqa: BLE001
                            row[key] = None
                            row[key + "_error"] = f"{type(e).__name__}: {e}"[:200]
                            torch.cuda.synchronize()
                    # and still right after the timed loops (buffers reused, graphs replayed)
                    x2 = x + 100
                    if not torch.equal(fn(x2), expected(rank, n, w, device, dtype) + 100):
                        row["error"] = "wrong blocks after the timed runs"
                    us = row.get("graph_us") or row.get("eager_us")
                    if us:
                        row["gb_per_s_each_way"] = row["mb_each_way"] / us * 1e3     # MB/µs = TB/s
                rows.append(row)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        (out / f"exchange{tag}.json").write_text(json.dumps({"nccl_env": env, "rows": rows},
                                                            indent=1))
        print(f"NCCL settings: {env or 'defaults'}")
        print(table(rows))
    dist.barrier()
    dist.destroy_process_group()


def table(rows) -> str:
    lines = ["| way | step | exchange | MB each way | eager µs | graph µs | GB/s each way |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "step" not in r:
            lines.append(f"| {r['way']} | — | — | — | {r['error']} | | |")
            continue

        def f(k, fmt="{:.1f}"):
            v = r.get(k)
            return r.get(k + "_error", "—")[:60] if v is None else fmt.format(v)
        lines.append(f"| {r['way']} | {r['step']} | {r['exchange']} | {r['mb_each_way']:.2f} | "
                     f"{r.get('error') or f('eager_us')} | {f('graph_us')} | "
                     f"{f('gb_per_s_each_way')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("BENCH_DIR", "/root/bench"))
                    / "res" / "exchange")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--tag", default="", help="suffix of the output file, e.g. the NCCL settings "
                    "this run was given in its environment")
    args = ap.parse_args()
    if args.device == "cuda" and torch.cuda.device_count() < 2:
        sys.exit("exchange_bench.py: needs 2 GPUs (or --device cpu for a dry run)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, args.device, args.out, args.iters, args.tag), nprocs=2)


if __name__ == "__main__":
    main()
