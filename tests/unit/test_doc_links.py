"""The README and docs/ hold together: every relative markdown link in README.md and docs/**/*.md names a
file of the checkout (and, with a #fragment into a markdown file, one of its headings), and the README's
first two commands are the Quick start that CI runs (`.ci/run`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where a bracket is not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", prose(path.read_text()), re.M)}


def links(path: Path) -> list[str]:
    return [
        t for t in LINK.findall(prose(path.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)
    ]  # https:, mailto: ... are not files of the checkout


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(doc):
    broken = []
    for target in links(doc):
        file, _, fragment = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or REPO_ROOT not in (path, *path.parents):
            broken.append(target)
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO_ROOT)}: links that do not resolve: {broken}"


def test_the_checks_see_links_and_headings():
    """The checks above are not vacuous: the README links into docs/, and a heading gives its anchor."""
    assert any(t.startswith("docs/") for t in links(REPO_ROOT / "README.md"))
    assert slug("Launch profiles, parsed by the engine at build") == "launch-profiles-parsed-by-the-engine-at-build"
    assert slug("The fuzz test's profiles") == "the-fuzz-tests-profiles"
    assert slug("Serve-ready images: `invoke warm`") == "serve-ready-images-invoke-warm"


def test_the_readme_starts_with_the_quick_start_commands():
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", (REPO_ROOT / "README.md").read_text(), re.S | re.M)
    assert [b.strip() for b in blocks[:2]] == [
        "bash scripts/setup.sh && .venv/bin/invoke main",
        "bash scripts/setup.sh && .venv/bin/python scripts/run_tests.py",
    ]
    assert "bash scripts/setup.sh && .venv/bin/python scripts/run_tests.py" in (REPO_ROOT / ".ci" / "run").read_text()


def test_the_docs_index_names_every_page():
    index = REPO_ROOT / "docs" / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in links(index)}
    pages = [p for p in (REPO_ROOT / "docs").rglob("*") if p.suffix in (".md", ".log") and p != index]
    assert pages and not [str(p.relative_to(REPO_ROOT)) for p in pages if p.resolve() not in linked]
