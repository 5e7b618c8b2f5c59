"""Every rank of an engine on one GPU: the one-GPU tier's mode, in the harness only
(never in the wheel), so that GPU kernels and the runner see every layout's shapes on
a machine of one card.  Nothing here makes the run faster or its transport real: the
ranks time-share the card and talk over loopback sockets.

CUDA lets several processes share a card; three things keep vLLM's ranks off one:
* NCCL refuses two ranks on one bus id of one host ("Duplicate GPU detected").  It
  takes its host identity from NCCL_HOSTID when set: each process gets its own (its
  pid, set again in a forked child), so every rank looks like a host of its own and
  NCCL connects them through its socket transport on loopback, as it would hosts.
* vLLM maps a worker's local rank to a GPU through
  ``ParallelConfig.assigned_physical_gpu_ids``, which ``--device-ids`` fills and
  where it refuses duplicates: here every rank maps to the first visible GPU.
* vLLM refuses a world larger than the GPU count when it picks the executor itself
  (``config/parallel.py``): ``engine_kwargs`` names the multiprocessing executor.
Also off (``engine_kwargs``, ``env``): the custom, the symmetric-memory and FlashInfer's
all-reduce (CUDA IPC between distinct GPUs) and FlashInfer's fused all-reduce + RMSNorm
(its IPC workspace).  The KV cache must be sized explicitly (``kv_cache_memory_bytes``):
a rank's memory profile would count the other ranks' allocations as its own.

This file is also the plugin: ``install(dir)`` copies it into ``dir`` as the module
``vllm_sp_shared_gpu`` beside a dist-info whose ``vllm.general_plugins`` entry point
names ``register``.  vLLM loads it in each of its processes (where the engine's
arguments are read, the engine core, each worker) when ``dir`` is on PYTHONPATH and
VLLM_SP_SHARED_GPU=1 (``env``); without that flag ``register`` does nothing.  The
module imports nothing beyond the standard library at import time.

A diagnostic only this plugin can run: with VLLM_SP_ALLOW_QUANTIZED_KV=1 as well, SP's
refusal of a quantized KV cache is lifted in every process, so that the refused path
can be traced on a GPU (``benchmarks/attn_trace.py``); no result of such a run is a
supported configuration.
"""

from __future__ import annotations

import os
from pathlib import Path

FLAG = "VLLM_SP_SHARED_GPU"
ALLOW_QUANTIZED_KV = "VLLM_SP_ALLOW_QUANTIZED_KV"
MODULE = "vllm_sp_shared_gpu"
DIST = "vllm_sp_shared_gpu-0.1.dist-info"
HOSTID = "shared-gpu"
# The all-reduces through CUDA IPC between distinct GPUs (vLLM >= 0.33 tries FlashInfer's
# for its TP group; torch's symmetric memory): NCCL's instead.
IPC_ALL_REDUCES_OFF = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}


def _own_host() -> None:
    """This process a host of its own to NCCL (read when NCCL initialises)."""
    os.environ["NCCL_HOSTID"] = f"{HOSTID}-{os.getpid()}"


def register() -> None:
    """vLLM's general-plugin entry: in a run with the flag, NCCL sees a host per
    process and every rank maps to the first visible GPU."""
    if os.environ.get(FLAG) != "1":
        return
    _own_host()
    # A forked worker inherits its parent's id and does not load plugins again
    # (vLLM loads them once a process, and the fork copies "loaded").
    os.register_at_fork(after_in_child=_own_host)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.update(IPC_ALL_REDUCES_OFF)
    _no_flashinfer_workspace()
    if os.environ.get(ALLOW_QUANTIZED_KV) == "1":
        from vllm.distributed import ulysses_config

        ulysses_config._check_kv_cache_dtype = lambda *args: None

    from vllm.engine.arg_utils import EngineArgs

    if getattr(EngineArgs._resolve_device_ids, "_shared_gpu", False):
        return

    def resolve(self) -> list[int]:
        if self.device_ids:
            raise ValueError(f"{FLAG}=1 puts every rank on the first visible GPU: "
                             "--device-ids has no meaning there")
        world = (self.tensor_parallel_size * self.pipeline_parallel_size
                 * getattr(self, "sequence_parallel_size", 1)
                 * getattr(self, "prefill_context_parallel_size", 1))
        return [first_physical_gpu()] * (world * max(1, self.data_parallel_size))

    resolve._shared_gpu = True
    EngineArgs._resolve_device_ids = resolve


def _no_flashinfer_workspace() -> None:
    """FlashInfer's fused all-reduce + norm called from a model's own eager code
    (vLLM 0.34's Qwen3.5 on CUDA) asks for its IPC workspace whatever the pass
    config and VLLM_ALLREDUCE_USE_FLASHINFER say: no backend, so it all-reduces
    through NCCL as the compiled models here do."""
    try:
        from vllm.distributed.device_communicators import flashinfer_all_reduce as fi
    except ImportError:
        return
    if hasattr(fi, "_resolve_fi_ar_backend"):
        fi._resolve_fi_ar_backend = lambda *args, **kwargs: (None, False)


def first_physical_gpu() -> int:
    from vllm.platforms import current_platform

    visible = os.environ.get(current_platform.device_control_env_var, "")
    if not visible:
        return 0
    return current_platform.device_control_id_to_physical_device_id(visible.split(",")[0])


def install(where: Path) -> Path:
    """The plugin as a distribution in ``where``: put ``where`` on PYTHONPATH
    (``env``) and vLLM finds it by its entry point.  Each file is replaced whole,
    so engines already running while another installs it read one or the other."""
    where = Path(where)
    files = {
        f"{MODULE}.py": Path(__file__).read_text(),
        f"{DIST}/METADATA": "Metadata-Version: 2.1\nName: vllm_sp_shared_gpu\nVersion: 0.1\n"
                            "Summary: test harness only: every rank of a vLLM engine on one GPU\n",
        f"{DIST}/entry_points.txt": f"[vllm.general_plugins]\nshared_gpu = {MODULE}:register\n",
        f"{DIST}/top_level.txt": f"{MODULE}\n",
    }
    for name, text in files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return where


def env(where: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a run in this mode: the plugin installed at ``where``
    first on PYTHONPATH, the flag on, the first GPU the one visible."""
    base = dict(os.environ if base is None else base)
    path = [str(where)] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    visible = base.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    return {**base, FLAG: "1", "PYTHONPATH": os.pathsep.join(path),
            "CUDA_VISIBLE_DEVICES": visible, **IPC_ALL_REDUCES_OFF}


def engine_kwargs(world: int) -> dict:
    """LLM(...) arguments every engine in this mode takes (besides its KV bytes)."""
    kw: dict = dict(disable_custom_all_reduce=True,
                    compilation_config={"pass_config": {"fuse_allreduce_rms": False}})
    if world > 1:
        kw["distributed_executor_backend"] = "mp"
    return kw
