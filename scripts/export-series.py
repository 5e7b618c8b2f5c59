#!/usr/bin/env python3
"""Write the commits of a work tree (``pristine..HEAD``) back out as the
patch series of VLLM_VERSION (or the release given second): one
``slug.patch`` per commit, whose header is the commit message, plus the
``series`` file, which holds the commits' order (its grouping comments
kept, matched by slug); check the result with scripts/check_series.py.

    ./build.sh --tree-only --build-dir /tmp/dev     # pristine + series as commits
    cd /tmp/dev/vllm-<ver> && git checkout -b work HEAD~1   # drop the overlay commit
    ... edit, git commit (subject = "topic: what", body = why) ...
    scripts/export-series.py /tmp/dev/vllm-<ver> [<ver>]

The slug comes from a ``Patch: slug`` line in the message when present
(build.sh writes one per patch), else from the subject.  Commits named
``overlay`` are skipped (overlay/ is maintained in this repo directly)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build import ROOT, export_series  # noqa: E402


def main(tree: Path, version: str | None = None) -> None:
    version = version or (ROOT / "VLLM_VERSION").read_text().strip()
    print("\n".join(export_series(tree, ROOT / "patches" / f"v{version}", version)))


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), *sys.argv[2:3])
