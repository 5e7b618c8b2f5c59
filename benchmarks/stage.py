#!/usr/bin/env python3
"""Stage one bundle that gives an offline GPU host the environment `pip install
vllm==<pin>` gives a user there, plus ours beside it.

The official wheel and every wheel pip adds to the host's image for it
(``user_env.py``: pip's own resolution against ``host/image-cp312.json``,
flashinfer and the rest of the wheel's `Requires-Dist` included) travel as
one tar cut into parts; ``unpack.sh`` runs the real ``pip install
--no-index`` into the image's environment and records ``pip check``.  Ours
differs from the official wheel in a few dozen Python files, so it travels
as ``ours.tar.gz`` (the changed and added members, plus the list of members
ours deletes), which ``host-setup.sh`` lays over a hard-linked copy of the
installed ``vllm`` package.  The peer, ArcticInference, travels as its
226 KB sdist (hash-pinned below) and is built on the host by
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


def bundle(official: Path, out: Path) -> int:
    """official wheel + the added wheels + their lock -> out/part00.. and
    out/bundle.sha256; returns the number of parts."""
    deps = CACHE / f"user-env-{VERSION}"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "user_env.py"), str(official),
                    str(deps)], check=True)
    size = part_bytes()
    h = hashlib.sha256()
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(official, f"bundle/{official.name}")
        for whl in sorted(deps.glob("*.whl")):
            tar.add(whl, f"bundle/deps/{whl.name}")
        tar.add(deps / "lock.txt", "bundle/lock.txt")
    raw = data.getvalue()
    h.update(raw)
    for i in range(0, len(raw), size):
        (out / f"part{i // size:02d}").write_bytes(raw[i:i + size])
    (out / "bundle.sha256").write_text(h.hexdigest() + "\n")
    shutil.copy(ROOT / "benchmarks" / "unpack.sh", out / "unpack.sh")
    return -(-len(raw) // size)


def main(out: Path) -> None:
    official = CACHE / "downloads" / f"vllm-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
    ours = ROOT / "dist" / f"vllm-{VERSION}+sp-cp38-abi3-manylinux_2_28_x86_64.whl"
    for whl, how in ((official, "./build.sh --device cuda downloads it"),
                     (ours, "./build.sh --device cuda")):
        if not whl.exists():
            sys.exit(f"stage.py: {whl} is missing: {how}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    parts = bundle(official, out)
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
    print(f"stage.py: {parts} parts of at most {part_bytes() >> 20} MiB in {out}")
    print(f"stage.py: ours = official + {len(changed)} changed/added files - {len(deleted)} "
          f"deleted -> {buf} ({buf.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".gpuhost"))
