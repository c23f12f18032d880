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
