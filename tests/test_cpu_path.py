"""The suite's CPU kernel path is pinned to AVX2 on every x86 host
(harness/cpu_path.py says why), and the pin still takes effect: a release of
vLLM or torch that reads CPU features elsewhere breaks these tests, not the
bfloat16 bounds of the hybrid tests on some hosts and not others.

Each check runs in a fresh interpreter started with the run's environment,
as vLLM's spawned workers and `vllm serve` are: what the conftest set for
this process must reach those through the environment alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import cpu_path

if not cpu_path.pinned():
    pytest.skip("SP_CPU_PATH=native: the run keeps the host's own kernel path",
                allow_module_level=True)

PROBE = r"""
import json, os, torch
out = {"aten": torch.backends.cpu.get_cpu_capability(),
       "checks": {n: getattr(torch.cpu, n)() for n in (
           "_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
           "_is_amx_tile_supported", "_is_amx_fp16_supported") if hasattr(torch.cpu, n)}}
# oneDNN prints the ISA it dispatches to at its first primitive (a
# convolution this size goes to oneDNN on every x86 host).
torch.nn.functional.conv2d(torch.randn(8, 32, 64, 64), torch.randn(32, 32, 3, 3))
if os.environ.get("PROBE_VLLM") == "1":
    from vllm.platforms import current_platform
    current_platform.import_kernels()
    with open("/proc/self/maps") as f:
        out["vllm_libs"] = sorted({line.rsplit("/", 1)[-1].strip() for line in f
                                   if "/vllm/_C" in line})
print("@@probe@@", json.dumps(out), flush=True)
"""


def probe(vllm: bool) -> tuple[dict, str]:
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "PROBE_VLLM": "1" if vllm else "0"}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("@@probe@@ "))
    isa = [x for x in proc.stdout.splitlines() if x.startswith("onednn_verbose") and ",isa:" in x]
    return json.loads(line.split(" ", 1)[1]), "".join(isa)


def test_torch_and_onednn_take_the_avx2_path():
    out, isa = probe(vllm=False)
    assert out["aten"] == "AVX2", out
    assert "_is_avx512_supported" in out["checks"], out    # the check vLLM reads first
    assert not any(out["checks"].values()), out
    assert isa.endswith("isa:Intel AVX2"), isa


@pytest.mark.vllm_cpu
def test_vllm_loads_its_avx2_kernels():
    out, _ = probe(vllm=True)
    assert not any(out["checks"].values()), out
    assert out["vllm_libs"] == ["_C_AVX2.abi3.so"], out


@pytest.mark.parametrize("flags, cls", [
    ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "amx"),
    ("fpu avx2 avx512f avx512_bf16", "avx-512"),
    ("fpu sse4_2 avx avx2 fma", "avx2"),
    ("fpu sse4_2", "other"),
])
def test_host_class(flags, cls):
    assert cpu_path.host_class(f"processor\t: 0\nflags\t\t: {flags}\n") == cls
