"""Unit tests' process groups: one Python process per rank, the patched
vLLM's own world / TP / SP groups under gloo, on loopback.  A test hands
``run_ranks`` a module-level function of its own module, called on every
rank as ``fn(rank=, world=, tp=, sp=, cfg=)`` once the groups are built
(``cfg`` is the VllmConfig they were built under); a plain function, so
that the linter reads its assertions.  A rank whose function returns
prints ``worker-ok``.

The ranks are forked from one launcher that has imported torch, vLLM's
config and distributed modules, the test's module, and the modules the
function imports at its top level: on the 2-core CI machine, four ranks
importing vLLM each took ~25 s of every TP=2 x SP=2 test before any rank
ran a line of it.  Nothing is initialised before the fork (no process
group, no config, no thread pool: OMP_NUM_THREADS is 1), so each rank
starts as a fresh interpreter would after its imports.  The launcher in
turn is forked from a process of the session that has imported vLLM once
in this environment (``engine.Forker``; a fresh interpreter with
``SP_TEST_FORK=0``): a launcher importing vLLM again took ~10 s of each
test."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path

from . import engine
from .net import free_port

TESTS = Path(__file__).resolve().parents[1]


def _env(port: int) -> dict[str, str]:
    """The launcher's and the ranks' environment
    (the CPU engine names its shared-memory groups by VLLM_DIST_IDENT; so do we)."""
    return dict(os.environ, VLLM_LOGGING_LEVEL="WARNING", OMP_NUM_THREADS="1",
                VLLM_DIST_IDENT=f"gloo-unit-{port}",
                PYTHONPATH=os.pathsep.join([str(TESTS), *filter(None, [
                    os.environ.get("PYTHONPATH")])]))


_FORKER = engine.Forker(lambda: _env(0))


def run_ranks(fn: Callable[..., None], tmp_path: Path, tp: int, sp: int,
              timeout: float = 300) -> None:
    """Run ``fn`` on TP x SP ranks and fail with a rank's output unless
    every rank finished."""
    module = sys.modules[fn.__module__]
    assert fn.__qualname__ == fn.__name__, f"{fn.__qualname__}: not a module-level function"
    for attempt in range(3):
        # A free port can be taken before rank 0 listens on it (engines of other tests
        # start beside these in CI): then again, on another port.
        try:
            return _run_ranks(module, fn, tmp_path, tp, sp, timeout)
        except AssertionError as e:
            if "EADDRINUSE" not in str(e) or attempt == 2:
                raise


def _run_ranks(module, fn: Callable[..., None], tmp_path: Path, tp: int, sp: int,
               timeout: float) -> None:
    world, port = tp * sp, free_port()
    env = _env(port)
    args = [module.__file__, fn.__module__, fn.__name__, world, tp, sp, port, str(tmp_path)]
    try:
        forked = _FORKER.run({"call": "harness.gloo:_launch", "args": args}, env, timeout) \
            if engine.FORK else None
    except subprocess.TimeoutExpired as e:
        forked = -9, f"{e.output}\n(timed out after {timeout} s)"
    if forked is None:
        forked = _launch_fresh(args, env, timeout)
    returncode, launcher_out = forked
    outs = [(tmp_path / f"rank{r}").read_text() if (tmp_path / f"rank{r}").exists() else ""
            for r in range(world)]
    failed = [r for r, out in enumerate(outs) if f"worker-ok {r}" not in out]
    # The rank that raised first, not one the launcher killed after it.
    failed.sort(key=lambda r: "Traceback" not in outs[r])
    assert not failed, f"rank {failed[0]}:\n{outs[failed[0]][-3000:]}\n" \
        f"launcher:\n{launcher_out[-2000:]}"
    assert returncode == 0, launcher_out[-3000:]


def _launch_fresh(args: list, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """The launcher in an interpreter of its own: (exit code, output)."""
    proc = subprocess.Popen([sys.executable, "-m", "harness.gloo", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return -9, proc.communicate()[0] + f"\n(timed out after {timeout} s)"
    return proc.returncode, out


def _import_function(path: str, module_name: str, name: str) -> Callable[..., None]:
    """The test's function, its module imported as pytest named it, and the
    modules the function imports at its top level imported too (so that
    the ranks fork with them)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, name)
    for node in ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module([node], []), path, "exec"), {})
    return fn


def _rank(fn: Callable[..., None], rank: int, world: int, tp: int, sp: int, port: int) -> None:
    """One rank: the patched groups under gloo, ``fn``, the groups torn down."""
    from vllm.config import (
        CompilationConfig,
        CompilationMode,
        ParallelConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.distributed import parallel_state as ps

    # Eager: a layer's forward here is our arithmetic around upstream's ops; with
    # compilation on, vLLM's CPU path torch.compiles each custom op's native forward
    # on first call (SiluAndMul: ~20 s of C++ codegen for a 5-token test).
    cfg = VllmConfig(parallel_config=ParallelConfig(tensor_parallel_size=tp,
                     sequence_parallel_size=sp, distributed_executor_backend="mp"),
                     compilation_config=CompilationConfig(mode=CompilationMode.NONE))
    with set_current_vllm_config(cfg):
        ps.init_distributed_environment(world, rank, f"tcp://127.0.0.1:{port}", rank, "gloo")
        ps.initialize_model_parallel(tp, 1, backend="gloo")
    fn(rank=rank, world=world, tp=tp, sp=sp, cfg=cfg)
    ps.destroy_model_parallel()
    print("worker-ok", rank, flush=True)


def _launch(path: str, module_name: str, name: str, world: int, tp: int, sp: int, port: int,
            outdir: str) -> int:
    """Fork one rank per process, each writing to outdir/rank<r>; the first
    rank to fail takes the others down (they would wait for it in a
    collective)."""
    import torch  # noqa: F401  (imported before the fork, with vLLM's modules)
    import vllm.config  # noqa: F401
    from vllm.distributed import parallel_state, ulysses  # noqa: F401

    fn = _import_function(path, module_name, name)
    sys.stdout.flush(), sys.stderr.flush()
    ranks = set()
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            fd = os.open(os.path.join(outdir, f"rank{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1), os.dup2(fd, 2)
            status = 0
            try:
                _rank(fn, rank, world, tp, sp, port)
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
    return int(failed)


if __name__ == "__main__":
    # argv: test-module-path module-name function world tp sp port outdir
    sys.exit(_launch(*sys.argv[1:4], *map(int, sys.argv[4:8]), sys.argv[8]))
