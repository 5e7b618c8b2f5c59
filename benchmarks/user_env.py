#!/usr/bin/env python3
"""The wheels `pip install vllm==<pin>` adds to the GPU host's image.

Why: GPU results must come from the environment a user gets, every
`Requires-Dist` of the wheel in it (flashinfer, the CUTLASS DSL, tilelang,
...), not from a hand list.  The host has no network, so its install is
resolved here, by pip's own resolver, against a picture of the image:
``host/image-cp312.json`` (``pip inspect`` on the host) becomes one metadata-only
stub wheel per installed package, versioned ``V+image`` so that pip prefers
it to the index's ``V``, and each is constrained to its version, as pip on
the host keeps what is installed while it meets every requirement.  Where a
requirement rules an installed version out (vLLM 0.26.0 pins ``numba==0.65.0``
over the image's 0.68.0), pip names that constraint; it is dropped and the
resolution rerun, so pip replaces that package as it would on the host.
The wheels left over are what travels.  On the host ``host-setup.sh`` runs
the real ``pip install --no-index --find-links`` into a venv over the image
(``--system-site-packages``): pip there, not this picture, decides, and
``pip check`` says whether the result holds together.

A release whose torch the image lacks (vLLM 0.33.0: torch 2.14.0) resolves the
same way: the image's torch, torchvision and whatever torch 2.14 pins past the
image's versions (NCCL, cuDNN, triton, cuBLAS, ...) are ruled out one round at
a time, and pip brings theirs; the summary names every image package replaced.

Nothing is fetched twice: the resolution is kept in OUTDIR/resolution.json for
its inputs (the wheel, the image's picture, this script), and each wheel is
checked against the sha256 pip's report gives for it and kept in the build's
download cache ($VLLM_SP_CACHE/downloads, as ``build.sh`` keeps its own), so a
re-run with the same inputs downloads nothing.

    python3 -m benchmarks.user_env WHEEL OUTDIR
        -> OUTDIR/*.whl, OUTDIR/lock.txt, OUTDIR/SHA256SUMS
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import zipfile
from pathlib import Path

from build import sha256_file  # the build's own, for the same download cache

HERE = Path(__file__).resolve().parent

IMAGE = HERE / "host" / "image-cp312.json"
DOWNLOADS = Path(os.environ.get("VLLM_SP_CACHE", Path.home() / ".cache" / "vllm-sp")) / "downloads"
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
          "--abi", "cp312", "--abi", "abi3", "--abi", "none"] + [
    f"--platform={p}"
    for p in [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)]   # glibc 2.39 on the host
    + ["manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def image_packages() -> dict[str, dict]:
    """The image's packages (``IMAGE``) by normalized name, each with its ``name`` and its
    public ``version``."""
    pkgs = json.loads(IMAGE.read_text())["packages"]
    return {_norm(n): {**p, "name": n, "version": p["version"].split("+")[0]}
            for n, p in pkgs.items()}


def write_stubs(pkgs: dict[str, dict], folder: Path, extras: bool = False) -> None:
    """One metadata-only wheel per package of ``pkgs`` (as ``image_packages``), versioned
    ``V+image`` so that pip prefers it to the index's ``V``; ``extras``: its extras declared
    too, so that a requirement of one (torch's ``cuda-toolkit[cublas,...]``) brings the
    image's packages it names along."""
    for norm, p in pkgs.items():
        info = f"{norm}-{p['version']}+image.dist-info"
        reqs = p["requires_dist"] or []
        meta = f"Metadata-Version: 2.1\nName: {p['name']}\nVersion: {p['version']}+image\n"
        if extras:
            meta += "".join(f"Provides-Extra: {e}\n" for e in sorted(
                {m for r in reqs for m in re.findall(r"extra\s*==\s*['\"]([^'\"]+)", r)}))
        meta += "".join(f"Requires-Dist: {r}\n" for r in reqs)
        with zipfile.ZipFile(folder / f"{norm}-{p['version']}+image-py3-none-any.whl", "w") as z:
            z.writestr(f"{info}/METADATA", meta)
            z.writestr(f"{info}/WHEEL",
                       "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{info}/RECORD", "")


def _host_only(items: list[dict], host_env: dict) -> set[str]:
    """Requirements whose marker holds on the host but not here: pip takes
    ``--python-version`` for wheel tags only and evaluates markers with this
    interpreter (3.11), so e.g. vLLM's ``setuptools<81; python_version >
    "3.11"`` would be left out.  They go in as top-level requirements."""
    from packaging.requirements import Requirement

    out = set()
    for item in items:
        for line in item["metadata"].get("requires_dist") or []:
            req = Requirement(line)
            if req.marker is None or "extra" in str(req.marker):
                continue
            if req.marker.evaluate(host_env) and not req.marker.evaluate():
                req.marker = None
                out.add(str(req))
    return out


def resolve(wheel: Path) -> list[dict]:
    """pip's install report for WHEEL over the image: one entry per package."""
    from packaging.markers import default_environment

    host_env = {**default_environment(), **json.loads(IMAGE.read_text())["environment"]}
    extra: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        stubs = Path(tmp, "stubs")
        stubs.mkdir()
        pkgs = image_packages()
        write_stubs(pkgs, stubs)
        kept = {p["name"]: p["version"] for p in pkgs.values()}
        env = {**os.environ, "PIP_CONSTRAINT": ""}    # this machine's own caps are not the host's
        for _ in range(40):     # one ruled-out package a round, ~20 for a new torch
            Path(tmp, "c.txt").write_text("".join(f"{n}=={v}\n" for n, v in kept.items()))
            cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                   "--report", f"{tmp}/report.json", "--target", f"{tmp}/t", "--find-links",
                   str(stubs), "-c", f"{tmp}/c.txt", *TARGET, str(wheel), *sorted(extra)]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env)
            if proc.returncode == 0:
                items = json.loads(Path(tmp, "report.json").read_text())["install"]
                more = _host_only(items, host_env) - extra
                if not more:
                    return items
                extra |= more
                continue
            # pip names the constraint it cannot meet; with extras (torch 2.14's
            # `cuda-toolkit[cublas,...]==13.0.3`) it only says no version matches
            named = re.findall(r"The user requested \(constraint\) ([A-Za-z0-9_.-]+)\S*==|"
                               r"No matching distribution found for ([A-Za-z0-9_.-]+)",
                               proc.stdout)
            # or an image package's own requirement clashes with the new one's (vLLM 0.34's
            # huggingface_hub>=2 against the image's transformers): that package moves too
            named += [(n, "") for n in re.findall(r"^\s*([A-Za-z0-9_.-]+) \S+\+image depends on",
                                                   proc.stdout, flags=re.M)]
            ruled_out = {_norm(a or b) for a, b in named} & {_norm(n) for n in kept}
            if not ruled_out:
                tail = [ln for ln in proc.stdout.splitlines()
                        if "WARNING: Location" not in ln][-12:]
                raise SystemExit("user_env.py: pip could not resolve:\n" + "\n".join(tail))
            kept = {n: v for n, v in kept.items() if _norm(n) not in ruled_out}
        raise SystemExit("user_env.py: the resolution did not settle")


def cached_resolve(wheel: Path, dest: Path) -> list[dict]:
    """resolve(), kept in DEST/resolution.json for these inputs."""
    key = hashlib.sha256()
    for part in (sha256_file(wheel).encode(), IMAGE.read_bytes(), Path(__file__).read_bytes()):
        key.update(hashlib.sha256(part).digest())
    cache = dest / "resolution.json"
    if cache.exists() and json.loads(cache.read_text())["key"] == key.hexdigest():
        print("user_env.py: the resolution for these inputs is cached (resolution.json)")
        return json.loads(cache.read_text())["install"]
    items = resolve(wheel)
    cache.write_text(json.dumps({"key": key.hexdigest(), "install": items}, indent=1))
    return items


def download(wanted: dict[str, tuple[str, str]], dest: Path) -> int:
    """filename -> (name==version, sha256): each into the download cache once
    (pip, hash-checked), then hard-linked into DEST; returns the bytes fetched."""
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    missing = []
    for filename, (_, sha) in wanted.items():
        cached, old = DOWNLOADS / filename, dest / filename
        if cached.exists() and sha256_file(cached) == sha:
            continue
        if old.exists() and sha256_file(old) == sha:      # staged before the cache existed
            _link(old, cached)
        else:
            missing.append(filename)
    fetched = 0
    if missing:
        with tempfile.TemporaryDirectory(dir=DOWNLOADS) as tmp:
            reqs = Path(tmp, "requirements.txt")
            reqs.write_text("".join(f"{wanted[f][0]} --hash=sha256:{wanted[f][1]}\n"
                                    for f in missing))
            env = {**os.environ, "PIP_CONSTRAINT": ""}
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--require-hashes", "-d", tmp, *TARGET, "-r", str(reqs)],
                           check=True, env=env)
            for filename in missing:
                fetched += Path(tmp, filename).stat().st_size
                os.replace(Path(tmp, filename), DOWNLOADS / filename)
    for whl in dest.glob("*.whl"):
        if whl.name not in wanted:
            whl.unlink()            # left from an earlier resolution
    for filename in wanted:
        if not (dest / filename).exists() or not (dest / filename).samefile(DOWNLOADS / filename):
            _link(DOWNLOADS / filename, dest / filename)
    return fetched


def _link(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:         # another file system
        shutil.copy(src, dst)


def main() -> None:
    wheel, dest = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    dest.mkdir(parents=True, exist_ok=True)
    image = {_norm(n): p["version"].split("+")[0]
             for n, p in json.loads(IMAGE.read_text())["packages"].items()}
    rows, wanted, replaced = [], {}, []
    for item in cached_resolve(wheel, dest):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if version.endswith("+image"):
            rows.append(f"{name}=={version[:-6]}  # kept from the image")
        elif name.lower() != "vllm":
            rows.append(f"{name}=={version}  # added")
            info = item["download_info"]
            filename = urllib.parse.unquote(info["url"].rsplit("/", 1)[1])
            wanted[filename] = (f"{name}=={version}", info["archive_info"]["hashes"]["sha256"])
            if _norm(name) in image:
                replaced.append(f"{name} {image[_norm(name)]} -> {version}")
    fetched = download(wanted, dest)
    (dest / "lock.txt").write_text("\n".join(sorted(rows, key=str.lower)) + "\n")
    (dest / "SHA256SUMS").write_text("".join(f"{sha}  {f}\n"
                                             for f, (_, sha) in sorted(wanted.items())))
    size = sum((dest / f).stat().st_size for f in wanted) >> 20
    print(f"user_env.py: {len(rows)} packages in the install, {len(wanted)} wheels added "
          f"({size} MiB), the rest kept from the image")
    print(f"user_env.py: replaces {len(replaced)} of the image's packages: "
          + ", ".join(sorted(replaced, key=str.lower)))
    print(f"user_env.py: downloaded {fetched >> 20} MiB; the rest from {DOWNLOADS}")


if __name__ == "__main__":
    main()
