"""The overlay modules form layers: no module is imported, at any depth,
by a module it imports (function-level imports included), and the core,
``ulysses.py`` (groups, exchange, head arithmetic, token slices), imports
no other overlay module.  Read from the source: nothing is imported."""

from __future__ import annotations

import pytest

from harness.imports import circles, overlay_imports
from harness.repo import REPO

pytestmark = pytest.mark.once

OVERLAY = REPO / "overlay"
CORE = "vllm.distributed.ulysses"


def test_no_import_circles():
    graph = overlay_imports(OVERLAY)
    assert CORE in graph and len(graph) > 1, sorted(graph)
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_core_imports_no_overlay_module():
    assert overlay_imports(OVERLAY)[CORE] == set()


def test_walker_sees_function_level_and_package_imports(tmp_path):
    """The check itself: a circle closed by an import inside a function,
    through ``from package import module``, is found."""
    pkg = tmp_path / "vllm" / "distributed"
    pkg.mkdir(parents=True)
    (pkg / "core.py").write_text("def f():\n    from vllm.distributed import upper\n")
    (pkg / "upper.py").write_text("from vllm.distributed.core import f\n")
    (pkg / "free.py").write_text("import vllm.distributed.core\n")
    graph = overlay_imports(tmp_path)
    assert graph == {"vllm.distributed.core": {"vllm.distributed.upper"},
                     "vllm.distributed.upper": {"vllm.distributed.core"},
                     "vllm.distributed.free": {"vllm.distributed.core"}}
    assert circles(graph) == [["vllm.distributed.core", "vllm.distributed.upper",
                               "vllm.distributed.core"],
                              ["vllm.distributed.upper", "vllm.distributed.core",
                               "vllm.distributed.upper"]]
