"""The CPU kernel path every test runs on: an AVX2 host's, on any x86 host.

Why: vLLM's CPU platform picks its kernel library (``_C``, ``_C_AVX512`` or
``_C_AVX2``) and its attention, Gated-DeltaNet and MoE paths from torch's
CPU feature checks, and torch and oneDNN pick their own kernels likewise.
In bfloat16 those paths round differently: on an Intel AMX host upstream's
own TP=2 of the test hybrid departed from TP=1 by 1.16 in logprobs (0.40 on
an AVX-512 host), and its MTP drafter accepted nothing, so three hybrid
tests failed there and passed here.  A test checks our code, not upstream's
kernels on one CPU class: the suite pins the one path every x86 host can
run (AVX2 is the common floor; AVX-512 cannot be forced on an AVX2 host),
and the bounds on upstream's own bfloat16 noise (``BF16_SPREAD``) are
measured on that path.

``pin()`` (conftest, before anything imports torch) sets, for this process
and every process it starts (engines, their spawned workers, servers, Ray):
``ATEN_CPU_CAPABILITY`` and ``ONEDNN_MAX_CPU_ISA`` (torch's and oneDNN's own
dispatch, read at their first kernel), and ``SP_FORCE_AVX2`` with
``force_avx2/`` on ``PYTHONPATH``, whose ``sitecustomize`` hides AVX-512,
VNNI and AMX from ``torch.cpu``'s checks, which vLLM reads.  ``SP_CPU_PATH=
native`` leaves the host's own path (to reproduce what a host does
natively, e.g. docs/reliability.md's AMX case).  test_cpu_path.py fails if
the pin stops taking effect (a release that reads CPU features elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

FORCE_AVX2 = Path(__file__).resolve().parent / "force_avx2"
PINNED = {"SP_FORCE_AVX2": "1", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def host_class(cpuinfo: str | None = None) -> str:
    """This host's CPU class by its flags: 'amx', 'avx-512', 'avx2' or 'other'."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "other"
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    for name, flag in (("amx", "amx_tile"), ("avx-512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return name
    return "other"


def pinned() -> bool:
    return os.environ.get("SP_CPU_PATH", "avx2") != "native"


def pin() -> None:
    """Pin this process's environment (and so its children's) to the AVX2
    path, unless SP_CPU_PATH=native; this process's own ``torch.cpu``
    checks too, if it did not start with the folder on its path."""
    if not pinned():
        return
    os.environ.update(PINNED)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(FORCE_AVX2) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(FORCE_AVX2), *paths])
    hide_avx512()


def hide_avx512() -> None:
    """torch.cpu's AVX-512, VNNI and AMX checks answer False (what
    ``force_avx2/sitecustomize.py`` does at every interpreter's start)."""
    try:
        import torch.cpu as cpu
    except ImportError:             # a Python without torch (a package build's)
        return
    for name in ("_is_avx512_supported", "_is_avx512_bf16_supported",
                 "_is_avx512_vnni_supported", "_is_amx_tile_supported", "_is_amx_fp16_supported"):
        if hasattr(cpu, name):
            setattr(cpu, name, lambda: False)


if __name__ == "__main__":          # .ci/run's first line
    import platform

    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "?")
    print(f"CPU: {model}, {os.cpu_count()} cores, class {host_class()}; kernel path of the "
          f"suite: {'AVX2 (pinned, tests/harness/cpu_path.py)' if pinned() else 'native'}")
