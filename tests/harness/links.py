"""Relative links of Markdown files: does each one's file (and heading
anchor) exist?  The README and docs/ are a user's map of the repository, so a
link that points nowhere is a defect a test can see."""

from __future__ import annotations

import re
from pathlib import Path

# [text](target) and <img src="target">; a target may carry a "title".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img [^>]*src=\"([^\"]+)\"")
FENCE = re.compile(r"^(```|~~~)")


def anchors(md: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, spaces to
    hyphens, punctuation but hyphens and underscores dropped."""
    out, fenced = set(), False
    for line in md.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            text = re.sub(r"[`*]", "", text)
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def links(md: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code blocks and spans."""
    found, fenced = [], False
    for n, line in enumerate(md.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        found += [(n, a or b) for a, b in LINK.findall(line)]
    return found


def broken_links(files: list[Path], root: Path) -> list[str]:
    """One line per relative link whose file or anchor does not exist."""
    problems = []
    for md in files:
        for n, target in links(md):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # https:, mailto:, ...
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(root)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading #{anchor} in {dest.name}")
    return problems
