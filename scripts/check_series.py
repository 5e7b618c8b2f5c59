#!/usr/bin/env python3
"""Is a patch series whole, explained, and does it apply?  No build, no wheel.

    scripts/check_series.py                 # the pin (VLLM_VERSION)
    scripts/check_series.py --version 0.32.0
    scripts/check_series.py --all           # every patches/v*/ with a series

Per release, each problem is one line on stderr and the exit status is 1:

- ``series`` and the directory agree: every name it lists exists and is a
  ``slug.patch`` (the slug is a patch's name in every release; its place is
  its line in ``series``), every ``*.patch`` is listed, none twice;
- every patch has a header (the text before its first ``diff --git``, which
  build.sh makes the commit message) that opens with DEP-3-style fields, one
  ``Key: value`` a line (a value goes on over lines that start with a
  space), up to the first empty line:

  ``Description: topic: what``, ``Origin:`` (``vllm-sp``: we wrote it) and
  ``Forwarded:`` (a URL, or ``no`` / ``not-needed`` with the reason) on
  every patch; on an upstream fix (the patches after ``series``' "Upstream
  fixes" comment) also ``Bug:`` (the upstream issue's URL, or ``no`` with
  the reason) and ``Drop-When:`` (what upstream must have for the patch to
  go).  After the fields, the why: at least BODY_MIN characters;
- the series applies in order to the pristine sdist (from the download
  cache, fetched and checked against SHA256SUMS as build.sh does when it is
  missing): each patch is checked and then applied, so patch N is checked
  against the tree patches 1..N-1 left.  Only the files the series touches
  are unpacked.

Once per run, whatever the releases: ``docs/design.md``'s series table (its
``patches`` column) names every slug of every release's series, and no slug
that none of them has (``--design`` to check another copy).

Why: a patch series fails in ways a build reports late or not at all (a
file renamed but not in ``series``, a header lost in an export, a patch that
only applies after a later one); this is the cheap check CI runs first.
"""

from __future__ import annotations

import argparse
import builtins
import os
import re
import subprocess
import symtable
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build  # noqa: E402

BODY_MIN = 100
NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*\.patch$")
# Every patch's fields, and an upstream fix's besides: what a value must
# start with, and that said in words for the error (after "no" or
# "not-needed" a reason in parentheses, free text).
URL = r"https?://\S+"
FIELDS = {"Description": (r"[\w./ -]+: \S", "'topic: what'"),
          "Origin": (r"\S", "who wrote it (vllm-sp: we did)"),
          "Forwarded": (rf"({URL}|(no|not-needed) \(\S)", "a URL, or no / not-needed (why)")}
FIX_FIELDS = {"Bug": (rf"({URL}|no \(\S)", "the upstream issue's URL, or no (why)"),
              "Drop-When": (r"\S", "what upstream must have for the patch to go")}


def listed(version_dir: Path) -> list[str]:
    """The series' patch names, duplicates kept (read_series in build.py)."""
    return build.read_series(version_dir)


def check_files(version_dir: Path) -> list[str]:
    names = listed(version_dir)
    problems = [f"series lists {n} twice" for n in sorted({n for n in names
                                                          if names.count(n) > 1})]
    names = list(dict.fromkeys(names))
    for name in names:
        if not NAME.match(name):
            problems.append(f"series names {name}: not slug.patch (lower-case words and "
                            "hyphens, no number: the order is series')")
        if not (version_dir / name).is_file():
            problems.append(f"series lists {name}, which does not exist")
    for path in sorted(version_dir.glob("*.patch")):
        if path.name not in names:
            problems.append(f"{path.name} is not in series")
    return problems


def upstream_fixes(version_dir: Path) -> set[str]:
    """The patches listed after the series' "Upstream fixes" comment."""
    fixes, seen = set(), False
    for line in (version_dir / "series").read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if not name:
            seen = seen or bool(re.match(r"#\s*Upstream fixes\b", line.strip()))
        elif seen:
            fixes.add(name)
    return fixes


def header_fields(header: str) -> tuple[dict[str, str], str, list[str]]:
    """The header's opening fields (up to its first empty line), the text
    after them, and the lines of that first paragraph that are no field."""
    block, _, body = header.partition("\n\n")
    fields, stray, key = {}, [], None
    for line in block.splitlines():
        m = re.match(r"^([A-Z][A-Za-z-]*): (.*)$", line)
        if m:
            key = m.group(1)
            fields[key] = m.group(2).strip()
        elif line[:1] == " " and key:
            fields[key] += " " + line.strip()
        else:
            stray.append(line)
    return fields, body, stray


def check_header(path: Path, upstream_fix: bool = False) -> list[str]:
    text = path.read_text()
    if "diff --git " not in text:
        return [f"{path.name}: no diff --git in it"]
    header = text.split("diff --git ", 1)[0].strip()
    if not header:
        return [f"{path.name}: no header (what and why) before its diff"]
    fields, body, stray = header_fields(header)
    problems = [f"{path.name}: {line[:60]!r} in the header's fields is no 'Key: value' "
                "(a value goes on over lines that start with a space)" for line in stray[:1]]
    wanted = {**FIELDS, **(FIX_FIELDS if upstream_fix else {})}
    for key, (form, words) in wanted.items():
        if key not in fields:
            problems.append(f"{path.name}: no {key}: field in the header (wanted: {words}"
                            + ("; every upstream fix has one)" if key in FIX_FIELDS else ")"))
        elif not re.match(form, fields[key]):
            problems.append(f"{path.name}: {key}: {fields[key][:60]!r} is not {words}")
    body = " ".join(body.split())
    if len(body) < BODY_MIN:
        problems.append(f"{path.name}: header body {len(body)} characters, under {BODY_MIN}: "
                        "say why the patch exists")
    return problems


def patched_paths(patches: list[Path]) -> set[str]:
    """Files the series reads from the pristine tree (a/ sides)."""
    paths = set()
    for p in patches:
        for line in p.read_text().splitlines():
            m = re.match(r"^--- a/(.+)$", line)
            if m:
                paths.add(m.group(1).rstrip("\t"))
    return paths


def unpack(sdist: Path, paths: set[str], dest: Path) -> None:
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar:
            rel = m.name.partition("/")[2]
            if rel in paths and m.isfile():
                m.name = rel
                members.append(m)
        tar.extractall(dest, members=members, filter="data")


def check_applies(version: str, version_dir: Path, cache: Path) -> list[str]:
    names = [n for n in dict.fromkeys(listed(version_dir)) if (version_dir / n).is_file()]
    patches = [version_dir / n for n in names]
    try:
        sdist = build.fetch("vllm", f"vllm-{version}.tar.gz", build.read_lock(version_dir),
                            cache, version_dir, sdist=True)
    except build.BuildError as e:
        return [f"no pristine sdist: {str(e).splitlines()[0]}"]
    with tempfile.TemporaryDirectory(prefix="check-series-") as tmp:
        tree = Path(tmp)
        unpack(sdist, patched_paths(patches), tree)
        # Outside any repository git apply works on plain files; the ceiling
        # keeps it from finding one above the temp dir.
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
        pristine = {f: f.read_text() for f in tree.rglob("*.py")}
        for p in patches:
            for args in (["--check"], []):
                proc = subprocess.run(["git", "apply", "--whitespace=nowarn", *args, str(p)],
                                      cwd=tree, env=env, text=True, capture_output=True,
                                      check=False)
                if proc.returncode != 0:
                    files = (build.failing_files(proc.stderr)
                             or [proc.stderr.strip().splitlines()[0]])
                    return [(f"{p.name} does not apply after the patches before it: "
                             f"{', '.join(files)}")]
        return [f"{f.relative_to(tree)}: {func}() reads '{name}', which nothing defines"
                for f in sorted(tree.rglob("*.py"))
                for func, name in sorted(undefined_names(f.read_text(), str(f))
                                         - undefined_names(pristine.get(f, ""), str(f)))]


def undefined_names(source: str, path: str) -> set[tuple[str, str]]:
    """(function, name): a name a function reads as a global that the module
    never binds and builtins lack.  Checked on the files the series touches,
    against the same check of the pristine file: a hand-resolved conflict
    that drops a parameter a body still reads imports and builds, and fails
    only when that function runs (on a GPU, where CI has none)."""
    found = set()

    def walk(table: symtable.SymbolTable) -> None:
        for child in table.get_children():
            if child.get_type() == "function":
                found.update((child.get_name(), s.get_name()) for s in child.get_symbols()
                             if s.is_global() and not s.is_declared_global()
                             and s.get_name() not in module
                             and not s.get_name().startswith("__")
                             and not hasattr(builtins, s.get_name()))
            walk(child)
    table = symtable.symtable(source, path, "exec")
    module = {s.get_name() for s in table.get_symbols()}
    walk(table)
    return found


def check(version: str, patches_dir: Path, cache: Path) -> list[str]:
    version_dir = patches_dir / f"v{version}"
    if not (version_dir / "series").is_file():
        return [f"no {version_dir / 'series'}"]
    problems = check_files(version_dir)
    fixes = upstream_fixes(version_dir)
    for name in dict.fromkeys(listed(version_dir)):
        if (version_dir / name).is_file():
            problems += check_header(version_dir / name, upstream_fix=name in fixes)
    problems += check_applies(version, version_dir, cache)
    return problems


def table_slugs(design: Path) -> set[str]:
    """The slugs in the patches column of design.md's series table (the
    table whose header row is ``| group | patches | what |``)."""
    slugs, inside = set(), False
    for line in design.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["group", "patches"]:
            inside = True
        elif inside and not line.startswith("|"):
            break
        elif inside and len(cells) >= 2:
            slugs.update(re.findall(r"`([a-z0-9-]+)`", cells[1]))
    return slugs


def check_design_table(design: Path, patches_dirs: list[Path]) -> list[str]:
    """design.md's series table against every release's series: a newcomer
    reads the design there, so a slug missing or misnamed is an error."""
    where: dict[str, list[str]] = {}
    for d in patches_dirs:
        for vdir in sorted(d.glob("v*/")):
            if (vdir / "series").is_file():
                for name in listed(vdir):
                    where.setdefault(build.slug_of(name), []).append(vdir.name)
    if not design.is_file():
        return [f"no {design}"]
    table = table_slugs(design)
    if not table:
        return [f"{design.name}: no series table (| group | patches | what |)"]
    problems = [f"{design.name}: the series table lacks {slug} "
                f"(in {', '.join(sorted(set(where[slug])))})"
                for slug in sorted(where) if slug not in table]
    problems += [f"{design.name}: the series table names {slug}, which no release's "
                 "series lists" for slug in sorted(table - where.keys())]
    return problems


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="check_series.py", description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--version", default=(build.ROOT / "VLLM_VERSION").read_text().strip(),
                       help="release whose series to check (default: the VLLM_VERSION file)")
    which.add_argument("--all", action="store_true", help="every patches/v*/ that has a series")
    ap.add_argument("--patches-dir", type=Path, default=build.ROOT / "patches")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("VLLM_SP_CACHE",
                                                Path.home() / ".cache" / "vllm-sp")),
                    help="download cache (default: $VLLM_SP_CACHE or ~/.cache/vllm-sp)")
    ap.add_argument("--design", type=Path, default=build.ROOT / "docs" / "design.md",
                    help="the design doc whose series table is checked (default: docs/design.md)")
    args = ap.parse_args(argv)
    if args.all:
        versions = sorted((p.name[1:] for p in args.patches_dir.glob("v*")
                           if (p / "series").is_file()),
                          key=lambda v: tuple(int(x) for x in v.split(".")))
    else:
        versions = [args.version]
    # The table covers the repository's releases and any --patches-dir beside them.
    problems = check_design_table(args.design, list(dict.fromkeys(
        [build.ROOT / "patches", args.patches_dir.resolve()])))
    for p in problems:
        print(f"check_series: {p}", file=sys.stderr)
    failed = bool(problems)
    for v in versions:
        problems = check(v, args.patches_dir.resolve(), args.cache.resolve())
        for p in problems:
            print(f"check_series: v{v}: {p}", file=sys.stderr)
        n = len(listed(args.patches_dir / f"v{v}")) if (args.patches_dir / f"v{v}" /
                                                         "series").is_file() else 0
        if problems:
            failed = True
        else:
            print(f"check_series: v{v}: {n} patches listed, explained, applying in order")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
