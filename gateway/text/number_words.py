"""A number's words in the voice's language, and the locale's way of writing a number.

The words come from num2words (cardinals, ordinals, years) and the notation from babel's
CLDR data (the group and decimal marks). `numerals` and `quantities` recognise notations
and call these for the words.
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache

from babel.numbers import get_decimal_symbol, get_group_symbol
from num2words import CONVERTER_CLASSES, num2words

from gateway.text import language

YEAR_LANGUAGES = frozenset({"en", "de", "nl"})  # num2words reads a year differently from a count
DECADE_YEARS = r"1[1-9]\d0|20\d0"  # a year that names a decade with an `s` after it: `1990s`
# A minus sign before a number (`-5`, `−5`, `-$20`, `-5°C`): at the start or after a space or an
# opening bracket, so the `-` of `5-10` or `COVID-19` is not one.
SIGN = r"(?P<sign>(?<![^\s(\[])[-−])?"


def ungrouped(words: str) -> str:
    """num2words' English words without the commas it puts between a number's groups ("one
    million, two hundred thousand"): a number is read without a pause in it, and a streamed
    utterance's first clause must not end inside one (gateway/text/stream.py cuts at commas)."""
    return words.replace(",", "")


def _words(value: Decimal | int | float, lang: str, to: str = "cardinal") -> str:
    """num2words' words for `value` in `lang` (`to`: cardinal, ordinal, year), `ungrouped`."""
    return ungrouped(str(num2words(value, lang=language.number_language(lang), to=to)))


def cardinal(value: Decimal | int, lang: str) -> str:
    """`Decimal("2.5")` -> "two point five" (num2words, in `lang`; `ungrouped`). A decimal's zeros
    are read as written: `Decimal("2.0")` "two point zero", `Decimal("3.50")` "three point five zero"
    (num2words drops them, which loses "2.0" against "2" and "2.10" against "2.1")."""
    words = _words(value, lang)
    exponent = value.as_tuple().exponent if isinstance(value, Decimal) and value.is_finite() else 0
    if not isinstance(value, Decimal) or not isinstance(exponent, int) or exponent >= 0:
        return words
    if value != value.to_integral_value() and drops_decimals(lang):
        words = _words(float(value), lang)
    fraction = format(value, "f").partition(".")[2]
    zeros = len(fraction) - len(fraction.rstrip("0"))
    point = decimal_word(lang)
    if not zeros or point is None or (not fraction.strip("0") and point in words.split()):
        return words
    said = [point] if not fraction.strip("0") else []
    return " ".join([words, *said, *[_words(0, lang)] * zeros])


@lru_cache(maxsize=64)
def drops_decimals(lang: str) -> bool:
    """Whether num2words reads a `Decimal`'s fraction as nothing in `lang` (its Italian and Welsh:
    `Decimal("1.5")` "uno"), where a float's words are right; asked once a language."""
    return _words(Decimal("1.5"), lang) == _words(1, lang)


@lru_cache(maxsize=64)
def decimal_word(lang: str) -> str | None:
    """The word num2words says for the decimal mark in `lang` ("point", "Komma", "virgule"), or None
    where it does not read a decimal's digits one by one between spaces (Russian "twenty-five
    hundredths", Japanese without spaces): there a written zero is not added."""
    one, digits, both = _words(1, lang), f" {_words(2, lang)} {_words(5, lang)}", _words(1.25, lang)
    if both.startswith(one + " ") and both.endswith(digits):
        return both[len(one):len(both) - len(digits)].strip() or None
    return None


@lru_cache(maxsize=64)
def minus_word(lang: str) -> str | None:
    """The word num2words puts before a negative number in `lang` ("minus", "moins"), or None
    where it has none."""
    try:
        negative, one = cardinal(-1, lang), cardinal(1, lang)
    except Exception:  # noqa: BLE001 - num2words raises several kinds for what a language lacks
        negative = one = ""  # (Polish, Czech: no negative cardinals, but a word for the sign)
    word = negative.removesuffix(one).strip() if negative.endswith(one) else ""
    if not word:
        word = str(getattr(CONVERTER_CLASSES.get(language.number_language(lang)), "negword", "")).strip()
    return word if word.isalpha() else None


def signed(words: str, sign: str | None, lang: str) -> str:
    """`words` of an amount with the minus `sign` written before it ("minus five degrees Celsius");
    the sign as written where num2words has no word for it."""
    if not sign:
        return words
    minus = minus_word(lang)
    return f"{minus} {words}" if minus else f"{sign}{words}"


def ordinal(value: int, lang: str) -> str:
    """`3` -> "third"; the cardinal where num2words has no ordinals for `lang`."""
    try:
        return _words(value, lang, "ordinal")
    except NotImplementedError:
        return cardinal(value, lang)


def year(value: int, lang: str) -> str:
    """`1999` -> "nineteen ninety-nine" where `lang` reads years so, else the cardinal."""
    if language.base(lang) in YEAR_LANGUAGES:
        return _words(value, lang, "year")
    return cardinal(value, lang)


def digits(text: str, lang: str) -> str:
    """Each digit of `text` as its word, other characters left out: `"5-1"` -> "five one"."""
    return " ".join(cardinal(int(ch), lang) for ch in text if ch.isdigit())


def english_plural(words: str) -> str:
    """The plural of an English number phrase's last word: "nineteen ninety" -> "nineteen nineties",
    "third" -> "thirds", "hundred" -> "hundreds" (number words only: regular plurals)."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + "s"


def scale_word(exponent: int) -> str:
    """The English word of 10**exponent's scale: 3 -> "thousand", 6 -> "million" (num2words)."""
    return str(num2words(10 ** exponent, lang="en")).split()[-1]


def scaled(amount: Decimal, exponent: int, lang: str) -> str:
    """`amount` times 10**exponent: English says "two point five million" (as written),
    other languages the whole number's words ("zwei Millionen fünfhunderttausend")."""
    if language.base(lang) == "en":
        return f"{cardinal(amount, lang)} {scale_word(exponent)}"
    value = amount * (Decimal(10) ** exponent)  # "2.5" x 10**6 is 2500000.0: said as the whole number it is
    return cardinal(int(value) if value == value.to_integral_value() else value, lang)


@lru_cache(maxsize=64)
def number_pattern(lang: str) -> tuple[str, str, str]:
    """(regex of one number, its group mark, its decimal mark) in the locale's notation."""
    loc = language.locale(lang)
    group, decimal = get_group_symbol(loc), get_decimal_symbol(loc)
    group = " " if group.isspace() else group  # clean() made every space an ASCII one
    g, d = re.escape(group), re.escape(decimal)
    return rf"\d{{1,3}}(?:{g}\d{{3}})+(?:{d}\d+)?|\d+(?:{d}\d+)?", group, decimal


@lru_cache(maxsize=64)
def _other_notation(lang: str) -> tuple[str, str, str]:
    """(regex, group mark, decimal mark) of an amount with cents in the other common notation
    than the locale's: `3.50`, `1,000.50` where the decimal mark is a comma; `3,50`, `1.000,50`
    where it is a point. One or two decimals: three would be the locale's own group."""
    _, _, decimal = number_pattern(lang)
    other, group = (",", ".") if decimal == "." else (".", ",")
    o, g = re.escape(other), re.escape(group)
    return rf"(?:\d{{1,3}}(?:{g}\d{{3}})+|\d+){o}\d{{1,2}}(?!\d)", group, other


def money_pattern(lang: str) -> str:
    """Regex of an amount of money: the locale's notation, or the other one with cents
    (`$3.50` in a German text, `3,50 €` in an English one); `parse_money` reads either."""
    return f"{_other_notation(lang)[0]}|{number_pattern(lang)[0]}"


def parse_money(text: str, lang: str) -> Decimal:
    """An amount that `money_pattern` matched -> its Decimal."""
    pattern, group, decimal = _other_notation(lang)
    if re.fullmatch(pattern, text):
        return Decimal(text.replace(group, "").replace(decimal, "."))
    return parse_number(text, lang)


def parse_number(text: str, lang: str) -> Decimal:
    """`"1,234.5"` (in the locale's marks) -> `Decimal("1234.5")`; InvalidOperation if not a number."""
    _, group, decimal = number_pattern(lang)
    return Decimal(text.replace(group, "").replace(decimal, "."))
