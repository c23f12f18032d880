"""Markdown and a small SSML subset -> the words a person would read, with pause marks.

Markdown is parsed by markdown-it-py (CommonMark plus GFM tables and strikethrough) and
rendered to its text: emphasis markers, heading hashes, list bullets and quote markers
go, links become their text, images their alt text, tables their cells (a row is read
as one sentence, cells separated by commas), headings and list items end as sentences.
Code spans and fenced blocks are read or skipped by `TextOptions.code`. Other HTML tags
are dropped, their text kept.

SSML (W3C SSML 1.1 §3.1.1 `<speak>`, §3.2.3 `<break>`, §3.1.9 `<say-as>` that spells, and
Cartesia's `<spell>`: `spell`): `<speak>` wrappers are dropped;
`<break time="500ms"/>` (ms or s) or `<break strength="weak"/>` becomes a pause mark, a
private-use character whose pause lasts `pauses[i]` ms. Input text never holds
private-use characters (`clean` drops them), so a mark cannot be forged.
"""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from engine.types import InvalidInput
from gateway.text.options import TextOptions

PAUSE_BASE = 0xE000  # pause i is chr(PAUSE_BASE + i)
MAX_PAUSES = 0x1000
# At the end of a piece of text cut inside a line (gateway/text/stream.py): its heading or list item
# goes on in the next piece, so no full stop ends it here (a private-use character; `to_text` drops it).
CONTINUES = "\uf8ff"
MAX_PAUSE_MS = 10_000.0  # the longest break one tag may ask for (as common TTS services cap it)
# SSML leaves strength durations to the processor; these follow common TTS services.
STRENGTH_MS = {"none": 0.0, "x-weak": 100.0, "weak": 250.0, "medium": 400.0, "strong": 750.0,
               "x-strong": 1250.0}
SENTENCE_END = ".!?…:;。！？；：।"

_SSML_TAG = re.compile(r"<\s*(/?)\s*(speak|break)\b([^<>]*)>", re.IGNORECASE)
_TIME = re.compile(r"""\btime\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s)\s*$", re.IGNORECASE)
_STRENGTH = re.compile(r"""\bstrength\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_HTML_TAG = re.compile(r"<[^<>]*>")
# Text read character by character: Cartesia's `<spell>` and SSML 1.1 §3.1.9 `<say-as>` with an
# `interpret-as` that spells (the W3C "Say-as" note's `characters`; `spell-out` and `verbatim` as
# common TTS services name it).
_SPELL = re.compile(r"<\s*spell\s*>(?P<a>[^<>]*)<\s*/\s*spell\s*>"
                    r"""|<\s*say-as\b[^<>]*\binterpret-as\s*=\s*["'](?:characters|spell-out|verbatim)["'][^<>]*>"""
                    r"(?P<b>[^<>]*)<\s*/\s*say-as\s*>", re.IGNORECASE)


def spell(text: str) -> str:
    """`<spell>AB12</spell>` (and SSML's `<say-as interpret-as="characters">`) -> "A B 1 2": each
    letter or digit on its own (letters as capitals, so a voice says their names; the number pass
    then reads each digit), other characters dropped."""
    if "<" not in text:
        return text
    return _SPELL.sub(lambda m: " " + " ".join(ch.upper() for ch in (m["a"] or m["b"] or "") if ch.isalnum()) + " ",
                      text)


def break_ms(attributes: str) -> float:
    """Milliseconds of a `<break ...>` tag's attributes; ValueError says what is wrong."""
    time_attr = _TIME.search(attributes)
    if time_attr:
        match = _DURATION.match(time_attr.group(1))
        if not match:
            raise ValueError(f'<break time="{time_attr.group(1)}"> is not a duration like "500ms" or "1.5s"')
        value = float(match.group(1)) * (1.0 if match.group(2).lower() == "ms" else 1000.0)
        if value > MAX_PAUSE_MS:
            raise ValueError(f'<break time="{time_attr.group(1)}"> is longer than {MAX_PAUSE_MS / 1000:g}s')
        return value
    strength = _STRENGTH.search(attributes)
    if strength:
        name = strength.group(1).strip().lower()
        if name not in STRENGTH_MS:
            raise ValueError(f'<break strength="{name}"> must be one of {", ".join(STRENGTH_MS)}')
        return STRENGTH_MS[name]
    return STRENGTH_MS["medium"]


def check_ssml(text: str, field: str = "input") -> None:
    """Raise InvalidInput (naming `field`) for a `<break>` tag that cannot be read."""
    for match in _SSML_TAG.finditer(text):
        if match.group(2).lower() == "break":
            try:
                break_ms(match.group(3))
            except ValueError as error:
                raise InvalidInput(str(error), field=field) from None


def mark_pauses(text: str, pauses: list[float]) -> str:
    """SSML tags -> pause marks (durations appended to `pauses`); bad breaks are medium."""

    def replace(match: re.Match[str]) -> str:
        if match.group(2).lower() == "speak" or match.group(1):
            return " "
        try:
            ms = break_ms(match.group(3))
        except ValueError:
            ms = STRENGTH_MS["medium"]  # check_ssml refused it before it got here
        if len(pauses) >= MAX_PAUSES:
            return " "
        pauses.append(ms)
        return f" {chr(PAUSE_BASE + len(pauses) - 1)} "

    return _SSML_TAG.sub(replace, text)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def end_sentence(parts: list[str]) -> None:
    """Make what `parts` holds so far end as a sentence (a period unless punctuated)."""
    text = "".join(parts).rstrip()
    if text.endswith(CONTINUES):
        parts[-1] = parts[-1].rstrip().removesuffix(CONTINUES)
    elif text and text[-1] not in SENTENCE_END and not 0xE000 <= ord(text[-1]) < 0xF000:
        parts.append(".")
    parts.append(" ")


def _inline(token: Token, options: TextOptions, parts: list[str]) -> None:
    for child in token.children or []:
        if child.type == "text":
            parts.append(child.content)
        elif child.type == "code_inline":
            if options.code != "skip":
                parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)  # the alt text
        elif child.type == "html_inline":
            parts.append(" ")


def _code(content: str, options: TextOptions, parts: list[str]) -> None:
    if options.code != "speak":
        end_sentence(parts)
        return
    end_sentence(parts)
    for line in content.splitlines():
        if line.strip():
            parts.append(line.strip())
            end_sentence(parts)


def to_text(markdown: str, options: TextOptions) -> str:
    """The spoken text of a markdown fragment (pause marks pass through as text)."""
    parts: list[str] = []
    cells = 0  # cells read so far in the current table row
    for token in _parser().parse(markdown):
        kind = token.type
        if kind == "inline":
            if cells > 1:
                parts.append(", ")
            _inline(token, options, parts)
        elif kind in ("th_open", "td_open"):
            cells += 1
        elif kind == "tr_open":
            cells = 0
        elif kind == "tr_close":
            cells = 0
            end_sentence(parts)
        elif kind in ("heading_close", "list_item_close", "hr"):
            end_sentence(parts)
        elif kind == "paragraph_close":
            parts.append(" ")
        elif kind in ("fence", "code_block"):
            _code(token.content, options, parts)
        elif kind == "html_block":
            parts.append(_HTML_TAG.sub(" ", token.content))
            parts.append(" ")
    return "".join(parts).replace(CONTINUES, "")
