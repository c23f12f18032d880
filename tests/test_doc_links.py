"""The docs' links to files of the repository (README.md and docs/*.md) lead somewhere: a
relative Markdown link names a file that exists, and its `#anchor` a heading of that file."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # fenced blocks and code spans: examples, not links
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors: a heading in lower case, punctuation dropped, spaces as '-'."""
    headings = re.findall(r"^#+ (.*)$", CODE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for link in LINK.findall(CODE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto: not checked here
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no such heading")
    assert not broken, f"{doc.name}: {broken}"


def test_no_doc_names_design_md() -> None:
    """DESIGN.md is not part of the repository: a doc that sends readers there leads nowhere."""
    assert not [doc.name for doc in DOCS if "DESIGN.md" in doc.read_text()]
