"""Shared fixtures.  Tests run inside the venv that holds our CPU wheel
(``ci/test.sh`` makes it); the build tests also read ``build/`` and ``dist/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The release under test: the pin, or another one ci/test.sh --version built.
VERSION = os.environ.get("SP_VLLM_VERSION") or (REPO / "VLLM_VERSION").read_text().strip()
CACHE = Path(os.environ.get("VLLM_SP_CACHE", Path.home() / ".cache" / "vllm-sp"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    """Tiny checkpoints, made once per session (or reused from $SP_TEST_MODELS)."""
    root = os.environ.get("SP_TEST_MODELS")
    if root:
        Path(root).mkdir(parents=True, exist_ok=True)
        return Path(root)
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def llama(models_dir):
    """The Llama of the SP and Shift e2e tests (8 heads, 2 KV heads)."""
    from harness.models import make_model

    return make_model(models_dir, "llama", heads=8, kv_heads=2)


@pytest.fixture(scope="session")
def llama_ref(llama):
    """TP=1 on test_e2e_sp's workload: the reference every layout equals."""
    from test_e2e_sp import check_prefix_cache, run

    r = run(llama)
    check_prefix_cache(r)
    return r


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: starts a real vLLM engine (slow)")
    config.addinivalue_line("markers", "core: the end-to-end equivalence run on every "
                            "release the series is ported to (ci/test.sh --version V -m core)")
