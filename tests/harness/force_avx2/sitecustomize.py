"""An AVX2 host's code paths on any x86 host, in every process of a test
run: Python imports ``sitecustomize`` at start-up, the engine's spawned
workers included.  With SP_FORCE_AVX2=1, and this folder first on
PYTHONPATH (``harness.cpu_path.pin`` sets both, with torch's and oneDNN's
own ISA variables), it hides AVX-512, VNNI and AMX from torch.cpu's
checks, which vLLM's CPU platform reads to pick its kernels; nothing else.
Why the suite runs so: ``harness/cpu_path.py``."""

import os

if os.environ.get("SP_FORCE_AVX2") == "1":
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location(
        "_sp_cpu_path", Path(__file__).resolve().parent.parent / "cpu_path.py")
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    _mod.hide_avx512()
