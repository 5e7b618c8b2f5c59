#!/usr/bin/env python3
"""Stage one bundle that gives an offline GPU host both vLLM installs the
benchmark matrix compares: the official 0.26.0 wheel (TP, DP and
ArcticInference rows) and ours (the official wheel with our patched Python
files over it).

Why not two wheels: ours differs from the official wheel in a few dozen
Python files, while each wheel is ~300 MB and every transfer to the host is
capped.  So the official wheel travels once (through
../shared/gpu-host/stage.sh, which also adds the runtime packages the host
lacks) and ours as ``ours.tar.gz`` (the changed and added members, plus the
list of members ours deletes), which ``host-setup.sh`` lays over a
hard-linked copy of the official install.  The peer, ArcticInference, travels
as its 226 KB sdist (hash-pinned below) and is built on the host by
``arctic-setup.sh``.

    ./build.sh --device cuda && python3 benchmarks/stage.py [OUTDIR]   (default .gpuhost)
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = (ROOT / "VLLM_VERSION").read_text().strip()
CACHE = Path(os.environ.get("VLLM_SP_CACHE", Path.home() / ".cache" / "vllm-sp"))
ARCTIC = ("arctic-inference", "arctic_inference-0.3.0.tar.gz",
          "7f22e3e1b1071c6061c0d6951be17c0fb50b08d06d6e543144c8f52faba60a36")


def members(whl: Path) -> dict[str, str]:
    """name -> sha256 of the wheel's files (dist-info left out)."""
    out = {}
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            if ".dist-info/" in info.filename or info.is_dir():
                continue
            out[info.filename] = hashlib.sha256(z.read(info)).hexdigest()
    return out


def part_bytes() -> int:
    """A device call carries the part *and* the working tree (tracked and
    untracked-not-ignored files, growing with committed results) under one
    64 MiB cap: 60 MiB parts were refused once, 56 MiB parts once the tree
    passed 8 MiB.  Cut the parts to what the tree leaves, less 2 MiB for the
    last call's extras (unpack.sh, the hashes, ours, the Arctic sdist)."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    tree = sum((ROOT / f.decode()).stat().st_size for f in files
               if f and (ROOT / f.decode()).is_file())
    size = (64 << 20) - tree - (2 << 20)
    if size < 16 << 20:
        raise SystemExit(f"stage.py: the working tree is {tree >> 20} MiB: too little of a "
                         "device call's 64 MiB is left for the parts")
    return size


def resplit(out: Path) -> None:
    """stage.sh cuts 60 MiB parts; re-cut the same bytes to part_bytes()
    (unpack.sh concatenates part* in name order and checks the hash)."""
    size = part_bytes()
    parts = sorted(out.glob("part*"))
    data = b"".join(p.read_bytes() for p in parts)
    for p in parts:
        p.unlink()
    for i in range(0, len(data), size):
        (out / f"part{i // size:02d}").write_bytes(data[i:i + size])


def main(out: Path) -> None:
    official = CACHE / "downloads" / f"vllm-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
    ours = ROOT / "dist" / f"vllm-{VERSION}+sp-cp38-abi3-manylinux_2_28_x86_64.whl"
    for whl, how in ((official, "./build.sh --device cuda downloads it"),
                     (ours, "./build.sh --device cuda")):
        if not whl.exists():
            sys.exit(f"stage.py: {whl} is missing: {how}")
    subprocess.run([str(ROOT.parent / "shared" / "gpu-host" / "stage.sh"), str(official), str(out)],
                   check=True)
    resplit(out)
    a, b = members(official), members(ours)
    changed = sorted(n for n in b if a.get(n) != b[n])
    deleted = sorted(n for n in a if n not in b)
    buf = out / "ours.tar.gz"
    with zipfile.ZipFile(ours) as z, tarfile.open(buf, "w:gz") as tar:
        for name in changed:
            data = z.read(name)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        listing = ("\n".join(deleted) + "\n").encode()
        info = tarfile.TarInfo("DELETED")
        info.size = len(listing)
        tar.addfile(info, io.BytesIO(listing))
    sys.path.insert(0, str(ROOT / "scripts"))
    from build import fetch  # pip download through the tools venv, checked against the pin
    name, filename, sha = ARCTIC
    sdist = fetch(name, filename, {filename: sha}, CACHE, ROOT / "patches" / f"v{VERSION}",
                  sdist=True)
    shutil.copy(sdist, out / filename)
    print(f"stage.py: ours = official + {len(changed)} changed/added files - {len(deleted)} "
          f"deleted -> {buf} ({buf.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".gpuhost"))
