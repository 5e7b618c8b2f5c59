#!/usr/bin/env python3
"""Stage the CPU engine's hybrid tests for the GPU host's own CPU.

Why: issue 33 wants the bf16 Gated-DeltaNet hybrid tests to pass on an Intel
host with AMX, and the GPU hosts' Xeons are the only such CPUs this project
reaches.  The host has Python 3.12 and no network, so this bundles a CPU test
venv for it: our CPU wheel (``dist/vllm-0.26.0+sp.cpu-*.whl``), every wheel it
and ``tests/requirements.txt`` need, and the tests themselves, cut into
parts that travel one per device call (as ``stage.py``'s do).

The versions are the CI venv's: ``ci/test.sh`` installs our CPU wheel with
pip's default resolution (torch 2.11.0 from the package index, the CUDA build,
which runs on CPU) plus ``tests/requirements.txt`` and the torchvision that
pairs with that torch; ``--lock`` (default: ``pip freeze --all`` of
``.venv-cpu``, what CI resolved on this machine) pins each package to what
CI ran, so the only difference is the Python (3.12, not 3.11).  Nothing the
image already holds at the same version travels: the host's image has that
very torch 2.11.0 with its CUDA libraries (~3 GB of wheels, far past a
device call's 64 MiB), torchvision 0.26.0, triton 3.6.0, opencv and a few
dozen small packages at CI's versions.  Those are resolved here as
metadata-only stubs of the image's packages (``host/image-cp312.json``, as
``user_env.py`` does), and on the host ``unpack_cpu_tests.sh`` links exactly
those distributions' files from the image into a folder on the venv's path
(nothing else of the image is visible: its transformers, accelerate or JAX
would change what the tests' random checkpoints hold).  The CUDA-only
packages torch pulls in (cuda-bindings, cuda-pathfinder) are the image's
whatever their version: the CPU engine loads them but never calls them.

pip on this machine runs Python 3.11, so markers for 3.12 are put in as
user_env.py does (``six``, ``setuptools``).  After downloading, the set is
resolved again with ``--no-index`` from the staged wheels and the stubs
alone: the staging fails unless that gives exactly the same packages.

    python3 -m benchmarks.stage_cpu_tests [OUTDIR]      (default .gpuhost-cpu)
        [--lock FILE | --no-lock] [--ray] [--build]
    -> OUTDIR/part00.., bundle.sha256, unpack_cpu_tests.sh
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
from pathlib import Path

from benchmarks.stage import cut_parts, part_bytes
from benchmarks.user_env import (
    IMAGE,
    TARGET,
    _host_only,
    _norm,
    download,
    image_packages,
    sha256_file,
    write_stubs,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# The release staged: the one whose torch (2.11) the host's image holds, not the pin.
RELEASE = "0.26.0"
CACHE = Path(os.environ.get("VLLM_SP_CACHE", Path.home() / ".cache" / "vllm-sp"))
MAX_PART = 59 << 20
# Taken from the image whatever the lock says: torch and what it loads for
# CUDA (the CPU engine never calls it).  torch and torchvision must still
# equal the lock's version (checked).
GPU_STACK = re.compile(r"^(torch|torchvision|triton|nvidia_.*|cuda_.*)$")
# The repository files the staged tests read; VLLM_VERSION is written as RELEASE
# (tests/harness/repo.py: the release under test).
REPO_FILES = ["tests"]


def log(msg: str) -> None:
    print(f"stage_cpu_tests.py: {msg}", flush=True)


def cpu_wheel(build: bool) -> Path:
    pattern = f"vllm-{RELEASE}+sp.cpu-*.whl"
    if build or not list((ROOT / "dist").glob(pattern)):
        log(f"building our CPU wheel (./build.sh --device cpu --version {RELEASE})")
        subprocess.run([str(ROOT / "build.sh"), "--device", "cpu", "--version", RELEASE],
                       cwd=ROOT, check=True)
    wheels = sorted((ROOT / "dist").glob(pattern))
    if len(wheels) != 1:
        raise SystemExit(f"stage_cpu_tests.py: want one dist/{pattern}, found {wheels}")
    return wheels[0]


def read_lock(path: Path | None) -> dict[str, tuple[str, str]]:
    """norm name -> (name, version) of the CI venv, vllm left out."""
    if path is None:
        py = ROOT / ".venv-cpu" / "bin" / "python"
        if not py.exists():
            log("no .venv-cpu and no --lock: resolving as a fresh CI venv would (newest)")
            return {}
        text = subprocess.run([str(py), "-m", "pip", "freeze", "--all"], check=True,
                              capture_output=True, text=True).stdout
    else:
        text = path.read_text()
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if "==" not in line:
            continue            # vllm @ file://..., comments
        name, version = (s.strip() for s in line.split("==", 1))
        if _norm(name) != "vllm":
            out[_norm(name)] = (name, version)
    return out


def from_image(image: dict[str, dict], lock: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """The image packages the venv may take as they are: the GPU stack, and
    any at exactly the lock's version."""
    out = {}
    for norm, p in image.items():
        if GPU_STACK.match(norm) or (norm in lock and lock[norm][1] == p["version"]):
            out[norm] = p
    for norm in ("torch", "torchvision"):
        if norm in lock and norm in out and lock[norm][1] != out[norm]["version"]:
            raise SystemExit(f"stage_cpu_tests.py: the image's {norm} {out[norm]['version']} "
                             f"is not CI's {lock[norm][1]}: stage torch itself (several GB)")
    return out


def requirements(ray: bool) -> list[str]:
    """tests/requirements.txt (Ray only with --ray: the staged tests start no
    Ray cluster), the torchvision ci/test.sh adds beside a plain torch, and
    pip itself (the host's venv is made without ensurepip)."""
    out = []
    for line in (ROOT / "tests" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and (ray or _norm(re.split(r"[<>=!~ ;\[]", line)[0]) != "ray"):
            out.append(line)
    return out + ["torchvision", "pip"]


def resolve(wheel: Path, reqs: list[str], constraints: list[str], links: list[Path],
            offline: bool, tmp: Path) -> list[dict]:
    """pip's install report for WHEEL + REQS over the stubs, for the host's
    Python; with host-only markers made top-level until none is left."""
    from packaging.markers import default_environment

    host_env = {**default_environment(), **json.loads(IMAGE.read_text())["environment"]}
    (tmp / "c.txt").write_text("".join(f"{c}\n" for c in constraints))
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    extra: set[str] = set()
    while True:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--report", str(tmp / "report.json"), "--target", str(tmp / "t"),
               "-c", str(tmp / "c.txt"), *TARGET]
        cmd += ["--no-index"] if offline else []
        for link in links:
            cmd += ["--find-links", str(link)]
        proc = subprocess.run(cmd + [str(wheel), *reqs, *sorted(extra)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tail = [ln for ln in proc.stdout.splitlines() if "WARNING: Location" not in ln][-15:]
            raise SystemExit("stage_cpu_tests.py: pip could not resolve"
                             + (" offline" if offline else "") + ":\n" + "\n".join(tail))
        items = json.loads((tmp / "report.json").read_text())["install"]
        more = _host_only(items, host_env) - extra
        if not more:
            return items
        extra |= more


def pinned(items: list[dict]) -> set[str]:
    return {f"{_norm(i['metadata']['name'])}=={i['metadata']['version']}" for i in items}


def repo_files() -> list[str]:
    """tests/ (tracked and untracked-not-ignored, as a device call carries
    them)."""
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard", *REPO_FILES],
                         cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    return sorted(f.decode() for f in out if f and (ROOT / f.decode()).is_file())


def add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path, default=ROOT / ".gpuhost-cpu")
    ap.add_argument("--lock", type=Path, help="pip freeze of the CI venv to match "
                    "(default: .venv-cpu's, if there is one)")
    ap.add_argument("--no-lock", action="store_true", help="newest versions, as a fresh CI venv")
    ap.add_argument("--ray", action="store_true", help="stage Ray too (test_e2e_ray*, ~70 MiB)")
    ap.add_argument("--build", action="store_true", help="rebuild our CPU wheel first")
    args = ap.parse_args()

    wheel = cpu_wheel(args.build)
    lock = {} if args.no_lock else read_lock(args.lock)
    image = image_packages()
    shim = from_image(image, lock)
    constraints = [f"{name}=={version}" for norm, (name, version) in sorted(lock.items())
                   if norm not in shim]
    constraints += [f"{p['name']}=={p['version']}" for _, p in sorted(shim.items())]
    reqs = requirements(args.ray)
    deps = CACHE / f"cpu-tests-{RELEASE}"
    deps.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        stubs = tmp / "stubs"
        stubs.mkdir()
        write_stubs(shim, stubs, extras=True)
        items = resolve(wheel, reqs, constraints, [stubs], offline=False, tmp=tmp)
        wanted, kept = {}, []
        for item in items:
            name, version = item["metadata"]["name"], item["metadata"]["version"]
            if version.endswith("+image"):
                kept.append(f"{name}=={version[:-len('+image')]}")
            elif _norm(name) != "vllm":
                info = item["download_info"]
                filename = urllib.parse.unquote(info["url"].rsplit("/", 1)[1])
                wanted[filename] = (f"{name}=={version}",
                                    info["archive_info"]["hashes"]["sha256"])
        fetched = download(wanted, deps)
        # The check the host's install repeats: the staged wheels and the
        # image's packages alone resolve to the same set.
        again = resolve(wheel, reqs, constraints, [deps, stubs], offline=True, tmp=tmp)
        if pinned(again) != pinned(items):
            raise SystemExit("stage_cpu_tests.py: offline the set resolves otherwise: "
                             f"{sorted(pinned(again) ^ pinned(items))}")
    drift = sorted(f"{_norm(n)} {lock[_norm(n)][1]} -> {v}"
                   for n, v in (w[0].split("==") for w in wanted.values())
                   if _norm(n) in lock and lock[_norm(n)][1] != v)
    log(f"{len(items)} packages: {len(wanted)} wheels staged, {len(kept)} kept from the image"
        f"; downloaded {fetched >> 20} MiB")
    if drift:
        log("differs from the lock: " + ", ".join(drift))

    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    host_pins = sorted(v[0] for v in wanted.values()) + sorted(kept)
    torch_git = ""
    py = ROOT / ".venv-cpu" / "bin" / "python"
    if py.exists():
        torch_git = subprocess.run(
            [str(py), "-c", "import torch; print(torch.version.git_version)"],
            capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    manifest = {"vllm": RELEASE, "wheel": wheel.name, "wheel_sha256": sha256_file(wheel),
                "commit": head, "torch_git_version": torch_git,
                "lock": "none" if not lock else str(args.lock or ".venv-cpu (pip freeze --all)"),
                "staged": sorted(v[0] for v in wanted.values()), "from_image": sorted(kept),
                "staged_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    size = min(MAX_PART, part_bytes())
    tar_path = out / "bundle.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(wheel, f"bundle/wheels/{wheel.name}")
        for filename in sorted(wanted):
            tar.add(deps / filename, f"bundle/wheels/{filename}")
        for f in repo_files():
            tar.add(ROOT / f, f"bundle/repo/{f}")
        add_text(tar, "bundle/repo/VLLM_VERSION", RELEASE + "\n")
        add_text(tar, "bundle/constraints.txt", "\n".join(host_pins) + "\n")
        add_text(tar, "bundle/requirements.txt", "\n".join(reqs) + "\n")
        add_text(tar, "bundle/image.txt", "\n".join(sorted(kept)) + "\n")
        add_text(tar, "bundle/manifest.json", json.dumps(manifest, indent=1) + "\n")
    parts, total = cut_parts(tar_path, out, size)
    shutil.copy(HERE / "unpack_cpu_tests.sh", out / "unpack_cpu_tests.sh")
    rel = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    log(f"{parts} parts of at most {size >> 20} MiB in {rel}, {total >> 20} MiB in all "
        f"(our wheel {wheel.stat().st_size >> 20} MiB); commit {head}")
    log(f"{parts} device calls, one a part; the last one also carries {rel}/bundle.sha256")


if __name__ == "__main__":
    main()
