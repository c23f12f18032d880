"""Numbers, dates, times, phone numbers, ordinals and decades, as words.

The words come from libraries, per language: num2words (cardinals, ordinals, years) and
babel's CLDR data (month names and the order of a long date, the locale's decimal and group
marks), through `number_words`. What is written here is only *recognising* the notations,
with patterns, in this order (each pass turns its matches into words, so later passes never
see them): phone numbers (`555-123-4567`, `(555) 123-4567`, `+1 555 123 4567`), dates (ISO
`2024-03-15`, `3/15/2024`), times (`10:30`, `7 pm`), then the amounts of `quantities`
(ratios, currency, percentages, durations, fractions, units, `100k`), decades (`1990s`,
`'80s`), seconds (`45s`), ordinals (`1st`, `2e`, `3º`), ranges (`10-20`; `1939-1945`, `1990-95` as
years), resolutions (`1080p`: "ten eighty p"), years, version numbers (`1.2.3`, `v2.0.1`: "one
point two point three"; `2.10` after "version", "release", "update" or `v`: "two point ten"), then
every other number (`-5`: "minus five"; a decimal's zeros as written: `2.0` "two point zero"). In English,
numbers joined by commas that do not group thousands are a list: `1,2,3` "one, two, three" (`10,000` is one number).

Phone numbers are read digit by digit, a comma between groups ("five five five, one two
three, four five six seven"; `+` is "plus"): three groups of 3-3-4 digits (with `-`, `.` or a
space, the first maybe in parentheses, maybe after `1-`), an international number (`+`,
then groups of 1-4 digits, 8 to 15 digits in all), or (English) `555-1234` right after a
word that asks for a phone number ("call", "phone", "tel", "dial", "fax", "text", "mobile",
"cell", "number"; `call 555-1234`, `Tel.: 555-1234`, `call me at 555-1234`), or (English) any
other `555-1234` (first digit 2-9) but a round range (the right side a multiple of 50 and the
larger: "from 500-1000 people"). In English a service number after such a word (`call 911`, `text
988`: the N11 numbers, 988, 999, 112) and a number after `zip (code)`, `postcode`, `PIN`,
`passcode`, `code` or `ext.` are read digit by digit too ("zip code nine zero two one zero").

Roman numerals (English): see `ROMAN`.

Decades (English): `1990s` (or `1990's`) "nineteen nineties", `1900s` "nineteen hundreds",
`'80s` "eighties"; `80s` (20s to 90s) too, and `100s`, `1000s` "hundreds", "thousands", except
after a word that makes them seconds ("every 30s", "after 30s"). `10s` needs its apostrophe
(`'10s`). A number right before `s` that is not a decade is seconds (`quantities.seconds`):
"every 30s" "every thirty seconds", `45s` "forty-five seconds".
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Callable

from babel.dates import get_date_format, get_month_names, parse_pattern

from gateway.text import language, quantities, symbols
from gateway.text.links import words as link_words
from gateway.text.number_words import (
    DECADE_YEARS, SIGN, YEAR_LANGUAGES, cardinal, decimal_word, digits, english_plural, number_pattern, ordinal,
    parse_number, scale_word, signed, year,
)

ORDINAL_SUFFIXES = {"en": r"st|nd|rd|th", "fr": r"er|re|e|ème|eme", "es": r"º|ª|\.º|\.ª", "it": r"º|ª",
                    "pt": r"º|ª|\.º|\.ª"}
ORDINAL_DAY_LANGUAGES = frozenset({"en", "de"})  # "March fifteenth", "15. März" = "fünfzehnter"
# Words after which `555-1234` is a phone number, not a range (English).
PHONE_CUES = r"call|phone|telephone|tel|dial|fax|text|mobile|cell|number"
# Short numbers read digit by digit after a phone cue ("call nine one one"), and words after which a
# number is a code read digit by digit (English).
SERVICE_NUMBERS = r"[2-9]11|988|999|112"
# Roman numerals of 2-39 (I, V and X only: "DC", "CD", "MD" are mostly not numbers) after a capitalised
# word; after a ruler's or pope's name an ordinal ("Louis the fourteenth"), else a cardinal ("World War
# two", "Part four") (English).
ROMAN = r"(?=[IVX]{2,})X{0,3}(?:IX|IV|V?I{0,3})"
REGNAL_NAMES = frozenset(
    "Louis Henry Elizabeth George Edward Charles William James Richard John Paul Pius Benedict Gregory Leo "
    "Innocent Clement Philip Frederick Napoleon Peter Catherine Mary Victoria Alexander Nicholas Ivan "
    "Constantine Ramesses Ptolemy Alfonso Ferdinand Francis Urban Boniface Sixtus Stephen Harold Malcolm "
    "David Robert Otto Rudolf Wilhelm Karl Gustav Christian Frederik Olaf Haakon Carl Juan Felipe".split())
# Words before which `2.10` is a version, "two point ten" (English; `v2.10` too).
VERSION_CUES = r"version|ver\.|release|update"
# The most digits a number is read as a number with: num2words reads a decimal through a float, whose
# words go wrong past 15 digits (and past 30 a whole number's); a longer one is read digit by digit.
MAX_NUMBER_DIGITS = 15
YEARS = r"1[1-9]\d\d|20\d\d"  # what a four-digit number in a range ("1939-1945") is read as a year
DIGIT_CUES = r"zip(?: code)?|postcode|postal code|pin|passcode|code|ext\.?|extension"
# Words after which a bare `30s` is seconds, not a decade (English; `quantities.seconds` reads it).
SECONDS_CUES = frozenset({"every", "after", "within", "wait", "for", "in", "timeout", "interval", "takes", "took"})


# German: after these words the day's ordinal is dative or accusative, "am fünfzehnten März" (weak
# declension, -n); num2words gives the nominative after an article, "der fünfzehnte".
_DE_OBLIQUE = re.compile(r"(?:^|\s)(?:am|vom|zum|beim|im|dem|den|ab|bis|seit|für|über)\s*$", re.IGNORECASE)


def date_words(date: datetime.date | tuple[int, int, int], lang: str, before: str = "") -> str:
    """A date (or a (year, month, day) whose month lacks the day, `2024-02-30`) as the locale's long
    form says it: "March fifteenth, twenty twenty-four"; `before`: the text ahead of it (German
    inflects the day after "am", "vom", "bis", ...)."""
    date_year, month, day = (date.year, date.month, date.day) if isinstance(date, datetime.date) else date
    loc = language.locale(lang)
    template = str(parse_pattern(str(get_date_format("long", locale=loc).pattern)).format)  # "%(d)s. %(MMMM)s %(y)s"
    base = language.base(lang)
    fields: dict[str, str] = {}
    for name in re.findall(r"%\((\w+)\)s", template):
        if name.startswith("d"):
            fields[name] = ordinal(day, lang) if base in ORDINAL_DAY_LANGUAGES or (
                base == "fr" and day == 1) else cardinal(day, lang)
        elif name in ("M", "MM", "L", "LL"):
            fields[name] = cardinal(month, lang)
        elif name.startswith(("M", "L")):
            fields[name] = str(get_month_names("wide", locale=loc)[month])
        elif name.startswith(("y", "u")):
            fields[name] = year(date_year, lang)
        else:
            fields[name] = ""
    if base == "de" and _DE_OBLIQUE.search(before[-12:]):
        fields = {k: v + "n" if k.startswith("d") and v.endswith("e") else v for k, v in fields.items()}
    text = template % fields
    if base == "de":
        text = text.replace(". ", " ", 1)  # "15. März": the ordinal's period is in the word now
    return text


def _time_words(hour: int, minute: int, meridiem: str, lang: str) -> str:
    if language.base(lang) != "en":
        return cardinal(hour, lang) + (f" {cardinal(minute, lang)}" if minute else "")
    if hour == 0 and not meridiem:  # "00:30": "twelve thirty AM"
        hour, meridiem = 12, "AM"
    hours = cardinal(hour, lang)
    if minute == 0:  # "15:00" on the 24-hour clock: "fifteen hundred"
        spoken = hours if meridiem else f"{hours} hundred" if hour > 12 else f"{hours} o'clock"
    elif minute < 10:
        spoken = f"{hours} oh {cardinal(minute, lang)}"
    else:
        spoken = f"{hours} {cardinal(minute, lang)}"
    return f"{spoken} {meridiem}" if meridiem else spoken


def long_number_words(text: str, mark: str, lang: str) -> str:
    """A number of more than `MAX_NUMBER_DIGITS` digits (`mark`: the locale's decimal mark): its digits
    one by one, but a decimal's whole part as its number where that is short enough, and its mark as
    num2words' word ("three point one four one five nine two six five three five ...")."""
    whole, _, fraction = text.partition(mark)
    point = decimal_word(lang)
    if not fraction or point is None:
        return digits(text, lang)
    figures = re.sub(r"\D", "", whole)
    said = cardinal(int(figures), lang) if len(figures) <= MAX_NUMBER_DIGITS else digits(figures, lang)
    return f"{said} {point} {digits(fraction, lang)}"


def is_date(month: int, day: int) -> bool:
    """Whether a month and day can be read as a date: 1-12 and 1-31, also where the month has fewer
    days (`2024-02-30` is read "February thirtieth", as a reader would, not checked)."""
    return 1 <= month <= 12 and 1 <= day <= 31


def phone_words(text: str, lang: str) -> str:
    """`+1 (555) 123-4567` -> "plus one, five five five, one two three, four five six seven"."""
    groups = [digits(group, lang) for group in re.findall(r"\d+", text)]
    plus = symbols.plus_word(lang)
    return (f"{plus} " if text.lstrip().startswith("+") else "") + ", ".join(groups)


_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10}


@lru_cache(maxsize=64)
def _passes(lang: str) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    num, group, mark = number_pattern(lang)
    base = language.base(lang)
    us_dates = language.region_code(lang) in ("en", "en_US")

    def number(text: str) -> Decimal:
        return parse_number(text, lang)

    def phone(m: re.Match[str]) -> str:
        count = sum(ch.isdigit() for ch in m["n"])
        if m["n"].startswith("+") and not 8 <= count <= 15:  # E.164: at most 15 digits
            return m.group(0)
        return f"{m['cue'] or ''} {phone_words(m['n'], lang)} "

    def a_date(y: int, month: int, day: int, m: re.Match[str]) -> str:
        return f" {date_words((y, month, day), lang, m.string[:m.start()])} "

    def no_date(*parts: str) -> str:  # "13/13/2024": its numbers, a pause between them, the year a year's
        return " " + ", ".join(year(int(p), lang) if len(p) == 4 else cardinal(int(p), lang) for p in parts) + " "

    def iso_date(m: re.Match[str]) -> str:  # "2024-02-30" too: a day its month lacks is read as written
        if is_date(int(m["mo"]), int(m["d"])):
            return a_date(int(m["y"]), int(m["mo"]), int(m["d"]), m)
        return no_date(m["y"], m["mo"], m["d"])

    def dotted_date(m: re.Match[str]) -> str:  # "15.03.2024"; "1.13.2024" is left to the version pass
        return a_date(int(m["y"]), int(m["mo"]), int(m["d"]), m) if is_date(int(m["mo"]), int(m["d"])) else m.group(0)

    def slash_date(m: re.Match[str]) -> str:
        a, b, y = int(m["a"]), int(m["b"]), int(m["y"])
        for month, day in ((a, b), (b, a)) if us_dates else ((b, a), (a, b)):  # "13/12/2024": day first only
            if is_date(month, day):
                return a_date(y, month, day, m)
        return no_date(m["a"], m["b"], m["y"])

    def clock(m: re.Match[str]) -> str:
        meridiem = f"{m['ap'].upper()}M" if m["ap"] else ""
        return f' {_time_words(int(m["h"]), int(m["mi"] or 0), meridiem, lang)} '

    def decade(m: re.Match[str]) -> str:
        value = int(m["y"].replace(",", ""))
        if value <= 1000 and not m["q"]:
            before = m.string[max(0, m.start() - 16):m.start()].split()
            if value < 20 or (before and before[-1].lower() in SECONDS_CUES):
                return m.group(0)  # "10s", "every 30s", "took 100s": seconds (the next pass)
        if value in (100, 1000):
            return f" {english_plural(scale_word(len(str(value)) - 1))} "  # "100s of" "hundreds of"
        return f" {english_plural(year(value, lang) if value >= 100 else cardinal(value, lang))} "

    def ordinal_number(m: re.Match[str]) -> str:
        return f' {ordinal(int(m["n"].replace(",", "")), lang)} '

    def number_range(m: re.Match[str]) -> str:
        a, b = m["a"], m["b"]
        if re.fullmatch(YEARS, a) and (re.fullmatch(YEARS, b) and int(b) > int(a)
                                        or len(b) == 2 and int(b) > int(a) % 100):
            return f" {year(int(a), lang)} to {year(int(b), lang)} "  # "1939-1945", "1990-95"
        return f" {cardinal(number(a), lang)} to {cardinal(number(b), lang)} "

    def local_phone(m: re.Match[str]) -> str:  # "555-1234", unless a round range ("500-1000")
        a, b = int(m["a"]), int(m["b"])
        return number_range(m) if b % 50 == 0 and b > a else f" {phone_words(m.group(0), lang)} "

    def cued_digits(m: re.Match[str]) -> str:
        return f"{m['cue']}{digits(m['n'], lang)}"

    def a_year(m: re.Match[str]) -> str:
        return f' {year(int(m["y"]), lang)} '

    def version(m: re.Match[str]) -> str:
        if group == "." and not m["cue"] and m.string[m.start() - 1:m.start()] not in ("v", "V") \
                and re.fullmatch(r"\d{1,3}(?:\.\d{3})+", m["n"]):
            return m.group(0)  # "1.234.567" where "." groups thousands (de, es, ...): a number, read below
        dot = "point" if base == "en" else link_words(lang)[0]
        said = f" {dot} ".join(cardinal(int(part), lang) for part in m["n"].split("."))
        return f"{m['cue'] or ''} {said} "

    def resolution(m: re.Match[str]) -> str:
        return f" {year(int(m['n']), lang)} {m['s']} "

    def hashed(m: re.Match[str]) -> str:
        return f" number {cardinal(int(m['n']), lang)} "

    def plain_words(text: str, sign: str | None) -> str:
        if text.isdigit() and (len(text) >= 10 or (len(text) > 1 and text[0] == "0")) and not sign:
            return digits(text, lang)  # a plain run of digits (an id, a phone or a code): digit by digit
        if sum(ch.isdigit() for ch in text) > MAX_NUMBER_DIGITS:
            return signed(long_number_words(text, mark, lang), sign, lang)
        try:
            value = number(text)
        except InvalidOperation:
            return text
        return signed(cardinal(value, lang), sign, lang)

    def plain(m: re.Match[str]) -> str:
        return f' {plain_words(m["n"], m["sign"])} '

    def number_list(m: re.Match[str]) -> str:  # "1,2,3": numbers listed, unless the commas group thousands
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+", m["n"]):
            return m["n"]  # one number ("10,000"): the plain pass reads it
        return " " + ", ".join(plain_words(part, None) for part in m["n"].split(",")) + " "

    end = r"(?![\w-]|[.,]\d)"
    passes: list[tuple[str, Callable[[re.Match[str]], str]]] = [
        (r"(?<![\w+])(?P<cue>)(?P<n>\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){1,4}[ .-]?\d{2,4})" + end, phone),
        (r"(?<![\w+.-])(?P<cue>)(?P<n>(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4})" + end, phone),
    ]
    if base == "en":
        passes.append((rf"(?P<cue>(?i:\b(?:{PHONE_CUES})\b(?:[^\w\n]{{1,3}}|\s(?:me|us)\s(?:at|on)\s)))"
                       rf"(?P<n>\d{{3}}[-.]\d{{4}})" + end, phone))
        passes.append((r"(?<![\w.,+-])(?P<a>[2-9]\d{2})-(?P<b>\d{4})" + end, local_phone))
        after = r"(?![\w:/-]|[.,]\d)"
        passes.append((rf"(?P<cue>(?i:\b(?:{PHONE_CUES})\b[^\w\n]{{1,3}}))(?P<n>{SERVICE_NUMBERS})" + after, cued_digits))
        passes.append((rf"(?P<cue>(?i:\b(?:{DIGIT_CUES})(?:\s?(?:is|:|#|no\.?))?\s?))(?P<n>\d{{3,10}})" + after,
                       cued_digits))
    if base == "en":  # "9am-5pm", "9:00-17:00": "to" between two times (the range pass below reads only numbers)
        passes.append((rf"(?<![\w.,:-])(?P<a>{_TIME})\s?[-–]\s?(?P<b>{_TIME})(?![\w:])", _time_range))
    passes += [
        (r"(?<![\d-])(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})(?![\d-])", iso_date),
        (r"(?<![\d/])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4})(?![\d/])", slash_date),
        (r"(?<![\d.])(?P<d>\d{1,2})\.(?P<mo>\d{1,2})\.(?P<y>\d{4})(?![\d]|\.\d)", dotted_date),
        (r"(?<![\d:.])(?P<h>[01]?\d|2[0-3]):(?P<mi>[0-5]\d)(?::[0-5]\d)?(?![\d:]|[.,]\d)"
         r"(?:\s?(?P<ap>[AaPp])\.?\s?[Mm]\b(?:\.(?=\s[a-z]|[,;:]))?)?", clock),
        (r"(?<![\d:.])(?P<h>1[0-2]|0?[1-9])(?P<mi>)\s?(?P<ap>[AaPp])\.?\s?[Mm]\b(?:\.(?=\s[a-z]|[,;:]))?", clock),
    ]
    if base == "en":  # "March 5, 2024": a month's name before a day is a date, "March fifth"
        months = "|".join(get_month_names("wide", locale="en").values())
        passes.append((rf"\b(?P<m>{months}) (?P<d>[1-9]|[12]\d|3[01])(?![\w:%°/–-]|[.,]\d|\s?%)",
                       lambda m: f"{m['m']} {ordinal(int(m['d']), lang)}"))
    passes += quantities.passes(lang)
    if base == "en":
        passes.append((r"(?:(?<![\w.,$€£¥/:'’‘-])|(?<=[^\W\d_]-))(?P<q>['’‘])?"
                       rf"(?P<y>{DECADE_YEARS}|[1-9]0|1,?000|100)(?:s['’]?|['’]s)(?!\w)", decade))
    passes.append(quantities.seconds(lang))
    if base in ORDINAL_SUFFIXES:
        grouped = r"\d{1,3}(?:,\d{3})+|" if base == "en" else ""  # "1,234,567th" (English groups by commas)
        passes.append((rf"(?<![\w.])(?<!\d,)(?P<n>{grouped}\d+)(?:{ORDINAL_SUFFIXES[base]})(?!\w)", ordinal_number))
    if base == "en":
        passes.append((r"(?<![\w.,-])(?P<a>\d+)\s?[-–]\s?(?P<b>\d+)(?![\d-]|[.,]\d)", number_range))
        passes.append((r"#(?P<n>\d+)\b", hashed))
        passes.append((r"(?<![\w.,$€£¥/:-])(?P<n>\d+(?:,\d+)+)(?!\w|[.,]\d)", number_list))
    if base == "en":
        passes.append((r"(?<![\w.])(?P<n>480|576|720|1080|1440|2160|4320)(?P<s>[pi])(?!\w)", resolution))
    if base in YEAR_LANGUAGES:
        passes.append((r"(?<![\w.,:/-])(?P<y>1[1-9]\d\d|20\d\d)(?![\w:/%°-]|[.,]\d|\s?%)", a_year))
    passes.append((r"(?:(?<![\w.])|(?<=(?<![\w.])[vV]))(?P<cue>)(?P<n>\d+(?:\.\d+){2,})(?!\w|\.\d)", version))
    passes.append((rf"(?P<cue>\b(?i:{VERSION_CUES})\s?|(?<![\w.])[vV])(?P<n>\d+\.\d+)(?!\w|\.\d)", version))
    if base == "en":  # "2^32": "two to the power of thirty-two"; ".5" (a decimal without its zero): "point five"
        passes.append((r"(?<![\w.])(?P<a>\d+)\^(?P<b>\d+)(?![\w.]|,\d)",
                       lambda m: f" {cardinal(int(m['a']), lang)} to the power of {cardinal(int(m['b']), lang)} "))
        passes.append((r"(?<![\w.,$€£¥/\\])\.(?P<d>\d+)(?![\w.]|,\d)", lambda m: f" point {digits(m['d'], lang)} "))
    passes.append((rf"{SIGN}(?<![\d.,])(?P<n>{num})(?!\d)", plain))
    return [(re.compile(pattern), _or_as_written(replace)) for pattern, replace in passes]


_TIME = r"(?:[01]?\d|2[0-3])(?::[0-5]\d)?(?:\s?[AaPp]\.?\s?[Mm]\b\.?)?"  # "9", "9:30", "9am", "5 p.m."


def _time_range(m: re.Match[str]) -> str:
    """Two times joined by a dash, "to" between them (each read by the clock pass after), where
    one of them is a time: a colon, or am/pm (a trial: "9am-5pm" was "nine AM - five PM")."""
    a, b = m["a"], m["b"]
    if not re.search(r"[:AaPp]", a + b):
        return m.group(0)  # "5-10": the number range's
    return f"{a} to {b}"


def _or_as_written(replace: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
    """`replace`, or the match unchanged where a library has no words for it.

    num2words raises NotImplementedError, OverflowError, ValueError (and others, per
    language) for values or currencies a language lacks; such a notation is left for a
    later pass, or for the voice's own phonemiser, rather than failing the request.
    """

    def safe(match: re.Match[str]) -> str:
        try:
            out = replace(match)
        except Exception:  # noqa: BLE001 - see above: any library failure means "no words here"
            return match.group(0)
        after = match.string[match.end():match.end() + 2]
        if len(after) == 2 and after[0] == "-" and after[1].isalpha():  # "a 3-day trip": "three-day", not
            return out.rstrip()  # "three -day" (found by a doc check)
        return out

    return safe


_ROMAN = re.compile(rf"\b(?P<name>[A-Z][a-z]+) (?P<r>{ROMAN})(?![\w'’-])")


def _roman(m: re.Match[str]) -> str:
    numeral = m["r"]
    value = sum(_ROMAN_VALUES[ch] * (-1 if _ROMAN_VALUES[ch] < _ROMAN_VALUES.get(after, 0) else 1)
                for ch, after in zip(numeral, numeral[1:] + " "))
    if m["name"] in REGNAL_NAMES:
        return f"{m['name']} the {ordinal(value, 'en')}"
    return f"{m['name']} {cardinal(value, 'en')}"


def expand(text: str, lang: str) -> str:
    """Every number-like notation in `text` as words of `lang` (and `km/h`, `m/s` without a number)."""
    if language.base(lang) == "en" and ("I" in text or "V" in text or "X" in text):
        text = _ROMAN.sub(_roman, text)
    if any(ch.isdigit() for ch in text):
        for pattern, replace in _passes(lang):
            text = pattern.sub(replace, text)
    return quantities.slash_units(text, lang)
