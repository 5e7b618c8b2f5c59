"""The package behind vLLM's suffix lookup (``"method": "suffix"``).

vLLM imports ``arctic_inference.suffix_decoding`` and names the version to
install, arctic-inference 0.1.1: an sdist only, whose suffix tree is C++
(nanobind, built with the machine's compiler, no CUDA).  Its declared build
needs include torch 2.7.0, so it is built without isolation against the
venv's torch, its other build tools in a folder of their own.  Installed
into a folder beside the test models, never into the venv: the package also
registers a vLLM plugin (inert unless ARCTIC_INFERENCE_ENABLED is set), so
only the engines given ``env(site)`` see it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "0.1.1"
BUILD_TOOLS = ["nanobind==2.9.2", "wheel", "setuptools>=61", "cmake", "ninja"]


def site(root: Path) -> Path:
    """A folder holding ``arctic_inference``, built once per models folder."""
    out = Path(root) / f"arctic-inference-{VERSION}"
    if (out / "arctic_inference" / "suffix_decoding").is_dir():
        return out
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    tools = tmp / "tools"
    _run(pip + ["install", "--target", str(tools), *BUILD_TOOLS])
    build_env = {**os.environ, "PYTHONPATH": str(tools), "MAX_JOBS": "2",
                 "PATH": f"{tools / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    _run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheel"),
                f"arctic-inference=={VERSION}"], env=build_env)
    wheel = next((tmp / "wheel").glob("arctic_inference-*.whl"))
    _run(pip + ["install", "--no-deps", "--target", str(tmp / "site"), str(wheel)])
    (tmp / "site").rename(out)
    shutil.rmtree(tmp)
    return out


def env(folder: Path) -> dict[str, str]:
    """An engine's environment additions that make the package importable."""
    path = [str(folder), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


def _run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{proc.stdout[-4000:]}")
