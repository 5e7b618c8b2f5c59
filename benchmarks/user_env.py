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

    python3 benchmarks/user_env.py WHEEL OUTDIR   -> OUTDIR/*.whl, OUTDIR/lock.txt
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGE = HERE / "host" / "image-cp312.json"
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
          "--abi", "cp312", "--abi", "abi3", "--abi", "none"] + [
    f"--platform={p}"
    for p in [f"manylinux_2_{n}_x86_64" for n in (39, 35, 34, 31, 28, 27, 26, 24, 17)]
    + ["manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]]


def _stubs(folder: Path) -> dict[str, str]:
    """One metadata-only wheel per image package; name -> image version."""
    pkgs = json.loads(IMAGE.read_text())["packages"]
    out = {}
    for name, p in pkgs.items():
        public = p["version"].split("+")[0]
        norm = re.sub(r"[-_.]+", "_", name).lower()
        info = f"{norm}-{public}+image.dist-info"
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {public}+image\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in p["requires_dist"] or [])
        with zipfile.ZipFile(folder / f"{norm}-{public}+image-py3-none-any.whl", "w") as z:
            z.writestr(f"{info}/METADATA", meta)
            z.writestr(f"{info}/WHEEL",
                       "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{info}/RECORD", "")
        out[name] = public
    return out


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
        kept = _stubs(stubs)
        env = {**os.environ, "PIP_CONSTRAINT": ""}    # this machine's own caps are not the host's
        for _ in range(20):
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
            ruled_out = re.findall(r"The user requested \(constraint\) ([A-Za-z0-9_.-]+)==",
                                   proc.stdout)
            if not ruled_out:
                tail = [ln for ln in proc.stdout.splitlines()
                        if "WARNING: Location" not in ln][-12:]
                raise SystemExit("user_env.py: pip could not resolve:\n" + "\n".join(tail))
            for name in ruled_out:
                kept.pop(name, None)
        raise SystemExit("user_env.py: the resolution did not settle")


def main() -> None:
    wheel, dest = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    dest.mkdir(parents=True, exist_ok=True)
    rows, fetch = [], []
    for item in resolve(wheel):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if version.endswith("+image"):
            rows.append(f"{name}=={version[:-6]}  # kept from the image")
        elif name.lower() != "vllm":
            rows.append(f"{name}=={version}  # added")
            fetch.append(f"{name}=={version}")
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest),
                    *TARGET, *fetch], check=True, env=env)
    names = {re.sub(r"[-_.]+", "_", f.split("==")[0]).lower() for f in fetch}
    for whl in dest.glob("*.whl"):
        if re.sub(r"[-_.]+", "_", whl.name.split("-")[0]).lower() not in names:
            whl.unlink()            # left from an earlier resolution
    (dest / "lock.txt").write_text("\n".join(sorted(rows, key=str.lower)) + "\n")
    size = sum(w.stat().st_size for w in dest.glob("*.whl")) >> 20
    print(f"user_env.py: {len(rows)} packages in the install, {len(fetch)} wheels added "
          f"({size} MiB), the rest kept from the image")


if __name__ == "__main__":
    main()
