"""The docs agree with the repository: a relative Markdown link of README.md or docs/*.md names a
file that exists (and its `#anchor` a heading of it), README lists every model option, and no doc,
source file or result note cites design notes kept outside the repository."""

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


# Design and style notes kept outside the repository: a citation of one sends a reader nowhere.
# (Spelt in two pieces so that this file does not cite them itself.)
OUTSIDE = [name + ".md" for name in ("DESIGN", "STYLE")]
SOURCES = sorted(path for top in ("gateway", "engine", "models", "bench", "tests", "scripts", "webui")
                 for path in (ROOT / top).rglob("*.py")) + sorted(ROOT.glob("*.py"))
RESULTS = sorted((ROOT / "bench" / "results").glob("*.md"))


@pytest.mark.parametrize("kind", ["docs", "sources", "results"])
def test_nothing_cites_the_notes_outside_the_repository(kind: str) -> None:
    """README.md and docs/*.md, the .py files (docstrings, comments) and bench/results/*.md."""
    files = {"docs": DOCS, "sources": SOURCES, "results": RESULTS}[kind]
    assert files
    cited = [f"{path.relative_to(ROOT)}:{n}" for path in files
             for n, line in enumerate(path.read_text().splitlines(), 1) if any(name in line for name in OUTSIDE)]
    assert not cited


@pytest.mark.parametrize("family", ["orpheus", "qwen3_tts", "piper"])
def test_every_model_option_is_in_the_readme(family: str) -> None:
    """README's **Model options** names every option a family takes (`codec_dtype` was missing)."""
    import importlib

    options = importlib.import_module(f"models.{family}").OPTIONS
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**Model options**"):text.index("## Benchmarks")]
    assert not [name for name in options if f"`{name}`" not in section]
