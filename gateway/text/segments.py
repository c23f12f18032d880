"""Sentences of plain (already normalised) text, per language, for streaming synthesis.

Sentence boundaries come from pysbd (Sadvilkar & Neumann 2020, "PySBD: Pragmatic
Sentence Boundary Disambiguation"), a maintained rule-based splitter with rules for 23
languages that keeps abbreviations ("Dr.", "a.m."), decimals and times intact; its rules
end sentences at CJK full stops (`。！？`) in every language, so mixed-script text splits
at both. Thai writes no sentence punctuation: a space between two Thai characters ends
a sentence, and so do `ฯ`, `๚` and `๛`. Segments are the unit of streaming for families
without a backbone (piper), so very long sentences are cut further at clause
punctuation, then at spaces, to bound the first chunk's wait.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from typing import Sequence

import pysbd

from engine.types import InputTooLong, InvalidInput
from gateway.text import language, symbols
from gateway.text.options import TextOptions

MAX_SEGMENT_CHARS = 300
_SPACE = re.compile(r"[^\S\n]+")
_CLAUSE = re.compile(r"(?<=[,;:\u2014\uff0c\uff1b\uff1a\u3001])\s*")
_THAI = re.compile(r"(?<=[\u0e00-\u0e7f])(?:\s+|(?<=[\u0e2f\u0e5a\u0e5b]))(?=[\u0e00-\u0e7f])")
_DROPPED = ("Cc", "Cf", "Cs", "Co", "Cn")


class _Segmenters(threading.local):
    by_language: dict[str, pysbd.Segmenter]

    def __init__(self) -> None:
        self.by_language = {}


_SEGMENTERS = _Segmenters()


def segmenter(lang: str = "en") -> pysbd.Segmenter:
    """The pysbd segmenter for `lang` (English for the languages pysbd lacks), one per thread:
    `Segmenter.segment` keeps the text it works on in the object, so two threads sharing one
    (concurrent requests' prepare threads) read each other's text."""
    cache = _SEGMENTERS.by_language
    if lang not in cache:
        cache[lang] = pysbd.Segmenter(language=language.sentence_language(lang), clean=False, char_span=False)
    return cache[lang]


def clean(text: str, keep_lines: bool = False) -> str:
    """NFC, control/format/private-use characters dropped, whitespace runs made one space
    (newlines kept with `keep_lines`, where markdown needs them), stripped."""
    text = unicodedata.normalize("NFC", text).replace("\r", "")
    out = []
    for ch in text:
        if ch == "\n" and keep_lines:
            out.append(ch)
        elif ch.isspace():
            out.append(" ")
        elif unicodedata.category(ch) not in _DROPPED:
            out.append(ch)
    text = "".join(out)
    if keep_lines:
        return "\n".join(_SPACE.sub(" ", line).rstrip() for line in text.split("\n")).strip("\n")
    return re.sub(r"\s+", " ", text).strip()


def is_speakable(text: str) -> bool:
    """Whether anything in `text` can be pronounced (a letter or a digit)."""
    return any(ch.isalnum() for ch in text)


def check_input(text: object, max_chars: int, field: str = "input", *, speakable: bool = True) -> str:
    """Cleaned text (`clean`), or InvalidInput / InputTooLong naming `field`.

    `speakable`: also refuse text without a letter or digit. A route that reads the text
    with text options passes False and calls `check_spoken` on what they make of it
    (with `emoji: "name"`, an emoji alone is words)."""
    if not isinstance(text, str):
        raise InvalidInput(f"{field} must be a string", field=field)
    if len(text) > max_chars:
        raise InputTooLong(f"{field} has {len(text)} characters; the limit is {max_chars}", field=field)
    cleaned = clean(text)
    if not text.strip():
        raise InvalidInput(f"{field} is empty", field=field)
    if speakable and not is_speakable(cleaned):
        raise InvalidInput(f"{field} has nothing that can be spoken (no letters or digits)", field=field)
    return cleaned


def check_spoken(items: Sequence[object], text: str, options: TextOptions, field: str = "input",
                 emoji_field: str = "emoji") -> None:
    """InvalidInput naming `field` if `items`, what `options` made of `text`, say nothing."""
    if not any(isinstance(item, str) for item in items):
        letters = is_speakable(clean(text))
        raise unspoken(field, options, letters=letters, emoji=not letters and symbols.has_emoji(text),
                       emoji_field=emoji_field)


def unspoken(field: str, options: TextOptions, *, letters: bool, emoji: bool,
             emoji_field: str = "emoji") -> InvalidInput:
    """The error for text that says nothing once read with `options`; `letters`, `emoji`:
    whether the text had a letter or digit, an emoji; `emoji_field`: what sets the emoji
    option where the text came from."""
    if letters:
        return InvalidInput(f"{field} has nothing to speak once markup, code and emoji are left out", field=field)
    dropped = emoji and options.normalize and options.emoji == "drop"
    hint = f'; emoji are dropped unless {emoji_field} is "name"' if dropped else ""
    return InvalidInput(f"{field} has nothing that can be spoken (no letters or digits{hint})", field=field)


def cut(sentence: str, max_chars: int) -> list[str]:
    """`sentence` in pieces of at most `max_chars`: at clause punctuation, then at spaces."""
    if len(sentence) <= max_chars:
        return [sentence]
    pieces: list[str] = []
    for clause in _CLAUSE.split(sentence):
        while len(clause) > max_chars:
            at = clause.rfind(" ", 0, max_chars)
            at = at if at > 0 else max_chars
            pieces.append(clause[:at].strip())
            clause = clause[at:].strip()
        if pieces and len(pieces[-1]) + 1 + len(clause) <= max_chars:
            pieces[-1] = f"{pieces[-1]} {clause}"
        elif clause:
            pieces.append(clause)
    return pieces


def sentences(text: str, lang: str = "en") -> list[str]:
    """Sentences of `text` in `lang` (pysbd, then Thai boundaries)."""
    found: list[str] = []
    for sentence in segmenter(lang).segment(text):
        found.extend(part for part in _THAI.split(sentence) if part.strip())
    return [s.strip() for s in found if s.strip()]


def split_segments(text: str, lang: str = "en", max_chars: int = MAX_SEGMENT_CHARS) -> list[str]:
    """Split plain text into speakable segments of at most `max_chars` characters."""
    segments: list[str] = []
    for sentence in sentences(text, lang):
        if not is_speakable(sentence):
            if segments:
                segments[-1] = f"{segments[-1]} {sentence}"  # stray punctuation joins the previous one
            continue
        segments.extend(cut(sentence, max_chars))
    return [s for s in segments if is_speakable(s)]
