"""What a user reads points somewhere: every relative link of the README and
docs/ (and the GPU harness's README) resolves, file and heading anchor.  And
the README stays a guide a user reads through: at most ``README_LINES`` lines,
the evidence and design in docs/ behind its links."""

from __future__ import annotations

import pytest

from harness.links import broken_links
from harness.repo import REPO

pytestmark = pytest.mark.once

# What, install, which release, which layout for which traffic, flags, models and features,
# limits, links: what does not fit goes to docs/ (issue 85).
README_LINES = 200


def user_docs(root=REPO):
    return [root / "README.md", *sorted((root / "docs").rglob("*.md")),
            root / "benchmarks" / "README.md"]


def test_every_relative_link_resolves():
    assert broken_links(user_docs(), REPO) == []


def test_readme_stays_a_guide():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_LINES, (
        f"README.md has {lines} lines, more than {README_LINES}: move evidence and design to "
        "docs/ (models.md, benchmarks.md, design.md, reliability.md) and link it")


def test_a_broken_link_is_found(tmp_path):
    """Planted: a link to a file that is not there and one to a heading that
    is not there, beside links that resolve and a link inside code (not one)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text("# Design\n\n## The series\n")
    (tmp_path / "README.md").write_text(
        "# Guide\n\n"
        "[design](docs/design.md), [series](docs/design.md#the-series), [top](#guide)\n"
        "[gone](docs/guide.md) and [moved](docs/design.md#the-patches)\n"
        "```\n[not a link](nowhere.md)\n```\n"
        "`[nor this](nowhere.md)`\n")
    assert broken_links([tmp_path / "README.md"], tmp_path) == [
        "README.md:4: docs/guide.md: no such file",
        "README.md:4: docs/design.md#the-patches: no heading #the-patches in design.md",
    ]
