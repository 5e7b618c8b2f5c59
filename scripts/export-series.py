#!/usr/bin/env python3
"""Write the commits of a work tree (``pristine..HEAD``) back out as the
patch series: one ``NNNN-slug.patch`` per commit, whose header is the commit
message, plus the ``series`` file.

    ./build.sh --tree-only --build-dir /tmp/dev     # pristine + series as commits
    cd /tmp/dev/vllm-<ver> && git checkout -b work HEAD~1   # drop the overlay commit
    ... edit, git commit (subject = "topic: what", body = why) ...
    scripts/export-series.py /tmp/dev/vllm-<ver>

The slug comes from a ``Patch: NNNN-slug`` line in the message when present,
else from the subject.  Commits named ``overlay`` are skipped (overlay/ is
maintained in this repo directly)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, text=True,
                          capture_output=True).stdout


def main(tree: Path) -> None:
    version = (ROOT / "VLLM_VERSION").read_text().strip()
    out = ROOT / "patches" / f"v{version}"
    commits = git(tree, "rev-list", "--reverse", "pristine..HEAD").split()
    names = []
    for old in out.glob("*.patch"):
        old.unlink()
    for sha in commits:
        msg = git(tree, "log", "-1", "--format=%B", sha).rstrip() + "\n"
        subject = msg.splitlines()[0]
        if subject == "overlay":
            continue
        m = re.search(r"^Patch: (\d{4}-[a-z0-9-]+)$", msg, flags=re.M)
        if m:
            name = m.group(1) + ".patch"
            msg = msg.replace(m.group(0) + "\n", "")
        else:
            slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:48].strip("-")
            name = f"{len(names) + 1:04d}-{slug}.patch"
        diff = git(tree, "show", "--format=", "--no-color", "--full-index", sha)
        (out / name).write_text(msg.rstrip() + "\n\n" + diff)
        names.append(name)
    header = f"# Applied in order by build.sh onto the pristine vLLM {version} sdist.\n"
    (out / "series").write_text(header + "".join(n + "\n" for n in names))
    print("\n".join(names))


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
