"""Emoji, connector symbols and leftover markup characters.

Emoji are recognised by the `emoji` package (Unicode's emoji list, kept up to date):
dropped, or replaced by their CLDR names in the voice's language where the package has
them (`😀` -> "grinning face"). `&` becomes the locale's "and" (CLDR list pattern).
Characters that only ever mark up text (`*`, `_`, `` ` ``, `#`, `|`, `~`, `\\`, `<`, `>`)
and other pictographic symbols (Unicode categories So and Sk, e.g. `→`, `©`) are not
read: a reader does not say "asterisk".
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import emoji as emoji_data

from gateway.text import language

_MARKUP = re.compile(r"[*_`#|~\\<>^]+")
_AMPERSAND = re.compile(r"\s*&\s*")


def has_emoji(text: str) -> bool:
    return bool(emoji_data.emoji_count(text))


def emoji(text: str, mode: str, lang: str) -> str:
    """`mode` "drop" removes emoji; "name" reads their names."""
    if not emoji_data.emoji_count(text):
        return text
    if mode == "name":
        named = emoji_data.demojize(text, delimiters=(" \u2063", "\u2063 "), language=language.emoji_language(lang))
        return re.sub(r"\u2063(.*?)\u2063", lambda m: m.group(1).replace("_", " ").strip(":"), named)
    return str(emoji_data.replace_emoji(text, replace=" "))


@lru_cache(maxsize=64)
def and_word(lang: str) -> str:
    """"and" in `lang`, from the CLDR list pattern `{0} and {1}`."""
    patterns = language.locale(lang).list_patterns
    try:
        end = str(patterns["standard"]["end"])
    except (KeyError, TypeError):
        return "and"
    word = end.replace("{0}", "").replace("{1}", "").strip(" ,")
    return word or "and"


def connectors(text: str, lang: str) -> str:
    if "&" in text:
        text = _AMPERSAND.sub(f" {and_word(lang)} ", text)
    return text


def strip_markup(text: str) -> str:
    """Markup characters and pictographs out; a `_` or `-` between words reads as a space."""
    text = _MARKUP.sub(" ", text)
    return "".join(" " if unicodedata.category(ch) in ("So", "Sk") else ch for ch in text)
