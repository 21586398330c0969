"""The README and the manual in docs/ hold together: every relative link resolves (the file, and the
heading an #anchor names), and every code path they cite in backticks (`memoryapp/items/services.py`,
`governance/`, `tests/kit/`) exists, so a moved module or a renamed heading fails here, not in a
reader's hands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.kit import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path of the project's own tree cited in backticks; placeholders (`memoryapp/<name>/`) and globs are not paths.
CODE_PATH = re.compile(r"`((?:memoryapp|governance|memory_project|tests|bench|clients|docs|templates|static)/[^`\s]*)`")
GENERATED = ("bench/out/",)  # written by the benchmarks and the browser tests, not committed


def anchors_of(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered -1, -2, ... (code blocks are not headings)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (heading := re.match(r"#{1,6} (.+)", line)):
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower().replace("`", "")).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_the_readme_is_short_and_the_manual_has_a_page_per_area() -> None:
    assert len((PROJECT_ROOT / "README.md").read_text().splitlines()) <= 250
    pages = {page.name for page in PAGES[1:]}
    for name in ("README.md", "api.md", "agents-and-mcp.md", "recall-and-context.md", "memory-lifecycle.md"):
        assert name in pages
    for name in ("governance.md", "security.md", "operations.md", "console.md", "benchmarks.md", "reference.md"):
        assert name in pages


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors_of(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


def missing_paths(page: Path, root: Path = PROJECT_ROOT) -> list[str]:
    return [
        path
        for path in CODE_PATH.findall(page.read_text())
        if not re.search(r"[<>*{}]", path) and not path.startswith(GENERATED) and not (root / path.rstrip("/")).exists()
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(PROJECT_ROOT).as_posix())
def test_every_relative_link_resolves_to_a_file_and_a_heading(page: Path) -> None:
    assert not broken_links(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(PROJECT_ROOT).as_posix())
def test_every_code_path_cited_exists(page: Path) -> None:
    assert not missing_paths(page)


def test_the_checks_see_a_broken_link_a_missing_heading_and_a_missing_path(tmp_path: Path) -> None:
    """The checks above can fail: a page of this test's own with one of each is caught."""
    (tmp_path / "other.md").write_text("# Other\n\n## Same\n\n## Same\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A `code` heading, here\n\n[ok](#a-code-heading-here) [bad](#nowhere) [gone](gone.md)\n"
        "[twice](other.md#same-1) [thrice](other.md#same-2) [web](https://example.org/x)\n\n"
        "`memoryapp/nowhere.py` `memoryapp/items/services.py` `memoryapp/<name>/` `bench/out/screenshots/`\n"
    )
    assert broken_links(page) == [
        "#nowhere: no heading #nowhere in page.md",
        "gone.md: no such file",
        "other.md#same-2: no heading #same-2 in other.md",
    ]
    assert missing_paths(page) == ["memoryapp/nowhere.py"]
