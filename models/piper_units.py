"""Piper's synthesis units: a text segment (a sentence) cut at its clauses, so that no unit
holds a worker of the pool for long (models/piper.py `make_spec`)."""

from __future__ import annotations

import re

MAX_UNIT_CHARS = 200  # longest text one synthesis holds a worker for (~0.7 s at RTF 0.05)
# A unit ends at every clause punctuation it holds, so that no unit holds a worker for long: a
# first chunk that arrives while every session is busy waits for the shortest of them to end.
# Measured on the 2-core machine (bench/piper_units.py, bench/results/piper_units.json): clause
# units cost 4 % more synthesis than whole sentences. A clause shorter than MIN_CLAUSE_CHARS
# joins the next one (a call per two-word clause would cost more than it saves).
MIN_CLAUSE_CHARS = 16
_CLAUSE_END = re.compile(r"(?<=[,;:\u2014])\s+")
# espeak-ng, piper's phonemizer, runs inside the server's process and overflows its fixed word
# buffers (N_WORD_PHONEMES) on some long words, killing the whole server with a SIGSEGV: letters
# each with a dot ("a.b.c.", which it spells, and joins across spaces: 98 ASCII letters or 50
# accented ones crashed it), a word of letters and marks ("'s" 90 times: its suffix loop,
# espeak-ng PR 2495), a word of 300 letters ("ness" 75 times). `espeak_safe` keeps every unit
# well short of those.
MAX_DOTTED_LETTERS = 16  # a longer run of dotted letters is spoken as separate letters ("a. b. c.")
MAX_MARKED_WORD = 32  # a longer word with letters and marks is cut into pieces this long
MAX_WORD = 64  # and any other word longer than this (no word of a dictionary is)
_DOTTED_RUN = re.compile(rf"(?:(?<![^\W\d_])[^\W\d_]\.\s*){{{MAX_DOTTED_LETTERS + 1},}}")
_LONG_WORD = re.compile(rf"\S{{{MAX_MARKED_WORD + 1},}}")
_MARKED = re.compile(r"[^\w\s]|_")


def espeak_safe(text: str) -> str:
    """`text` with what would overflow espeak-ng's buffers rewritten: a run of more than
    MAX_DOTTED_LETTERS letters each followed by a dot as separate letters ("a. b. c. "), a word
    over MAX_MARKED_WORD characters that has letters and marks cut into pieces of at most that,
    each after its last mark where it has one, and any other word over MAX_WORD cut into pieces
    of MAX_WORD. Text without any of these comes back unchanged."""

    def letters(run: re.Match[str]) -> str:
        spaced = " ".join(f"{letter}." for letter in re.findall(r"[^\W\d_](?=\.)", run.group()))
        return spaced + (" " if run.group()[-1].isspace() else "")

    def cut(word: re.Match[str]) -> str:
        rest, pieces = word.group(), []
        marked = bool(_MARKED.search(rest) and re.search(r"[^\W\d_]", rest))
        longest = MAX_MARKED_WORD if marked else MAX_WORD
        while len(rest) > longest:
            marks = [m.end() for m in _MARKED.finditer(rest[:longest])] if marked else []
            end = marks[-1] if marks and marks[-1] > longest // 2 else longest
            pieces.append(rest[:end])
            rest = rest[end:]
        return " ".join(pieces + [rest] if rest else pieces)

    return _LONG_WORD.sub(cut, _DOTTED_RUN.sub(letters, text))


def split_unit(text: str, max_chars: int = MAX_UNIT_CHARS, min_chars: int = MIN_CLAUSE_CHARS) -> list[str]:
    """`text` (one sentence) as synthesis units: cut after each clause punctuation (`,` `;`
    `:` em dash followed by a space), a clause under `min_chars` joined to the next (the last
    one to the one before), and a clause over `max_chars` cut between words (a single longer
    word stays whole). Joining the units with single spaces gives back `text` with its runs
    of whitespace at the cuts collapsed."""
    units: list[str] = []
    for clause in (piece for piece in _CLAUSE_END.split(text.strip()) if piece):
        if units and len(units[-1]) < min_chars:
            clause = f"{units.pop()} {clause}"
        if len(clause) <= max_chars:
            units.append(clause)
            continue
        words = clause.split()
        units.append(words[0])
        for word in words[1:]:
            if len(units[-1]) + 1 + len(word) <= max_chars:
                units[-1] = f"{units[-1]} {word}"
            else:
                units.append(word)
    if len(units) > 1 and len(units[-1]) < min_chars and len(units[-2]) + 1 + len(units[-1]) <= max_chars:
        units[-2:] = [f"{units[-2]} {units[-1]}"]
    return units or [text]
