"""Text that arrives in pieces (an LLM streaming), released as speakable segments.

`TextStream` reads its input once, character by character, and cuts it into *units*
where cutting cannot change how the text is read: between sentences (pysbd decides, on
a window of at most `WINDOW_CHARS` before the boundary and the next character after it),
at line breaks that start a new markdown block, after a closed code fence or table, and
only where no code span, link, or tag is open and the next unit starts with a letter (so
it cannot turn into a list item or heading on its own). Each unit is normalised on its own
(`normalize.normalize_text`) and split into sentences. Because every decision depends only
on the characters seen so far, never on where one append ended, text given whole and the
same text given in any pieces are read the same; `prepare` is exactly "append all, flush".

The first unit of an utterance is cut early, for a fast first audio: at a clause mark
(`,` `;` `:`) or a sentence end once it has `min_first_chars`, else at the last space
before `first_chars`. Later units run by sentences, with a hard cut at `MAX_UNIT_CHARS`,
unless the caller asks for one early (`release_early`, when its listener is about to run
dry): at the last clause mark read, else the last space between two words.
Cost: an append costs O(len(append)) plus, per sentence candidate, one pysbd call on a
window of bounded size, whatever the buffered length.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import pysbd

from gateway.text import language, markup
from gateway.text.characters import (
    CJK_CLAUSE, CJK_PUNCT, CLAUSE_PUNCT, CLOSERS, OPENERS, SENTENCE_PUNCT, clean_piece, is_thai,
)
from gateway.text.nesting import Nesting
from gateway.text.normalize import Item, Pause, add_item, normalize_text
from gateway.text.options import TextOptions
from gateway.text.segments import is_speakable, split_segments

WINDOW_CHARS = 160
MAX_UNIT_CHARS = 400
MIN_FIRST_CHARS = 24  # a shorter first segment plays out before the next is synthesised
MIN_CUT_CHARS = 12
WORD_SLACK = 40  # how long a length cut waits for a pending boundary's next word
MIN_EARLY_CLAUSE = 12  # an early cut at a clause mark leaves a unit of at least this (else at words)
_BLOCK_START = re.compile(r"[ \t]*(?:#{1,6}[ \t]+|[-*+][ \t]+|\d{1,9}[.)][ \t]+|>[ \t]*)")  # a heading, item, quote


@lru_cache(maxsize=32)
def _spans(lang: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language.sentence_language(lang), clean=False, char_span=True)


class TextStream:
    """Incremental normaliser and splitter; see the module docstring.

    `append(piece)` returns the items (segments and `Pause`s) completed by the piece;
    `release()` speaks what is buffered (a pause in the input), `flush()` too and starts
    a new utterance. `pending_chars` is the unreleased text's length. `append` raises
    InvalidInput (naming `field`) for an SSML break it cannot read, leaving the stream
    as it was.
    """

    def __init__(self, options: TextOptions, first_chars: int = 40,
                 min_first_chars: int = MIN_FIRST_CHARS, field: str = "input") -> None:
        self.options = options
        self.first_chars = first_chars
        self.min_first_chars = min_first_chars
        self.field = field
        self.is_first = first_chars > 0  # the next unit starts an utterance
        self._text = ""
        self._line_kind = ""  # "", "text", "table"
        self._in_fence = False
        self._at_line_start = True
        self._reset()

    def _reset(self) -> None:
        self._pos = 0
        self._nesting = Nesting()  # code spans, links and tags open at _pos
        self._newline = -1  # a newline whose cut waits for the next line's first character
        self._candidate = -1  # a boundary (index of the space after it) waiting for the next word
        self._candidate_kind = ""
        self._last_space = -1  # last balanced space between words, before the length limit
        self._clause_cut = -1  # last balanced space after a clause mark, before a word (release_early)
        self._word_cut = -1  # last balanced space between two words (release_early)

    @property
    def pending_chars(self) -> int:
        return len(self._text)

    @property
    def pending(self) -> str:
        return self._text.strip()

    # -- input --------------------------------------------------------------------------

    def check(self, piece: str) -> None:
        """Raise InvalidInput if appending `piece` would complete an unreadable SSML tag."""
        tag = self._nesting.tag
        if self.options.normalize and ("<" in piece or ">" in piece or tag >= 0):
            markup.check_ssml((self._text[tag:] if tag >= 0 else "") + piece, self.field)

    def append(self, piece: str) -> list[Item]:
        piece = clean_piece(piece)
        if not self._text and not self._at_line_start:
            piece = piece.lstrip(" ")  # after a cut inside a line: spaces there indent nothing
        self.check(piece)
        self._text += piece
        return self._scan()

    def release_early(self) -> list[Item]:
        """Speak the buffered text up to its last clause mark (one leaving `MIN_EARLY_CLAUSE`
        characters or more), else up to its last space between two words or after a clause
        mark, where no code span, link, tag, code fence or table is open; the rest waits as
        before. Nothing if there is no such place (a single word so far: it may not be complete)."""
        at = self._clause_cut if self._clause_cut >= MIN_EARLY_CLAUSE else max(self._word_cut, self._clause_cut)
        if at <= 0:
            return []
        return self._cut(at) + self._scan()

    def _scan(self) -> list[Item]:
        out: list[Item] = []
        while self._pos < len(self._text):
            cut = self._step(self._pos)
            if cut is None:
                self._pos += 1
                continue
            out.extend(self._cut(cut))
        return out

    def release_tail(self) -> list[Item]:
        """What a pause in the text releases (TextFeed's tail timer): everything, where the text ends
        whole (in a space, or in punctuation that does not follow a digit); else up to its last space
        between two words or after a clause mark, so that what the pause may have cut mid-way ("$4" of
        "$4.99", "exa" of "example.com", "bo" of "**bold**") waits for its rest. An open code fence
        waits."""
        text = self._text.rstrip(" \t")
        if len(text) < len(self._text) or not text or (unicodedata.category(text[-1])[0] == "P"
                                                        and not (len(text) > 1 and text[-2].isdigit())):
            return self.release()
        at = max(self._word_cut, self._clause_cut)
        if self._in_fence or at <= 0:
            return []
        return self._cut(at) + self._scan()

    def release(self) -> list[Item]:
        """Speak everything buffered (the caller saw a pause); an open code fence waits."""
        if self._in_fence:
            return []
        return self._cut(len(self._text), hard=True)

    def flush(self) -> list[Item]:
        """Speak everything buffered; what follows starts a new utterance."""
        out = self._cut(len(self._text), hard=True)
        self._in_fence, self._line_kind, self._at_line_start = False, "", True
        self.is_first = self.first_chars > 0
        return out

    def restart(self) -> None:
        """Drop what is buffered (a cancel); what follows starts a new utterance."""
        self._text = ""
        self._reset()
        self._in_fence, self._line_kind, self._at_line_start = False, "", True
        self.is_first = self.first_chars > 0

    # -- scanning -------------------------------------------------------------------------

    def _step(self, i: int) -> int | None:
        """Look at character i; returns where to cut, if this character decides a cut."""
        text = self._text
        ch = text[i]
        previous_kind = self._line_kind
        if self._at_line_start and ch not in " \t\n":
            self._at_line_start = False
            self._line_kind = "table" if ch == "|" else "text"
        if ch == "\n":
            line_start = text.rfind("\n", 0, i) + 1
            if text[line_start:i].lstrip().startswith(("```", "~~~")):
                self._in_fence = not self._in_fence
                if not self._in_fence:  # a fence just closed: it is one unit
                    self._at_line_start = True
                    return i + 1
            self._at_line_start = True
            if not self._in_fence:
                self._newline = i
            return self._decide_pending(i)
        if self._in_fence:
            return None
        if self._newline >= 0 and ch not in " \t":
            newline, self._newline = self._newline, -1
            # An indented line after text (a nested list item, an item's paragraph) belongs to the
            # block before it: cut from it, it would read alone as an indented code block (skipped).
            indented = text[newline + 1] in " \t" and previous_kind == "text"
            if not indented and not self._continues(previous_kind, ch):
                return newline + 1
        self._nesting.see(text, i)
        if ch.isspace():
            cut = self._decide_pending(i)
            if cut is not None:
                return cut
            self._new_candidate(i)
            if ch != "\n" and self._nesting.closed and self._line_kind != "table":
                self._note_early_cut(i, before_word=False)
        elif self._candidate >= 0:
            cut = self._decide_pending(i)
            if cut is not None:
                return cut
        elif i > 0 and (text[i - 1] in CJK_PUNCT or text[i - 1] in CJK_CLAUSE or text[i - 1] in CLOSERS) \
                and ch not in CLOSERS:
            self._new_candidate(i)
            cut = self._decide_pending(i)
            if cut is not None:
                return cut
        if ch.isalpha() and i > 1 and text[i - 1] in " \t" and self._nesting.closed:
            if text[i - 2].isalpha() and i - 1 <= (self.first_chars if self.is_first else MAX_UNIT_CHARS):
                self._last_space = i - 1  # between two words ("10:30 am", "5 km" stay whole)
            if self._line_kind != "table":
                self._note_early_cut(i - 1, before_word=True)
        return self._length_cut(i)

    def _note_early_cut(self, k: int, before_word: bool) -> None:
        """Is the space at k a place for `release_early`: after a clause mark (a clause is complete
        once a space follows it), or between two words (the second begun: the first is whole)?"""
        text, j = self._text, k
        while j > 0 and text[j - 1] in CLOSERS:
            j -= 1
        if j > 0 and (text[j - 1] in CLAUSE_PUNCT or text[j - 1] in CJK_CLAUSE or text[j - 1] in "—–"):
            self._clause_cut = k
        elif before_word and j > 0 and text[j - 1].isalpha():  # ("guide)", "**bold**", "said" too)
            self._word_cut = k

    @staticmethod
    def _continues(kind: str, ch: str) -> bool:
        """Whether a line starting with `ch` continues the block (of `kind`) before it."""
        if kind == "table":
            return ch == "|"
        return ch.isalpha()

    def _new_candidate(self, i: int) -> None:
        """A boundary may sit at i (a space, or the character after a CJK mark)."""
        if self._candidate >= 0 or self._line_kind == "table" or not self._nesting.closed:
            return
        j = i
        while j > 0 and self._text[j - 1] in CLOSERS:
            j -= 1
        mark = self._text[j - 1] if j > 0 else ""
        if not mark:
            return
        size = len(self._text[:i].strip())
        first = self.is_first
        if not self._text[i].isspace() and mark not in CJK_PUNCT and mark not in CJK_CLAUSE:
            return
        if mark in SENTENCE_PUNCT:
            kind = "sentence"
        elif mark in CJK_PUNCT:
            kind = "cjk"
        elif is_thai(mark) and self._text[i] in " \t":
            kind = "thai"
        elif first and (mark in CLAUSE_PUNCT or mark in CJK_CLAUSE):
            kind = "clause"
        else:
            return
        if first and size < self.min_first_chars:
            return
        self._candidate, self._candidate_kind = i, kind

    def _decide_pending(self, i: int) -> int | None:
        """Decide the waiting candidate if character i completes what it waits for."""
        k = self._candidate
        if k < 0 or i <= k:
            return None
        text = self._text
        j = k
        while j < len(text) and text[j] in " \t\n":
            j += 1
        if j > i:
            return None
        kind = self._candidate_kind
        start = text[j]
        after = text[j + 1] if j + 1 <= i else None  # only what has been read so far counts
        safe = start.isalpha() or start in OPENERS or (start in "*_" and after is not None and not after.isspace())
        if kind == "thai":
            self._candidate = -1
            return k if is_thai(start) else None
        if not safe:
            if start in "*_" and after is None:
                return None  # "**Next": one more character decides
            self._candidate = -1
            return None
        self._candidate = -1
        if kind in ("clause", "cjk"):
            return k
        # pysbd decides a boundary from the next word's first character as well as from the
        # whole word ("Dr. S", "U.S. A" stay whole; "that. T", "a.m. T" split). A full stop before a
        # lowercase word ends an abbreviation, not a sentence ("5 ft. 10 in. tall", "p. 45 and"), though
        # pysbd may say otherwise.
        if start.islower() and text[k - 1 if text[k - 1] not in CLOSERS else k - 2] == ".":
            return None
        return k if self._is_sentence_end(k, j, i + 1) else None

    def _is_sentence_end(self, k: int, j: int, end: int) -> bool:
        start = max(0, k - WINDOW_CHARS)
        if start:
            space = self._text.find(" ", start, k)
            start = space + 1 if space >= 0 else start
        window = self._text[start:end]
        for span in _spans(self.options.language).segment(window):
            if k - start <= span.start <= j - start:
                return True
        return False

    def _length_cut(self, i: int) -> int | None:
        limit = self.first_chars if self.is_first else MAX_UNIT_CHARS
        if i < limit or self._line_kind == "table" or (self._candidate >= 0 and i < limit + WORD_SLACK):
            return None  # (a boundary about to be decided is a better cut, if it comes soon)
        if self._last_space >= MIN_CUT_CHARS:
            return self._last_space
        if self.is_first and i < MAX_UNIT_CHARS:
            return None
        if self._last_space > 0:
            return self._last_space
        # No space: not inside a tag (`<break time="10s"/>` run on past the limit was read as words).
        return self._nesting.tag_edge if self._nesting.tag_edge > 0 else i

    # -- output ---------------------------------------------------------------------------

    def _cut(self, at: int, hard: bool = False) -> list[Item]:
        unit, self._text = self._text[:at], self._text[at:]
        block = None
        if self._text.strip(" \t") and not self._text.lstrip(" \t").startswith("\n") and not unit.endswith("\n"):
            # Cut inside a line: a heading or list item goes on in the next unit, which keeps its marker
            # (so it ends as a sentence where the line does), and this one ends without a full stop.
            block = _BLOCK_START.match(unit[unit.rfind("\n") + 1:])
            unit += markup.CONTINUES
        self._reset()
        if block is not None:
            self._text = block.group(0).lstrip() + self._text.lstrip(" \t")
        elif unit and not unit.endswith("\n"):
            self._text = self._text.lstrip(" ")  # (the rest of a line: its spaces indent nothing)
        self._at_line_start = unit.endswith("\n") or block is not None or (not unit and self._at_line_start)
        items = self._items(unit)
        if any(isinstance(item, str) for item in items):
            self.is_first = False
        return items

    def _items(self, unit: str) -> list[Item]:
        if not unit.strip():
            return []
        out: list[Item] = []
        for item in normalize_text(unit, self.options):
            if isinstance(item, Pause):
                out.append(item)
            else:
                out.extend(s for s in split_segments(item, self.options.language) if is_speakable(s))
        if self.is_first and len(out) > 1 and isinstance(out[0], str) and isinstance(out[1], str) \
                and len(out[0]) < self.min_first_chars:
            # "Hello!" alone would play out before the next segment is ready (a stall).
            out[:2] = [f"{out[0]} {out[1]}"]
        return out


def prepare(text: str, options: TextOptions, first_chars: int = 40, min_first_chars: int = MIN_FIRST_CHARS,
            field: str = "input") -> list[Item]:
    """All of `text` as speakable segments and pauses, the way a TextStream reads it.

    Raises InvalidInput (naming `field`) for an SSML break it cannot read.
    """
    stream = TextStream(options, first_chars, min_first_chars, field)
    items: list[Item] = []
    for item in stream.append(text) + stream.flush():
        add_item(items, item)  # (pauses ending one unit and opening the next: one)
    return items


def says_something(text: str, options: TextOptions, field: str = "input") -> bool:
    """Whether `prepare` leaves anything of `text` to speak (`check_spoken` refuses text that it does not)."""
    return any(isinstance(item, str) for item in prepare(text, options, 0, field=field))
