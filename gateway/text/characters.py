"""The characters a text stream (gateway/text/stream.py) cuts at or around: sentence and clause
marks (Latin and CJK), closers that stay with the sentence they end, openers that start the next
one; and a piece's clean-up before it is read."""

from __future__ import annotations

import unicodedata

CLOSERS = "\"')]}*_»”’」』）"
SENTENCE_PUNCT = ".!?…"
CJK_PUNCT = "。！？"
CLAUSE_PUNCT = ",;:"
CJK_CLAUSE = "，；：、"
OPENERS = "\"'“‘([«¿¡"


def clean_piece(piece: str) -> str:
    """Control, format and private-use characters out; other spaces made plain ones."""
    out = []
    for ch in piece:
        if ch == "\n":
            out.append(ch)
        elif ch.isspace():
            out.append(" ")
        elif unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn"):
            out.append(ch)
    return "".join(out)


def is_thai(ch: str) -> bool:
    return "\u0e00" <= ch <= "\u0e7f"
