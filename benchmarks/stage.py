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
``arctic-setup.sh`` (for the release Arctic 0.3.0 plugs into, 0.26.0).

Another release (``--vllm-version 0.33.0``) stages the same way into its own
folder: where its torch is not the image's (0.33.0 needs torch 2.14.0), pip's
resolution brings torch and the CUDA wheels it pins, replacing the image's,
and the summary names what it replaces.  ``unpack.sh`` then tries the
install (smoke.py: import, a CUDA matmul, an NCCL all-reduce).

A speed change is measured against the tree before it on the same host
(issue 35: "each change measured alone"): ``--before REV`` also builds our
wheel at git revision REV (in a temporary worktree, the same build) and
stages it as ``ours-before.tar.gz``, which ``host-setup.sh`` lays out as
``$SITE_BEFORE``; its rows are run.py's ``*_before`` layouts, or any tool
under ``PYTHONPATH=$SITE_BEFORE``.

    ./build.sh && python3 -m benchmarks.stage [OUTDIR]   (the pin; default .gpuhost-<pin>)
    ./build.sh --version 0.26.0 \
        && python3 -m benchmarks.stage --vllm-version 0.26.0       (default .gpuhost-0.26.0)
    python3 -m benchmarks.stage --vllm-version 0.26.0 --before a7f5176
                                            (+ ours-before.tar.gz: ours at a7f5176)
    python3 -m benchmarks.stage --vllm-version 0.34.0 --results-aside
                                            (fewer, larger parts: see part_bytes)
"""

from __future__ import annotations

import argparse
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
PIN = (ROOT / "VLLM_VERSION").read_text().strip()
CACHE = Path(os.environ.get("VLLM_SP_CACHE", Path.home() / ".cache" / "vllm-sp"))
ARCTIC = ("arctic-inference", "arctic_inference-0.3.0.tar.gz",
          "7f22e3e1b1071c6061c0d6951be17c0fb50b08d06d6e543144c8f52faba60a36")
ARCTIC_VLLM = "0.26.0"      # the vLLM release its plugin patches


def members(whl: Path) -> dict[str, str]:
    """name -> sha256 of the wheel's files (dist-info left out)."""
    out = {}
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            if ".dist-info/" in info.filename or info.is_dir():
                continue
            out[info.filename] = hashlib.sha256(z.read(info)).hexdigest()
    return out


ASIDE = ".gpuhost-results"  # where --results-aside has benchmarks/results wait (ignored)
ASIDE_PART = 56 << 20         # 60 MiB parts were refused once: keep 8 MiB for the tree


def part_bytes(aside: bool = False) -> int:
    """A device call carries the part *and* the working tree (tracked and
    untracked-not-ignored files, growing with committed results) under one
    64 MiB cap: 60 MiB parts were refused once, 56 MiB parts once the tree
    passed 8 MiB.  Cut the parts to what the tree leaves, less 2 MiB for the
    last call's extras (unpack.sh, the hashes, ours, the Arctic sdist).
    With ``aside`` the part calls run while benchmarks/results waits in
    ``ASIDE`` (most of the tree, and no part call reads it), so the parts
    are as large as the cap allows and fewer calls carry the bundle; the
    extras then travel in a call of their own, after the results are back."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    tree = sum((ROOT / f.decode()).stat().st_size for f in files
               if f and (ROOT / f.decode()).is_file()
               and not (aside and f.startswith(b"benchmarks/results/")))
    size = (64 << 20) - tree - (2 << 20)
    if aside:
        size = min(size, ASIDE_PART)
    if size < 16 << 20:
        raise SystemExit(f"stage.py: the working tree is {tree >> 20} MiB: too little of a "
                         "device call's 64 MiB is left for the parts")
    return size


def bundle(official: Path, version: str, out: Path, ours: Path,
           aside: bool = False) -> tuple[int, int]:
    """official wheel + the added wheels + their lock -> out/part00.. and
    out/bundle.sha256; returns (parts, bytes).  The tar goes through a file,
    not memory: with a new torch it is several GB.

    A release with requirement overrides (``patches/v<release>/requirement-
    overrides.txt``: a pin of the official wheel the package index cannot
    satisfy) has no ``pip install vllm==<release>`` environment: its
    dependencies are resolved for ours, which requires the override, and the
    bundle says so (``bundle/overrides.txt``) for unpack.sh, which then installs
    the official wheel without its dependencies; ``pip check`` names the pin."""
    overrides = ROOT / "patches" / f"v{version}" / "requirement-overrides.txt"
    deps = CACHE / f"user-env-{version}"
    resolved = ours if overrides.exists() else official
    subprocess.run([sys.executable, "-m", "benchmarks.user_env", str(resolved), str(deps)],
                   cwd=ROOT, check=True)
    size = part_bytes(aside)
    tar_path = out / "bundle.tar"
    with tarfile.open(tar_path, mode="w") as tar:
        tar.add(official, f"bundle/{official.name}")
        for whl in sorted(deps.glob("*.whl")):
            tar.add(whl, f"bundle/deps/{whl.name}")
        tar.add(deps / "lock.txt", "bundle/lock.txt")
        if overrides.exists():
            tar.add(overrides, "bundle/overrides.txt")
            print(f"stage.py: dependencies resolved for ours: {overrides.relative_to(ROOT)}")
    parts, total = cut_parts(tar_path, out, size)
    for script in ("unpack.sh", "smoke.py"):
        shutil.copy(ROOT / "benchmarks" / script, out / script)
    return parts, total


def cut_parts(tar_path: Path, out: Path, size: int) -> tuple[int, int]:
    """``tar_path`` -> out/part00.. of ``size`` bytes and out/bundle.sha256
    (of the whole); the tar is removed.  Returns (parts, bytes)."""
    h = hashlib.sha256()
    parts = 0
    with open(tar_path, "rb") as f:
        while chunk := f.read(size):
            (out / f"part{parts:02d}").write_bytes(chunk)
            h.update(chunk)
            parts += 1
    total = tar_path.stat().st_size
    tar_path.unlink()
    if parts > 100:     # the unpack scripts join part* in the shell's order: two digits
        raise SystemExit(f"stage.py: {parts} parts: more than part00..part99")
    (out / "bundle.sha256").write_text(h.hexdigest() + "\n")
    return parts, total


def overlay_tar(official: Path, ours: Path, path: Path) -> tuple[list[str], list[str]]:
    """Ours as the official wheel's changed and added members, plus the
    list (``DELETED``) of the members ours drops: ``path``, a .tar.gz."""
    a, b = members(official), members(ours)
    changed = sorted(n for n in b if a.get(n) != b[n])
    deleted = sorted(n for n in a if n not in b)
    with zipfile.ZipFile(ours) as z, tarfile.open(path, "w:gz") as tar:
        for name in changed:
            data = z.read(name)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        listing = "".join(f"{n}\n" for n in deleted).encode()
        info = tarfile.TarInfo("DELETED")
        info.size = len(listing)
        tar.addfile(info, io.BytesIO(listing))
    return changed, deleted


def build_at(rev: str, version: str) -> Path:
    """Our CUDA wheel as of git revision ``rev``, built in a temporary
    worktree by that revision's own build.sh (the download cache is shared)."""
    tree = Path(f"/tmp/stage-before-{rev}")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                   capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                   check=True)
    try:
        subprocess.run(["./build.sh", "--device", "cuda", "--version", version], cwd=tree,
                       check=True)
        whl = tree / "dist" / f"vllm-{version}+sp-cp38-abi3-manylinux_2_28_x86_64.whl"
        kept = CACHE / f"ours-{version}-{rev}.whl"
        shutil.copy(whl, kept)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)
    return kept


def stage_caches(version: str) -> list[str]:
    """The JIT caches earlier leases returned, one device call each before the last:
    FlashInfer's (kept here as fi-cache-VERSION-sm90.tgz, the newest a poll returned) into
    .gpuhost-fi, vLLM's torch.compile entries (compile-cache.sh keep) into .gpuhost-cc/gNN."""
    calls = []
    shutil.rmtree(ROOT / ".gpuhost-fi", ignore_errors=True)
    fi = CACHE / f"fi-cache-{version}-sm90.tgz"
    if fi.exists():
        (ROOT / ".gpuhost-fi").mkdir()
        shutil.copy(fi, ROOT / ".gpuhost-fi" / "fi-cache.tgz")
        calls.append('mkdir -p /root/gh && mv .gpuhost-fi/fi-cache.tgz /root/gh/   '
                     'carry [".gpuhost-fi"]')
    out = subprocess.run(["bash", "benchmarks/compile-cache.sh", "stage", version], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    calls += [line.removeprefix("call: ") for line in out.splitlines()
              if line.startswith("call: ")]
    return calls


def older_than_sources(wheel: Path, version: str) -> str | None:
    """The last commit that changed what goes into our wheel of ``version`` (its series, the
    overlay, the build) when the wheel in dist/ is older than it, else None: staging a wheel
    built before a patch landed would measure the tree without it (dist/ outlives commits)."""
    out = subprocess.run(["git", "log", "-1", "--format=%ct %h", "--", f"patches/v{version}",
                          "overlay", "build.sh", "scripts/build.py"], cwd=ROOT,
                         capture_output=True, text=True).stdout.split()
    if len(out) != 2 or wheel.stat().st_mtime >= int(out[0]):
        return None
    return f"commit {out[1]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path,
                    help="default .gpuhost-VERSION")
    ap.add_argument("--vllm-version", default=PIN,
                    help=f"the vLLM release to stage (default: the pin, {PIN})")
    ap.add_argument("--results-aside", action="store_true",
                    help=f"cut parts for calls made while benchmarks/results waits in {ASIDE}")
    ap.add_argument("--before", metavar="REV",
                    help="also stage ours as of git revision REV (ours-before.tar.gz)")
    args = ap.parse_args()
    version = args.vllm_version
    out = args.out or ROOT / f".gpuhost-{version}"
    official = CACHE / "downloads" / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    ours = ROOT / "dist" / f"vllm-{version}+sp-cp38-abi3-manylinux_2_28_x86_64.whl"
    build = "./build.sh --device cuda" + (f" --version {version}" if version != PIN else "")
    for whl, how in ((official, f"{build} downloads it"), (ours, build)):
        if not whl.exists():
            sys.exit(f"stage.py: {whl} is missing: {how}")
    stale = older_than_sources(ours, version)
    if stale:
        sys.exit(f"stage.py: {ours.name} was built before {stale}: {build}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    parts, total = bundle(official, version, out, ours, args.results_aside)
    changed, deleted = overlay_tar(official, ours, out / "ours.tar.gz")
    extras = ["unpack.sh", "smoke.py", "bundle.sha256", "ours.tar.gz"]
    if args.before:
        before = build_at(args.before, version)
        n, _ = overlay_tar(official, before, out / "ours-before.tar.gz")
        print(f"stage.py: ours at {args.before}: {len(n)} changed/added files -> "
              f"{out / 'ours-before.tar.gz'}")
        extras.append("ours-before.tar.gz")
    if version == ARCTIC_VLLM:
        from build import fetch  # pip download through the tools venv, checked against the pin
        name, filename, sha = ARCTIC
        sdist = fetch(name, filename, {filename: sha}, CACHE, ROOT / "patches" / f"v{version}",
                      sdist=True)
        shutil.copy(sdist, out / filename)
        extras.append(filename)
    print(f"stage.py: vLLM {version}: {parts} parts of at most "
          f"{part_bytes(args.results_aside) >> 20} MiB in "
          f"{out}, {total / 2**30:.2f} GiB in all ({total >> 20} MiB)")
    buf = out / "ours.tar.gz"
    print(f"stage.py: ours = official + {len(changed)} changed/added files - {len(deleted)} "
          f"deleted -> {buf} ({buf.stat().st_size // 1024} KiB)")
    rel = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    caches = stage_caches(version)
    cache_calls = "".join(f"\n  {c}" for c in caches)
    carried = ", ".join(f"{rel}/{e}" for e in extras)
    if args.results_aside:
        # each cache group is sized to one call beside the bare tree, not beside the results
        print(f"stage.py: mv benchmarks/results {ASIDE}; {parts} device calls, one a part; "
              f"{len(caches)} calls, the JIT caches of earlier leases:{cache_calls}\n"
              f"stage.py: mv {ASIDE} benchmarks/results; one more call carries {carried}")
    else:
        # the parts leave room for the extras, so the last part's call carries them
        print(f"stage.py: {parts} device calls, one a part; before the last of them, "
              f"{len(caches)} calls, the JIT caches of earlier leases, each with "
              f"benchmarks/results out of the tree (beside it a group passes 64 MiB):"
              f"{cache_calls}\n"
              f"stage.py: the last part's call also carries {carried}")


if __name__ == "__main__":
    main()
