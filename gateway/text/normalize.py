"""One piece of text as a reader would speak it: the passes, in order.

markdown and SSML (`markup`) -> emoji (`symbols`) -> URLs and e-mail addresses (`links`)
-> `C#`, `C++` (`symbols`) -> English abbreviations (`abbreviations`) -> numbers, currency, dates, times, units (`numerals`, `quantities`)
-> `&` and `/` between words -> leftover markup characters -> spacing. Each pass works on what the one before left,
so a URL's digits are read as part of the URL, and a table cell's number as a number.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from gateway.text import abbreviations, links, markup, numerals, symbols
from gateway.text.options import TextOptions
from gateway.text.segments import clean, is_speakable

_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:…%)\]}。！？，；：、])")
# "print( one)": a number pass's words come with spaces around them, the one after a bracket kept.
# Only a bracket that closes later: an emoticon's ("sad :-( really") keeps the space to the next word.
_AFTER_OPEN = re.compile(r"([(\[{])\s+(?=[^(){}\[\]]*[)\]}])")
_REPEATED = re.compile(r"([.,;:!?])(?:\s*[.,;:])+")
_PAUSE_SPLIT = re.compile(f"([{chr(markup.PAUSE_BASE)}-{chr(markup.PAUSE_BASE + markup.MAX_PAUSES - 1)}])")


@dataclass(frozen=True, slots=True)
class Pause:
    """Silence to insert between segments, in milliseconds (an SSML `<break>`)."""

    ms: float


Item = str | Pause  # a segment of speakable text, or a pause


def join_pauses(first_ms: float, second_ms: float) -> float:
    """Two pauses with nothing spoken between them, as one: their sum, at most one `<break>`'s
    longest (`markup.MAX_PAUSE_MS`). Without the bound a run of breaks was silence without end:
    300 `<break time="10s"/>` in a row (6 KB of text) made one 227 MB frame of silence at 48 kHz."""
    return min(first_ms + second_ms, markup.MAX_PAUSE_MS)


def add_item(items: list[Item], item: Item) -> None:
    """Append `item` to `items`, a pause right after a pause joined to it (`join_pauses`)."""
    if isinstance(item, Pause) and items and isinstance(items[-1], Pause):
        items[-1] = Pause(join_pauses(items[-1].ms, item.ms))
    else:
        items.append(item)


def tidy(text: str) -> str:
    """One space between words, none before punctuation or after an opening bracket, no doubled
    punctuation."""
    text = re.sub(r"\s+", " ", text)
    text = _AFTER_OPEN.sub(r"\1", text)
    text = re.sub(r"(?<=\w)-\s+(?=\w)", " ", text)  # "COVID- nineteen" after a number pass
    text = _BEFORE_PUNCT.sub(r"\1", text)
    text = _REPEATED.sub(r"\1", text)
    text = re.sub(r"^[\s.,;:]+", "", text)
    return text.strip()


def spoken_text(raw: str, options: TextOptions, pauses: list[float]) -> str:
    """`raw` (markdown, SSML, notation) as words; pause marks index into `pauses`."""
    lang = options.language
    text = markup.mark_pauses(markup.spell(raw), pauses)
    text = markup.to_text(text, options)
    text = unicodedata.normalize("NFC", text)
    text = symbols.emoji(text, options.emoji, lang)
    text = links.expand(text, lang)
    text = symbols.names(text, lang)
    text = abbreviations.expand(text, lang)
    text = numerals.expand(text, lang)
    text = symbols.connectors(text, lang)
    text = symbols.strip_markup(text)
    return tidy(text)


def normalize_text(raw: str, options: TextOptions) -> list[Item]:
    """Speakable pieces of `raw` with the pauses between them, in order.

    With `options.normalize` False the text is only cleaned (`segments.clean`).
    """
    if not options.normalize:
        text = clean(raw)
        return [text] if is_speakable(text) else []
    pauses: list[float] = []
    text = spoken_text(raw, options, pauses)
    items: list[Item] = []
    for part in _PAUSE_SPLIT.split(text):
        if len(part) == 1 and markup.PAUSE_BASE <= ord(part) < markup.PAUSE_BASE + markup.MAX_PAUSES:
            add_item(items, Pause(pauses[ord(part) - markup.PAUSE_BASE]))
        else:
            part = tidy(part)
            if is_speakable(part):
                items.append(part)
    return items
