"""Text frontend: normalise, reject the unspeakable, split into segments (sentences).

Sentence boundaries come from pysbd (Sadvilkar & Neumann 2020, "PySBD: Pragmatic
Sentence Boundary Disambiguation"), a maintained rule-based splitter that keeps
abbreviations ("Dr.", "a.m."), decimals ("3.50"), times and URLs intact. Segments are
the unit of streaming for families without a backbone (piper), so very long sentences
are cut further at clause punctuation, then at spaces, to bound the first chunk's wait.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import pysbd

from engine.types import InputTooLong, InvalidInput

MAX_SEGMENT_CHARS = 300
_SPACE = re.compile(r"\s+")
_CLAUSE = re.compile(r"(?<=[,;:\u2014])\s+")


@lru_cache(maxsize=1)
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False, char_span=False)


def normalize(text: str) -> str:
    """NFC, control characters dropped, any run of whitespace made one space, stripped."""
    text = unicodedata.normalize("NFC", text)
    text = "".join(
        " " if ch.isspace() else ch
        for ch in text
        if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )
    return _SPACE.sub(" ", text).strip()


def is_speakable(text: str) -> bool:
    """Whether anything in `text` can be pronounced (a letter or a digit)."""
    return any(ch.isalnum() for ch in text)


def check_input(text: object, max_chars: int, field: str = "input") -> str:
    """Normalised text, or InvalidInput / InputTooLong naming `field`."""
    if not isinstance(text, str):
        raise InvalidInput(f"{field} must be a string", field=field)
    if len(text) > max_chars:
        raise InputTooLong(f"{field} has {len(text)} characters; the limit is {max_chars}", field=field)
    clean = normalize(text)
    if not clean:
        raise InvalidInput(f"{field} is empty", field=field)
    if not is_speakable(clean):
        raise InvalidInput(f"{field} has nothing that can be spoken (no letters or digits)", field=field)
    return clean


def _cut(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    pieces: list[str] = []
    for clause in _CLAUSE.split(sentence):
        while len(clause) > max_chars:
            cut = clause.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            pieces.append(clause[:cut].strip())
            clause = clause[cut:].strip()
        if pieces and len(pieces[-1]) + 1 + len(clause) <= max_chars:
            pieces[-1] = f"{pieces[-1]} {clause}"
        elif clause:
            pieces.append(clause)
    return pieces


MIN_FIRST_CHARS = 24  # a shorter first segment plays out before the next is synthesised


def split_first(segments: list[str], max_chars: int, min_chars: int = MIN_FIRST_CHARS) -> list[str]:
    """Shape the first segment for a fast first chunk (TTFA) that still covers the next.

    Families without a backbone synthesise a whole segment before any audio exists, so
    the first one's length is the time to first audio; but a very short first segment
    ("Hello!") plays out before the next one is ready, which is a stall. So a first
    segment under `min_chars` is joined with the next, and one over `max_chars` is cut
    at the last clause punctuation before the limit, else at the last space. Later
    segments are untouched.
    """
    if not segments or max_chars <= 0:
        return segments
    if len(segments) > 1 and len(segments[0]) < min_chars:
        segments = [f"{segments[0]} {segments[1]}", *segments[2:]]
    first = segments[0]
    if len(first) <= max_chars:
        return segments
    head = first[: max_chars + 1]
    cut = max((m.end() for m in _CLAUSE.finditer(head)), default=-1)
    if cut < 12:
        cut = head.rfind(" ")
    if cut < 12:
        return segments
    return [first[:cut].strip(), first[cut:].strip(), *segments[1:]]


def split_segments(text: str, max_chars: int = MAX_SEGMENT_CHARS) -> list[str]:
    """Split normalised text into speakable segments of at most `max_chars` characters."""
    segments: list[str] = []
    for sentence in _segmenter().segment(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        if not is_speakable(sentence) and segments:
            segments[-1] = f"{segments[-1]} {sentence}"  # stray punctuation joins the previous one
            continue
        segments.extend(_cut(sentence, max_chars))
    return [s for s in segments if is_speakable(s)]


class SentenceBuffer:
    """Text that arrives in pieces (an LLM streaming), released sentence by sentence.

    `append` returns the sentences completed so far; the incomplete tail stays until
    more text completes it, `flush()` is called, or the caller's buffer delay expires.
    A sentence counts as complete when the splitter finds a boundary after it, i.e. the
    start of a next sentence has arrived — this is what keeps "Dr." from ending one.
    """

    def __init__(self) -> None:
        self._text = ""

    @property
    def pending(self) -> str:
        return self._text.strip()

    def append(self, piece: str) -> list[str]:
        self._text += piece
        parts = _segmenter().segment(self._text) if self._text.strip() else []
        if len(parts) < 2:
            return []
        complete, self._text = "".join(parts[:-1]), parts[-1]
        return split_segments(normalize(complete)) if is_speakable(complete) else []

    def hold(self, segments: list[str]) -> None:
        """Put released sentences back in front, to be released with what follows."""
        self._text = " ".join(segments) + " " + self._text

    def flush(self) -> list[str]:
        text, self._text = normalize(self._text), ""
        return split_segments(text) if is_speakable(text) else []
