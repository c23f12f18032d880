"""Importing a long text into passages: plain text or Markdown, previewed before it is applied.

Blocks first: Markdown is parsed with markdown-it-py (CommonMark), and each heading,
paragraph, list item, table cell row and block quote paragraph becomes a block of its
inline text (emphasis, links and inline code keep their words; images, raw HTML and
code blocks are not narrated). Plain text splits into blocks at blank lines. Then each
block is normalised and, when longer than `max_chars`, cut into passages of whole
sentences by the text frontend (gateway/text `split_segments`), packed greedily up to
`max_chars`. A heading stays a passage of its own, so it can get its own pause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from markdown_it import MarkdownIt
from markdown_it.token import Token

from engine.types import InvalidInput
from gateway.text import clean, is_speakable, split_segments

MAX_PASSAGE_CHARS = 600  # a passage is a paragraph-sized take: long enough to flow, short to redo
IMPORT_FORMATS = ("text", "markdown")
_BLANK_LINES = re.compile(r"\n\s*\n")
_BLOCK_OPEN = {"heading_open": "heading", "paragraph_open": "paragraph", "tr_open": "table"}


@dataclass(frozen=True, slots=True)
class Block:
    kind: str  # heading | paragraph | table | text
    text: str


def markdown_blocks(source: str) -> list[Block]:
    """Narratable blocks of a Markdown document, in order."""
    tokens = MarkdownIt("commonmark").enable("table").parse(source)
    blocks: list[Block] = []
    kind: str | None = None
    cells: list[str] = []
    for token in tokens:
        if token.type in _BLOCK_OPEN and kind is None:
            kind, cells = _BLOCK_OPEN[token.type], []
        elif token.type == "inline" and kind is not None:
            cells.append(_inline_text(token))
        elif kind is not None and token.type == _closing(kind):
            text = ", ".join(c for c in cells if c.strip()) if kind == "table" else " ".join(cells)
            blocks.append(Block(kind, text))
            kind = None
    return blocks


def _closing(kind: str) -> str:
    return {"heading": "heading_close", "paragraph": "paragraph_close", "table": "tr_close"}[kind]


def _inline_text(token: Token) -> str:
    words: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            words.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            words.append(" ")
    return "".join(words)


def text_blocks(source: str) -> list[Block]:
    return [Block("text", part) for part in _BLANK_LINES.split(source)]


def _pack(sentences: list[str], max_chars: int) -> list[str]:
    passages: list[str] = []
    for sentence in sentences:
        if passages and len(passages[-1]) + 1 + len(sentence) <= max_chars:
            passages[-1] = f"{passages[-1]} {sentence}"
        else:
            passages.append(sentence)
    return passages


def split_passages(source: str, fmt: str, max_chars: int = MAX_PASSAGE_CHARS,
                   speaks: Callable[[str], bool] = is_speakable) -> list[dict[str, str]]:
    """[{"text", "kind"}] for `source`, without the blocks `speaks` finds nothing to say in
    (the projects API passes the text frontend's `says_something`, as speech would read them);
    InvalidInput (field `format`) for an unknown format."""
    if fmt not in IMPORT_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(IMPORT_FORMATS)}; got {fmt!r}", field="format")
    blocks = markdown_blocks(source) if fmt == "markdown" else text_blocks(source)
    out: list[dict[str, str]] = []
    for block in blocks:
        cleaned = clean(block.text)
        if not cleaned or not speaks(cleaned):
            continue
        pieces = [cleaned] if len(cleaned) <= max_chars else _pack(split_segments(cleaned), max_chars)
        out.extend({"text": piece, "kind": block.kind} for piece in pieces)
    return out
