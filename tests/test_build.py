"""The build pipeline: series applies, wheel = patched Python + official
binaries, installed version carries our tag, errors are one clear line."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.repo import CACHE, FLAVOR, REPO, VERSION, script_module

VERSION_DIR = REPO / "patches" / f"v{VERSION}"
TREE = REPO / "build" / f"vllm-{VERSION}"
FLAVORS = {"cpu": ("vllm_cpu", "+sp.cpu"), "cuda": ("vllm", "+sp")}


def build(*args, env=None, **kw) -> subprocess.CompletedProcess:
    """build.sh on the release under test (a later --version in ``args`` wins)."""
    return subprocess.run([str(REPO / "build.sh"), "--version", VERSION, *args], text=True,
                          capture_output=True, env=env or dict(os.environ), **kw)


def series() -> list[str]:
    return [line.split("#")[0].strip()
            for line in (VERSION_DIR / "series").read_text().splitlines()
            if line.split("#")[0].strip()]


def upstream_fixes() -> list[str]:
    """The patches after the series' "Upstream fixes" comment."""
    text = (VERSION_DIR / "series").read_text()
    return [line for line in text.split("Upstream fixes", 1)[1].splitlines()
            if line.strip() and not line.startswith("#")]


def wheel_path(flavor: str) -> Path:
    local = FLAVORS[flavor][1]
    found = sorted((REPO / "dist").glob(f"vllm-{VERSION}{local}-*.whl"))
    if not found:
        pytest.fail(f"no {flavor} wheel in dist/: run ./build.sh --device {flavor} first")
    return found[-1]


def official_wheel(flavor: str) -> Path:
    return CACHE / "downloads" / (f"{FLAVORS[flavor][0]}-{VERSION}"
                                   "-cp38-abi3-manylinux_2_28_x86_64.whl")


# ------------------------------------------------------------------ series

def test_series_is_complete():
    names = series()
    on_disk = sorted(p.name for p in VERSION_DIR.glob("*.patch"))
    assert sorted(names) == on_disk, "series and patches/ disagree"
    assert len(set(names)) == len(names), "series lists a patch twice"
    for name in names:
        # A patch is named by its slug in every release; series holds the order.
        assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\.patch", name), name
        text = (VERSION_DIR / name).read_text()
        header = text.split("diff --git", 1)[0]
        assert len(header.strip().splitlines()) >= 2, f"{name}: header must say what and why"


def test_series_applies_to_pristine(tmp_path):
    proc = build("--tree-only", "--build-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    tree = tmp_path / f"vllm-{VERSION}"
    log = subprocess.run(["git", "log", "--reverse",
                          "--format=%x1e%s%x1f%(trailers:key=Patch,valueonly)"], cwd=tree,
                         capture_output=True, text=True, check=True).stdout
    commits = [entry.split("\x1f") for entry in log.split("\x1e")[1:]]
    subjects = [s for s, _ in commits]
    names = [n.strip() for _, n in commits]
    assert subjects[0] == f"vllm {VERSION} sdist, pristine" and subjects[-1] == "overlay"
    # one commit per patch, in series order, its message the patch's header
    # with the Description's line as the subject (one line: the fields under it)
    assert [n + ".patch" for n in names[1:-1]] == series()
    for (subject, _), name in zip(commits[1:-1], series()):
        assert (VERSION_DIR / name).read_text().startswith(f"Description: {subject}\n"), name
    # Every overlay file landed unchanged.
    for f in (REPO / "overlay").rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts:
            assert (tree / f.relative_to(REPO / "overlay")).read_bytes() == f.read_bytes(), f


# ------------------------------------------------------------------ wheel

def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.mark.parametrize("flavor", [pytest.param("cpu", marks=pytest.mark.vllm_cpu), "cuda"])
def test_wheel_is_patched_tree_plus_official_binaries(flavor):
    ours, theirs = wheel_path(flavor), official_wheel(flavor)
    assert theirs.exists(), f"official wheel not cached: {theirs}"
    assert TREE.is_dir(), "build/ tree missing: run ./build.sh first"
    with zipfile.ZipFile(ours) as w, zipfile.ZipFile(theirs) as o:
        names = set(w.namelist())
        # 1. every file of the patched tree, byte for byte
        tree_files = [p for p in (TREE / "vllm").rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts]
        assert len(tree_files) > 2000
        for p in tree_files:
            arc = p.relative_to(TREE).as_posix()
            if arc == "vllm/_version.py":
                continue
            assert arc in names, f"{arc} missing from the wheel"
            assert w.read(arc) == p.read_bytes(), f"{arc} differs from the patched tree"
        # 2. every official file the tree does not have (binaries, vendored
        #    code), byte for byte
        tree_arcs = {p.relative_to(TREE).as_posix() for p in tree_files}
        binaries = 0
        for info in o.infolist():
            n = info.filename
            if ".dist-info/" in n or n in tree_arcs or n == "vllm/_version.py":
                continue
            assert n in names, f"official {n} missing"
            assert w.read(n) == o.read(n), f"{n} differs from the official wheel"
            binaries += n.endswith(".so")
        assert binaries >= 3
        # 3. files the series deletes do not survive
        deleted = subprocess.run(["git", "diff", "--name-only", "--diff-filter=D", "pristine",
                                  "HEAD", "--", "vllm"], cwd=TREE, capture_output=True,
                                 text=True, check=True).stdout.split()
        for n in deleted:
            assert n not in names, f"{n} was deleted by the series but is in the wheel"
        # 4. metadata and RECORD
        info = f"vllm-{VERSION}{FLAVORS[flavor][1]}.dist-info"
        meta = w.read(f"{info}/METADATA").decode()
        assert "\nName: vllm\n" in meta
        assert f"\nVersion: {VERSION}{FLAVORS[flavor][1]}\n" in meta
        if flavor == "cpu":
            # vllm-cpu pins PyTorch's own x86_64 build, torch==X+cpu (and
            # torch==X behind a marker elsewhere); ours requires the package
            # index's torch==X, one line, on every machine.
            official = o.read(f"vllm_cpu-{VERSION}.dist-info/METADATA").decode()
            pins = re.findall(r"^Requires-Dist: torch==(\S+)\+cpu;", official, flags=re.M)
            assert len(pins) == 1, official
            torch_reqs = [line for line in meta.splitlines()
                          if re.match(r"Requires-Dist: torch\b", line)]
            assert torch_reqs == [f"Requires-Dist: torch=={pins[0]}"], torch_reqs
        listed = {}
        for row in csv.reader(io.StringIO(w.read(f"{info}/RECORD").decode())):
            assert len(row) == 3, row          # names with commas quoted, as pip reads them
            path, digest, size = row
            listed[path] = (digest, size)
        assert any("," in n for n in listed), "vLLM ships names with commas: none seen"
        assert set(listed) == {n for n in names if not n.endswith("/")}
        for n, (digest, size) in listed.items():
            if n.endswith("RECORD"):
                continue
            data = w.read(n)
            assert digest == record_hash(data) and int(size) == len(data), n
    assert ours.name.startswith(f"vllm-{VERSION}{FLAVORS[flavor][1]}-cp38-abi3-")


def test_installed_wheel_reports_local_tag():
    code = ("import vllm, importlib.metadata as m; from packaging.specifiers import SpecifierSet;"
            "from vllm.platforms import current_platform as p;"
            f"v = m.version('vllm'); print(vllm.__version__, v, v in SpecifierSet('=={VERSION}'), "
            "p.is_cpu(), vllm.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR"))
    assert out.returncode == 0, out.stderr
    mod_ver, dist_ver, satisfies, is_cpu, path = out.stdout.split()
    assert mod_ver == dist_ver == f"{VERSION}{FLAVORS[FLAVOR][1]}"
    assert satisfies == "True", "must satisfy vllm==<pin> so it drops in"
    # The CPU platform: vllm-cpu's own, or (the CUDA wheel) VLLM_TARGET_DEVICE=cpu's.
    assert is_cpu == "True"
    # The installed Python is the patched tree's.
    installed = Path(path).parent
    for rel in ("config/parallel.py", "distributed/parallel_state.py", "engine/arg_utils.py"):
        assert (installed / rel).read_bytes() == (TREE / "vllm" / rel).read_bytes(), rel


# ------------------------------------------------------------------ errors

def one_line_error(proc) -> str:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("build.sh: error: ")
    return lines[0]


@pytest.mark.once
def test_unknown_version_is_one_line():
    line = one_line_error(build("--version", "0.1.2"))
    assert "unknown vLLM version '0.1.2'" in line and VERSION in line


@pytest.mark.once
def test_hash_mismatch_is_one_line(tmp_path):
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / f"vllm-{VERSION}.tar.gz").write_bytes(b"not the sdist")
    line = one_line_error(build("--cache", str(tmp_path), "--tree-only",
                                "--build-dir", str(tmp_path / "b")))
    assert f"sha256 mismatch for vllm-{VERSION}.tar.gz" in line
    assert not (tmp_path / "downloads" / f"vllm-{VERSION}.tar.gz").exists()


@pytest.mark.once
def test_no_network_is_one_line(tmp_path):
    (tmp_path / "downloads").mkdir()
    os.symlink(CACHE / "downloads" / f"vllm-{VERSION}.tar.gz",
               tmp_path / "downloads" / f"vllm-{VERSION}.tar.gz")
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple",
               PIP_FIND_LINKS="", PIP_NO_INDEX="", PIP_RETRIES="0", PIP_TIMEOUT="3")
    env.pop("PIP_NO_INDEX")
    line = one_line_error(build("--device", "cpu", "--cache", str(tmp_path), "--build-dir",
                                str(tmp_path / "b"), "--dist-dir", str(tmp_path / "d"), env=env))
    assert f"cannot download vllm-cpu=={VERSION}: no network" in line


@pytest.mark.once
def test_patch_that_does_not_apply_names_patch_and_file(tmp_path):
    vdir = tmp_path / "patches" / f"v{VERSION}"
    shutil.copytree(VERSION_DIR, vdir)
    bad = "broken-on-purpose.patch"
    (vdir / bad).write_text(
        "Broken on purpose.\nIts context matches nothing in the file.\n\n"
        "diff --git a/vllm/envs.py b/vllm/envs.py\n--- a/vllm/envs.py\n+++ b/vllm/envs.py\n"
        "@@ -1,3 +1,3 @@\n no such line one\n-no such line two\n+replacement\n"
        " no such line three\n")
    with open(vdir / "series", "a") as f:
        f.write(bad + "\n")
    line = one_line_error(build("--tree-only", "--patches-dir", str(tmp_path / "patches"),
                                "--build-dir", str(tmp_path / "b")))
    assert f"patch {bad} does not apply: vllm/envs.py" in line


@pytest.mark.once
def test_cpu_flavour_builds_the_newest_release_vllm_cpu_publishes(tmp_path):
    """vllm-cpu publishes a release days or weeks after vllm, so `./build.sh
    --device cpu` without --version builds the newest ported release it has,
    saying so in one line when that is not the pin (the CUDA default).  pip
    asks a local index holding vllm-cpu of the release under test and the
    older ported ones."""
    pin = (REPO / "VLLM_VERSION").read_text().strip()
    ported = script_module("tier").releases()
    index = tmp_path / "index"
    index.mkdir()
    for v in ported[:ported.index(VERSION) + 1]:
        (index / f"vllm_cpu-{v}-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    (tmp_path / "cache" / "downloads").mkdir(parents=True)
    sdist = f"vllm-{VERSION}.tar.gz"
    os.symlink(CACHE / "downloads" / sdist, tmp_path / "cache" / "downloads" / sdist)
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(index))
    proc = subprocess.run([str(REPO / "build.sh"), "--device", "cpu", "--tree-only",
                           "--cache", str(tmp_path / "cache"), "--build-dir",
                           str(tmp_path / "b")], env=env, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [line for line in proc.stdout.splitlines() if "vllm-cpu has no" in line]
    if VERSION == pin:
        assert said == []
    else:
        assert said == [f"build.sh: vllm-cpu has no {pin} (the default) yet: building "
                        f"{VERSION}, the newest ported release it publishes (--version "
                        "to choose)"]
    assert (tmp_path / "b" / f"vllm-{VERSION}").is_dir()


# ------------------------------------------------------------ check_series.py

def check_series(patches_dir, *args: str) -> subprocess.CompletedProcess:
    """scripts/check_series.py on VERSION's series copied into ``patches_dir``."""
    return subprocess.run([sys.executable, str(REPO / "scripts" / "check_series.py"),
                           "--version", VERSION, "--cache", str(CACHE),
                           "--patches-dir", str(patches_dir), *args],
                          text=True, capture_output=True)


@pytest.mark.once
def test_check_series_standalone(tmp_path):
    """scripts/check_series.py (run by CI before any build) passes on the
    series, and a patch left out of `series` fails it with one line."""
    check = [sys.executable, str(REPO / "scripts" / "check_series.py"), "--version", VERSION,
             "--cache", str(CACHE)]
    proc = subprocess.run(check, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    shutil.copytree(VERSION_DIR, tmp_path / f"v{VERSION}")
    (tmp_path / f"v{VERSION}" / "stray.patch").write_text("stray: not listed\n")
    proc = subprocess.run(check + ["--patches-dir", str(tmp_path)], text=True,
                          capture_output=True)
    assert proc.returncode == 1
    assert proc.stderr == f"check_series: v{VERSION}: stray.patch is not in series\n"


@pytest.mark.once
def test_check_series_wants_the_header_fields(tmp_path):
    """A patch without one of its DEP-3-style fields fails check_series.py
    with one line naming the patch and the field: Forwarded on every patch,
    Drop-When only on an upstream fix (a patch after series' "Upstream
    fixes" comment; an SP patch has none and passes); and a "no" without
    its reason in parentheses."""
    vdir = tmp_path / f"v{VERSION}"
    shutil.copytree(VERSION_DIR, vdir)
    fix = "cpu-attention-writes-only-actual-tokens.patch"
    ours = "config-sequence-parallel-size.patch"
    assert fix in upstream_fixes() and ours in series() and ours not in upstream_fixes()
    for name, field in ((fix, "Drop-When"), (ours, "Forwarded")):
        text = (vdir / name).read_text()
        cut = re.sub(rf"^{field}: .*\n( .*\n)*", "", text, count=1, flags=re.M)
        assert cut != text, f"{name} has no {field}: field to remove"
        (vdir / name).write_text(cut)
    bare = "shutdown-kills-workers-of-an-exited-engine.patch"
    text = (vdir / bare).read_text()
    (vdir / bare).write_text(re.sub(r"^Forwarded: .*\n( .*\n)*", "Forwarded: no\n", text,
                                    count=1, flags=re.M))
    proc = check_series(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"check_series: v{VERSION}: {ours}: no Forwarded: field in the header "
        "(wanted: a URL, or no / not-needed (why))",
        f"check_series: v{VERSION}: {fix}: no Drop-When: field in the header "
        "(wanted: what upstream must have for the patch to go; every upstream fix has one)",
        f"check_series: v{VERSION}: {bare}: Forwarded: 'no' is not a URL, or no / not-needed "
        "(why)",
    ], proc.stderr


@pytest.mark.once
def test_check_series_finds_a_name_nothing_defines(tmp_path):
    """A function a patch leaves reading a name that neither it nor its
    module binds (a parameter a hand resolution dropped: 0.34.0's MLA
    _attend once read mqa_q_prepared so) fails check_series.py with one line
    naming the file, the function and the name; names the pristine file
    reads so already are not reported."""
    vdir = tmp_path / f"v{VERSION}"
    shutil.copytree(VERSION_DIR, vdir)
    planted = vdir / "config-sequence-parallel-size.patch"
    planted.write_text(planted.read_text() + (
        "diff --git a/vllm/sp_probe.py b/vllm/sp_probe.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/vllm/sp_probe.py\n"
        "@@ -0,0 +1,4 @@\n"
        "+import os\n"
        "+def attend(q, output_shape=None):\n"
        "+    return q, output_shape, os.sep, len(q), mqa_q_prepared\n"
        "+\n"))
    proc = check_series(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"check_series: v{VERSION}: vllm/sp_probe.py: attend() reads 'mqa_q_prepared', "
        "which nothing defines"], proc.stderr


@pytest.mark.once
def test_check_series_holds_the_design_table_to_the_series(tmp_path):
    """docs/design.md's series table, which a newcomer reads as the design,
    names every release's slugs and only those: planted, a patch renamed in
    a series (the table now stale) and a table row that misnames a slug
    fail check_series.py, one line each."""
    vdir = tmp_path / f"v{VERSION}"
    shutil.copytree(VERSION_DIR, vdir)
    (vdir / "metrics-shift-modes.patch").rename(vdir / "metrics-shift-mode-counters.patch")
    (vdir / "series").write_text((vdir / "series").read_text().replace(
        "metrics-shift-modes.patch", "metrics-shift-mode-counters.patch"))
    design = tmp_path / "design.md"
    text = (REPO / "docs" / "design.md").read_text()
    slug = "detokenizer-prime-with-prompt-tail"
    row = f"| | `{slug}` |"
    assert text.count(row) == 1
    design.write_text(text.replace(row, "| | `detokenizer-primes-with-prompt-tail` |"))
    proc = check_series(tmp_path, "--design", str(design))
    everywhere = ", ".join(f"v{v}" for v in script_module("tier").releases())
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"check_series: design.md: the series table lacks {slug} (in {everywhere})",
        f"check_series: design.md: the series table lacks metrics-shift-mode-counters "
        f"(in v{VERSION})",
        "check_series: design.md: the series table names detokenizer-primes-with-prompt-tail, "
        "which no release's series lists",
    ], proc.stderr
