#!/usr/bin/env python3
"""Does the installed environment work on this host's GPUs?  unpack.sh runs it
right after `pip install`, before anything is measured on the install.

A release whose torch the image lacks brings its own torch, NCCL, cuDNN,
cuBLAS and triton (vLLM 0.33.0: torch 2.14.0): pip's resolution says what they
are, only trying them says whether they run on the host's driver.  So:
torch imports and sees the GPUs, vLLM's compiled ops load against that
torch, a CUDA matmul (fp32 and bf16) agrees with the CPU, and NCCL sums over
two ranks (one process a GPU; the host's NCCL_NVLS_ENABLE and multicast
settings left as they are).  One line per check, then ``smoke: ok`` or
``smoke: FAILED: ...``; exit status 0 only with ``smoke: ok``.

    python3 smoke.py
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import traceback

MULTICAST_VARS = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def imports() -> str:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no GPU")
    import vllm._C_stable_libtorch  # noqa: F401 - vLLM's ops, built against its torch
    import vllm._moe_C_stable_libtorch  # noqa: F401
    import vllm.vllm_flash_attn._vllm_fa3_C  # noqa: F401
    try:
        import flashinfer
        fi = f"flashinfer {flashinfer.__version__}"
    except ImportError as e:
        fi = f"no flashinfer ({e})"
    return f"torch, vllm's compiled ops (_C, _moe_C, fa3), {fi}"


def matmul() -> str:
    import torch

    torch.manual_seed(0)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    ref = (a.double() @ b.double()).float()
    out = []
    for dtype, bound in ((torch.float32, 1e-4), (torch.bfloat16, 2e-2)):
        got = (a.to("cuda", dtype) @ b.to("cuda", dtype)).float().cpu()
        err = ((got - ref).norm() / ref.norm()).item()
        if not err < bound:
            raise RuntimeError(f"{dtype} matmul: relative error {err:.2e} (bound {bound:.0e})")
        out.append(f"{str(dtype).removeprefix('torch.')} rel. error {err:.1e}")
    return ", ".join(out)


def _rank(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120),
                            device_id=torch.device("cuda", rank))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    ok = bool((x == want).all())
    dist.destroy_process_group()
    if not ok:
        raise RuntimeError(f"rank {rank}: the all-reduce gave {x[0].item()}, want {want}")


def all_reduce() -> str:
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < 2:
        return f"skipped ({torch.cuda.device_count()} GPU)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(2, port), nprocs=2, join=True)
    return "NCCL, 2 ranks, 4 MiB: right sums"


def main() -> int:
    print("env: " + " ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in MULTICAST_VARS))
    for name, check in (("import", imports), ("matmul", matmul), ("all-reduce", all_reduce)):
        try:
            print(f"{name}: ok: {check()}", flush=True)
        except BaseException as e:  # noqa: BLE001 - every failure is a verdict
            traceback.print_exc()
            last = [ln for ln in str(e).splitlines() if ln.strip()][-1:]    # spawn's: the rank's
            print(f"smoke: FAILED: {name}: {type(e).__name__}: {''.join(last)}", flush=True)
            return 1
        if name == "import":
            import torch
            print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, NCCL "
                  f"{'.'.join(map(str, torch.cuda.nccl.version()))}), "
                  f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}", flush=True)
    print("smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
