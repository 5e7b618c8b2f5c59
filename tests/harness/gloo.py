"""Unit tests' process groups: one Python process per rank, the patched
vLLM's own world / TP / SP groups under gloo, on loopback.  The tests give
the body each rank runs after the shared prologue, which leaves
``rank, world, tp, sp``, ``cfg`` (the VllmConfig), ``ps`` (parallel_state)
and ``ulysses`` in scope; a rank that reaches the end prints ``worker-ok``.

The ranks are forked from one launcher that has imported torch, vLLM's
config and distributed modules and the body's own top-level imports: on
the 2-core CI machine, four ranks importing vLLM each took ~25 s of every
TP=2 x SP=2 test before any rank ran a line of it.  Nothing is initialised
before the fork (no process group, no config, no thread pool: OMP_NUM_THREADS
is 1), so each rank starts as a fresh interpreter would after its imports."""

from __future__ import annotations

import os
import signal
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
# argv: script world tp sp port outdir.  Runs the script's top-level
# imports, then forks one rank per process, each writing to outdir/rank<r>;
# the first rank to fail takes the others down (they would wait for it in
# a collective).
LAUNCHER = textwrap.dedent('''
    import ast, os, signal, sys, traceback
    script, world, tp, sp, port, outdir = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
    code = open(script).read()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module([node], []), script, "exec"), {})
    sys.stdout.flush(), sys.stderr.flush()
    ranks = set()
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            fd = os.open(os.path.join(outdir, f"rank{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1), os.dup2(fd, 2)
            sys.argv = [script, *map(str, (rank, world, tp, sp, port))]
            status = 0
            try:
                exec(compile(code, script, "exec"), {"__name__": "__main__"})
            except BaseException:
                traceback.print_exc()
                status = 1
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(status)
        ranks.add(pid)
    failed = False
    while ranks:
        pid, status = os.wait()
        ranks.discard(pid)
        if os.waitstatus_to_exitcode(status) != 0 and not failed:
            failed = True
            for other in ranks:
                os.kill(other, signal.SIGKILL)
    sys.exit(int(failed))
''')


def run_ranks(body: str, tmp_path: Path, tp: int, sp: int, timeout: float = 300) -> None:
    """Run ``body`` on TP x SP ranks and fail with a rank's output unless
    every rank finished."""
    script, launcher = tmp_path / "worker.py", tmp_path / "launch.py"
    script.write_text(PROLOGUE + textwrap.dedent(body) + EPILOGUE)
    launcher.write_text(LAUNCHER)
    world, port = tp * sp, free_port()
    # (the CPU engine names its shared-memory groups by VLLM_DIST_IDENT; so do we)
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING", OMP_NUM_THREADS="1",
               VLLM_DIST_IDENT=f"gloo-unit-{port}")
    proc = subprocess.Popen([sys.executable, str(launcher), str(script),
                             *map(str, (world, tp, sp, port)), str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        launcher_out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        launcher_out = proc.communicate()[0] + f"\n(timed out after {timeout} s)"
    outs = [(tmp_path / f"rank{r}").read_text() if (tmp_path / f"rank{r}").exists() else ""
            for r in range(world)]
    failed = [r for r, out in enumerate(outs) if f"worker-ok {r}" not in out]
    # The rank that raised first, not one the launcher killed after it.
    failed.sort(key=lambda r: "Traceback" not in outs[r])
    assert not failed, f"rank {failed[0]}:\n{outs[failed[0]][-3000:]}\n" \
        f"launcher:\n{launcher_out[-2000:]}"
    assert proc.returncode == 0, launcher_out[-3000:]
