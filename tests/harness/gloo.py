"""Unit tests' process groups: one Python process per rank, the patched
vLLM's own world / TP / SP groups under gloo, on loopback.  The tests give
the body each rank runs after the shared prologue, which leaves
``rank, world, tp, sp``, ``cfg`` (the VllmConfig), ``ps`` (parallel_state)
and ``ulysses`` in scope; a rank that reaches the end prints ``worker-ok``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from .net import free_port

PROLOGUE = textwrap.dedent('''
    import os, sys, torch
    rank, world, tp, sp, port = map(int, sys.argv[1:6])
    from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps, ulysses
    cfg = VllmConfig(parallel_config=ParallelConfig(tensor_parallel_size=tp,
                     sequence_parallel_size=sp, distributed_executor_backend="mp"))
    with set_current_vllm_config(cfg):
        ps.init_distributed_environment(world, rank, f"tcp://127.0.0.1:{port}", rank, "gloo")
        ps.initialize_model_parallel(tp, 1, backend="gloo")
''')
EPILOGUE = textwrap.dedent('''
    ps.destroy_model_parallel()
    print("worker-ok", rank, flush=True)
''')


def run_ranks(body: str, tmp_path: Path, tp: int, sp: int, timeout: float = 300) -> None:
    """Run ``body`` on TP x SP ranks and fail with a rank's output unless
    every rank finished."""
    script = tmp_path / "worker.py"
    script.write_text(PROLOGUE + textwrap.dedent(body) + EPILOGUE)
    world, port = tp * sp, free_port()
    # (the CPU engine names its shared-memory groups by VLLM_DIST_IDENT; so do we)
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING", OMP_NUM_THREADS="1",
               VLLM_DIST_IDENT=f"gloo-unit-{port}")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(tp), str(sp),
                               str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env) for r in range(world)]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"worker-ok {r}" in out, out[-3000:]
