"""An AVX2 host's code paths on an AVX-512 machine, for the CPU engine's
tests: put this folder on PYTHONPATH with SP_FORCE_AVX2=1 (and, for torch's
and oneDNN's own kernels, ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2).

Why: vLLM's CPU platform picks its kernel library (_C_AVX2, _C_AVX512 or
_C) and its attention, Gated-DeltaNet and MoE paths from torch.cpu's
feature checks, and the suite must hold on AVX2, AVX-512 and AMX hosts
alike (docs/reliability.md) while this project has only an AVX-512 one.
Python imports ``sitecustomize`` at start-up in every process, the
engine's spawned workers included; this one hides AVX-512, VNNI and AMX
from those checks and nothing else."""

import os

if os.environ.get("SP_FORCE_AVX2") == "1":
    import torch.cpu as _cpu

    for _name in ("_is_avx512_supported", "_is_avx512_bf16_supported",
                  "_is_avx512_vnni_supported", "_is_amx_tile_supported", "_is_amx_fp16_supported"):
        if hasattr(_cpu, _name):
            setattr(_cpu, _name, lambda: False)
