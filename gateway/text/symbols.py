"""Emoji, connector symbols and leftover markup characters.

Emoji are recognised by the `emoji` package (Unicode's emoji list, kept up to date):
dropped, or replaced by their CLDR names in the voice's language where the package has
them (`😀` -> "grinning face"). `&` becomes the locale's "and" (CLDR list pattern). A `/`
between two words is not read: `and/or` is "and or", `TCP/IP` "TCP IP" (English: `he/she` "he or
she", `w/o` "without", `n/a` "not applicable"); a path of more parts (`src/main/app`) is left as
written.
`C#`, `F#` are "C sharp", "F sharp" (in English every note from `A#` to `G#`), `C++` "C plus plus"
(the language's "+" word, as a phone number's).
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
_INITIALS_AND = re.compile(r"\b(?P<a>[A-Z]{1,3})&(?P<b>[A-Z]{1,3})\b")
_EN_COMPARISONS = {"<=": "less than or equal to", ">=": "greater than or equal to", "!=": "not equal to",
                   "==": "equals", "≤": "less than or equal to", "≥": "greater than or equal to", "≠": "not equal to",
                   "<": "less than", ">": "greater than"}
_COMPARISON = re.compile(r"\s*(?P<op><=|>=|!=|==|[≤≥≠])\s*|(?<=\s)(?P<op2>[<>])(?=\s)")
# "$5/mo", "10 req/s": a rate, per a unit of time or of something counted (English; after the number passes).
# Abbreviations only: after a whole word the slash may be a choice ("max/min", "night/day", "group/user").
_EN_PER = {"mo": "month", "yr": "year", "hr": "hour", "wk": "week", "s": "second", "sec": "second",
           "GB": "gigabyte", "MB": "megabyte", "TB": "terabyte"}
_PER = re.compile(rf"(?<=[\w)])\s?/\s?(?P<u>{'|'.join(_EN_PER)})\b(?!/)")
# "$5/month": after an amount the number passes read ("five dollars /month") a whole word of time or of a head is
# a rate too; they leave a space before the slash, which "night/day", a choice, has not.
_PER_WORD = re.compile(r"(?<=\w)\s+/\s?(?P<u>second|minute|hour|day|night|week|month|year|person|user|seat)\b(?!/)")
_WORD_SLASH = re.compile(r"(?<![\w/.@-])([^\W\d_]+)/([^\W\d_]+)(?![\w/@-]|\.\w)")
_PRONOUNS = frozenset({"he", "she", "him", "her", "his", "hers", "they", "them"})
# Slashed English abbreviations, read as their words.
_EN_SLASHED = {"w/o": "without", "n/a": "not applicable", "s/he": "she or he"}
# "+" where it is not "plus": a phone number's `+`, `C++`.
PLUS_WORDS = {"es": "más", "it": "più", "pt": "mais", "ru": "плюс", "uk": "плюс"}
# A note or a language named by a letter and a sharp (`C#`, `F#`; in English `A#` to `G#`), and `C++`;
# a version may follow (`C++20`, `C#7`).
_SHARP_LETTERS = {"en": "ABCDEFG"}
_NAMES = re.compile(r"(?<![\w#+])(?:(?P<letter>[A-G])[#♯]|C(?P<plus>\+\+))(?![^\W\d]|[#+♯])")


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


def plus_word(lang: str) -> str:
    """The word for "+" in `lang` ("más", "più"; "plus" where no other is known)."""
    return PLUS_WORDS.get(language.base(lang), "plus")


def names(text: str, lang: str) -> str:
    """`C#` -> "C sharp", `C++` -> "C plus plus" (see above); `#` is otherwise markup, `+` left to the voice."""
    if "#" not in text and "+" not in text and "♯" not in text:
        return text
    letters = _SHARP_LETTERS.get(language.base(lang), "CF")
    plus = plus_word(lang)

    def name(m: re.Match[str]) -> str:
        if m["plus"]:
            return f"C {plus} {plus} "
        if m["letter"] not in letters:
            return m.group(0)
        return f"{m['letter']} sharp "

    return _NAMES.sub(name, text)


def connectors(text: str, lang: str) -> str:
    """`&` -> the locale's "and" (`AT&T`, `R&D`: the letters spelled, "A T and T"); `and/or` -> "and or"
    (`/` between two words, see above); in English the comparisons `<=` `>=` `!=` `==` `≤` `≥` `≠`, and
    `<` `>` with a space on each side, as words ("x less than ten"), and a rate's slash (`$5/mo`, `10 req/s`)
    as "per"."""
    if "&" in text:
        text = _INITIALS_AND.sub(lambda m: f"{' '.join(m['a'])} {and_word(lang)} {' '.join(m['b'])}", text)
        text = _AMPERSAND.sub(f" {and_word(lang)} ", text)
    if language.base(lang) == "en" and "/" in text:
        text = _PER.sub(lambda m: f" per {_EN_PER[m['u']]}", text)
        text = _PER_WORD.sub(lambda m: f" per {m['u']}", text)
    if language.base(lang) == "en" and any(ch in text for ch in "<>=!≤≥≠"):
        text = _COMPARISON.sub(lambda m: f" {_EN_COMPARISONS[m['op'] or m['op2']]} ", text)
    if "/" in text:
        english = language.base(lang) == "en"

        def slash(m: re.Match[str]) -> str:
            if english:
                if m.group(0).lower() in _EN_SLASHED:
                    return _EN_SLASHED[m.group(0).lower()]
                if m.group(1).lower() in _PRONOUNS and m.group(2).lower() in _PRONOUNS:
                    return f"{m.group(1)} or {m.group(2)}"
            return f"{m.group(1)} {m.group(2)}"

        text = _WORD_SLASH.sub(slash, text)
    return text


def strip_markup(text: str) -> str:
    """Markup characters and pictographs out; a `_` or `-` between words reads as a space."""
    text = _MARKUP.sub(" ", text)
    return "".join(" " if unicodedata.category(ch) in ("So", "Sk") else ch for ch in text)
