"""The GPU harness: run its modules from the repository root as ``python3 -m benchmarks.<name>``.
Its one path setup: ``scripts/`` first on ``sys.path`` (the build's scripts import by their own
names, and the repository root holds an unrelated ``build/``), ``tests/`` last, so that the
test harness imports as ``harness``, the name the tests use.  test_layering.py holds
benchmarks/ to this one place."""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(_ROOT / "scripts"))
if str(_ROOT / "tests") not in sys.path:
    sys.path.append(str(_ROOT / "tests"))
