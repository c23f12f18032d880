"""Numbers, currency, dates, times, ordinals, percentages and units, as words.

The words come from libraries, per language: num2words (cardinals, ordinals, years,
currency amounts) and babel's CLDR data (unit names with their plural rules, currency
names, month names and the order of a long date, the locale's decimal and group marks).
What is written here is only *recognising* the notations, with patterns, in this order
(each pass turns its matches into words, so later passes never see them): dates
(ISO `2024-03-15`, `3/15/2024`), times (`10:30`, `7 pm`), currency (`$3.50`, `€5`, `5 EUR`,
`$2.5M`), percentages, units (`5 km`, `20°C`), ordinals (`1st`, `2e`, `3º`), ranges
(`10-20`), years, version numbers (`1.2.3`), then every other number.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Callable, Iterable

from babel.dates import get_date_format, get_month_names, parse_pattern
from babel.numbers import format_decimal, get_currency_name, get_decimal_symbol, get_group_symbol
from babel.units import format_unit
from num2words import CONVERTER_CLASSES, num2words

from gateway.text import language
from gateway.text.links import words as link_words

CURRENCY_SYMBOLS = {"US$": "USD", "A$": "AUD", "C$": "CAD", "R$": "BRL", "$": "USD", "€": "EUR", "£": "GBP",
                    "¥": "JPY", "₹": "INR", "₩": "KRW", "₽": "RUB", "₺": "TRY", "₪": "ILS", "₫": "VND", "฿": "THB",
                    "₴": "UAH", "₦": "NGN", "₱": "PHP", "zł": "PLN"}
CURRENCY_CODES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "BRL", "SEK", "NOK", "DKK",
                  "PLN", "RUB", "KRW", "MXN", "TRY", "ZAR", "NZD", "SGD", "HKD")
# Scale suffixes after an amount ("$2.5M", "€3bn", "$40k").
SCALES = {"k": 3, "K": 3, "thousand": 3, "m": 6, "M": 6, "mn": 6, "million": 6, "b": 9, "B": 9, "bn": 9,
          "billion": 9, "t": 12, "T": 12, "tn": 12, "trillion": 12}
# Notation -> CLDR unit id; babel gives the unit's name in the voice's language.
UNITS = {
    "km": "length-kilometer", "m": "length-meter", "cm": "length-centimeter", "mm": "length-millimeter",
    "µm": "length-micrometer", "nm": "length-nanometer", "mi": "length-mile", "ft": "length-foot",
    "yd": "length-yard", "kg": "mass-kilogram", "g": "mass-gram", "mg": "mass-milligram", "lb": "mass-pound",
    "lbs": "mass-pound", "oz": "mass-ounce", "l": "volume-liter", "L": "volume-liter", "ml": "volume-milliliter",
    "mL": "volume-milliliter", "°C": "temperature-celsius", "°F": "temperature-fahrenheit",
    "km/h": "speed-kilometer-per-hour", "kph": "speed-kilometer-per-hour", "mph": "speed-mile-per-hour",
    "m/s": "speed-meter-per-second", "kWh": "energy-kilowatt-hour", "W": "power-watt", "kW": "power-kilowatt",
    "MW": "power-megawatt", "GW": "power-gigawatt", "V": "electric-volt", "Hz": "frequency-hertz",
    "kHz": "frequency-kilohertz", "MHz": "frequency-megahertz", "GHz": "frequency-gigahertz",
    "KB": "digital-kilobyte", "kB": "digital-kilobyte", "MB": "digital-megabyte", "GB": "digital-gigabyte",
    "TB": "digital-terabyte", "PB": "digital-petabyte", "ms": "duration-millisecond", "sec": "duration-second",
    "secs": "duration-second", "min": "duration-minute", "mins": "duration-minute", "h": "duration-hour",
    "hr": "duration-hour", "hrs": "duration-hour", "°": "angle-degree",
}
ORDINAL_SUFFIXES = {"en": r"st|nd|rd|th", "fr": r"er|re|e|ème|eme", "es": r"º|ª|\.º|\.ª", "it": r"º|ª",
                    "pt": r"º|ª|\.º|\.ª"}
YEAR_LANGUAGES = frozenset({"en", "de", "nl"})  # num2words reads a year differently from a count
ORDINAL_DAY_LANGUAGES = frozenset({"en", "de"})  # "March fifteenth", "15. März" = "fünfzehnter"


def _alternation(names: Iterable[str]) -> str:
    """A regex alternation of `names`, longest first (so `km/h` wins over `km`)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def cardinal(value: Decimal | int, lang: str) -> str:
    return str(num2words(value, lang=language.number_language(lang)))


def ordinal(value: int, lang: str) -> str:
    try:
        return str(num2words(value, lang=language.number_language(lang), to="ordinal"))
    except NotImplementedError:
        return cardinal(value, lang)


def year(value: int, lang: str) -> str:
    if language.base(lang) in YEAR_LANGUAGES:
        return str(num2words(value, lang=language.number_language(lang), to="year"))
    return cardinal(value, lang)


@lru_cache(maxsize=64)
def _number_pattern(lang: str) -> tuple[str, str, str]:
    """(regex of one number, its group mark, its decimal mark) in the locale's notation."""
    loc = language.locale(lang)
    group, decimal = get_group_symbol(loc), get_decimal_symbol(loc)
    group = " " if group.isspace() else group  # clean() made every space an ASCII one
    g, d = re.escape(group), re.escape(decimal)
    return rf"\d{{1,3}}(?:{g}\d{{3}})+(?:{d}\d+)?|\d+(?:{d}\d+)?", group, decimal


def parse_number(text: str, lang: str) -> Decimal:
    _, group, decimal = _number_pattern(lang)
    return Decimal(text.replace(group, "").replace(decimal, "."))


def unit_words(value: Decimal, unit: str, lang: str) -> str:
    """`2.5 km` -> "two point five kilometers" (CLDR plural rules pick the form)."""
    loc = language.locale(lang)
    try:
        formatted = format_unit(value, unit, locale=loc, length="long")
    except Exception:  # noqa: BLE001 - babel raises several kinds for a unit a locale lacks
        return f"{cardinal(value, lang)} {unit.split('-', 1)[-1].replace('-', ' ')}"
    return formatted.replace(format_decimal(value, locale=loc), cardinal(value, lang), 1)


def currency_words(amount: Decimal, code: str, lang: str, scale: int = 0) -> str:
    """`$3.50` -> "three dollars, fifty cents"; `$2.5M` -> "two point five million dollars"."""
    num_lang = language.number_language(lang)
    converter = CONVERTER_CLASSES[num_lang]
    forms = getattr(converter, "CURRENCY_FORMS", {}).get(code)
    if scale:
        total = amount * (Decimal(10) ** scale)
        if language.base(lang) == "en":
            spoken = f"{cardinal(amount, lang)} {num2words(10 ** scale, lang='en').split()[-1]}"
        else:
            spoken = cardinal(total, lang)
        name = converter.pluralize(2, forms[0]) if forms else get_currency_name(code, count=2, locale=language.locale(lang))
        return f"{spoken} {name}"
    if amount != amount.to_integral_value() and forms:
        try:
            return str(num2words(float(amount), lang=num_lang, to="currency", currency=code))
        except (NotImplementedError, KeyError):
            pass
    whole = int(amount) if amount == amount.to_integral_value() else None
    count = whole if whole is not None else 2
    name = converter.pluralize(count, forms[0]) if forms else get_currency_name(
        code, count=count, locale=language.locale(lang))
    return f"{cardinal(amount if whole is None else whole, lang)} {name}"


# German: after these words the day's ordinal is dative or accusative, "am fünfzehnten März" (weak
# declension, -n); num2words gives the nominative after an article, "der fünfzehnte".
_DE_OBLIQUE = re.compile(r"(?:^|\s)(?:am|vom|zum|beim|im|dem|den|ab|bis|seit|für|über)\s*$", re.IGNORECASE)


def date_words(date: datetime.date, lang: str, before: str = "") -> str:
    """A date as the locale's long form says it: "March fifteenth, twenty twenty-four"; `before`:
    the text ahead of it (German inflects the day after "am", "vom", "bis", ...)."""
    loc = language.locale(lang)
    template = str(parse_pattern(str(get_date_format("long", locale=loc).pattern)).format)  # "%(d)s. %(MMMM)s %(y)s"
    base = language.base(lang)
    fields: dict[str, str] = {}
    for name in re.findall(r"%\((\w+)\)s", template):
        if name.startswith("d"):
            fields[name] = ordinal(date.day, lang) if base in ORDINAL_DAY_LANGUAGES or (
                base == "fr" and date.day == 1) else cardinal(date.day, lang)
        elif name in ("M", "MM", "L", "LL"):
            fields[name] = cardinal(date.month, lang)
        elif name.startswith(("M", "L")):
            fields[name] = str(get_month_names("wide", locale=loc)[date.month])
        elif name.startswith(("y", "u")):
            fields[name] = year(date.year, lang)
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
    hours = cardinal(hour, lang)
    if minute == 0:
        spoken = hours if meridiem else f"{hours} o'clock"
    elif minute < 10:
        spoken = f"{hours} oh {cardinal(minute, lang)}"
    else:
        spoken = f"{hours} {cardinal(minute, lang)}"
    return f"{spoken} {meridiem}" if meridiem else spoken


def _digits(text: str, lang: str) -> str:
    return " ".join(cardinal(int(ch), lang) for ch in text if ch.isdigit())


@lru_cache(maxsize=64)
def _passes(lang: str) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    num, _, _ = _number_pattern(lang)
    base = language.base(lang)
    us_dates = language.region_code(lang) in ("en", "en_US")

    def number(text: str) -> Decimal:
        return parse_number(text, lang)

    def iso_date(m: re.Match[str]) -> str:
        try:
            day = datetime.date(int(m["y"]), int(m["mo"]), int(m["d"]))
            return f" {date_words(day, lang, m.string[:m.start()])} "
        except ValueError:
            return m.group(0)

    def slash_date(m: re.Match[str]) -> str:
        a, b, y = int(m["a"]), int(m["b"]), int(m["y"])
        month, day = (a, b) if us_dates else (b, a)
        try:
            return f" {date_words(datetime.date(y, month, day), lang, m.string[:m.start()])} "
        except ValueError:
            return m.group(0)

    def clock(m: re.Match[str]) -> str:
        meridiem = f"{m['ap'].upper()}M" if m["ap"] else ""
        return f' {_time_words(int(m["h"]), int(m["mi"] or 0), meridiem, lang)} '

    def money(m: re.Match[str]) -> str:
        code = CURRENCY_SYMBOLS.get(m["sym"] or "") or (m["code"] or "").upper()
        scale = SCALES.get(m["scale"] or "", 0)
        return f" {currency_words(number(m['amount']), code, lang, scale)} "

    def scaled(m: re.Match[str]) -> str:
        return f" {cardinal(number(m['amount']), lang)} {m['scale']}"

    def percent(m: re.Match[str]) -> str:
        return f' {unit_words(number(m["n"]), "concentr-percent", lang)} '

    def unit(m: re.Match[str]) -> str:
        return f' {unit_words(number(m["n"]), UNITS[m["u"]], lang)} '

    def ordinal_number(m: re.Match[str]) -> str:
        return f' {ordinal(int(m["n"]), lang)} '

    def number_range(m: re.Match[str]) -> str:
        return f" {cardinal(number(m['a']), lang)} to {cardinal(number(m['b']), lang)} "

    def a_year(m: re.Match[str]) -> str:
        return f' {year(int(m["y"]), lang)} '

    def version(m: re.Match[str]) -> str:
        dot = link_words(lang)[0]
        return " " + f" {dot} ".join(cardinal(int(part), lang) for part in m.group(0).split(".")) + " "

    def hashed(m: re.Match[str]) -> str:
        return f" number {cardinal(int(m['n']), lang)} "

    def plain(m: re.Match[str]) -> str:
        text = m["n"]
        digits = text.replace(",", "").replace(".", "").replace(" ", "")
        if (len(digits) >= 10 or (len(digits) > 1 and digits[0] == "0" and not re.search(r"[.,]", text))) \
                and not m["sign"]:
            return f" {_digits(text, lang)} "  # an id, a phone or a code: read digit by digit
        try:
            value = number(text)
        except InvalidOperation:
            return text
        return f' {cardinal(-value if m["sign"] else value, lang)} '

    symbols = _alternation(CURRENCY_SYMBOLS)
    codes = "|".join(CURRENCY_CODES)
    scales = _alternation(SCALES)
    units = _alternation(UNITS)
    passes: list[tuple[str, Callable[[re.Match[str]], str]]] = [
        (r"(?<![\d-])(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})(?![\d-])", iso_date),
        (r"(?<![\d/])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4})(?![\d/])", slash_date),
        (r"(?<![\d.])(?P<d>\d{1,2})\.(?P<mo>\d{1,2})\.(?P<y>\d{4})(?![\d]|\.\d)", iso_date),
        (r"(?<![\d:.])(?P<h>[01]?\d|2[0-3]):(?P<mi>[0-5]\d)(?::[0-5]\d)?(?![\d:])"
         r"(?:\s?(?P<ap>[AaPp])\.?\s?[Mm]\b(?:\.(?=\s[a-z]))?)?", clock),
        (r"(?<![\d:.])(?P<h>1[0-2]|0?[1-9])(?P<mi>)\s?(?P<ap>[AaPp])\.?\s?[Mm]\b(?:\.(?=\s[a-z]))?", clock),
        (rf"(?:(?P<sym>{symbols})|\b(?P<code>{codes})\s?)(?P<amount>{num})"
         rf"(?:\s?(?P<scale>{scales})(?![A-Za-z]))?", money),
        (rf"(?<![\w.])(?P<amount>{num})(?:\s?(?P<scale>{scales})(?![A-Za-z]))?\s?"
         rf"(?:(?P<sym>{symbols})|(?P<code>{codes})\b)", money),
        (rf"(?<![\w.])(?P<amount>{num})\s?(?P<scale>thousand|million|billion|trillion)\b", scaled),
        (rf"(?<![\w.])(?P<n>{num})\s?%", percent),
        (rf"(?<![\w.])(?P<n>{num})\s?(?P<u>{units})(?![\w/])", unit),
    ]
    if base in ORDINAL_SUFFIXES:
        passes.append((rf"(?<![\w.])(?P<n>\d+)(?:{ORDINAL_SUFFIXES[base]})(?!\w)", ordinal_number))
    if base == "en":
        passes.append((r"(?<![\w.,-])(?P<a>\d+)\s?[-–]\s?(?P<b>\d+)(?![\d-]|[.,]\d)", number_range))
        passes.append((r"#(?P<n>\d+)\b", hashed))
    if base in YEAR_LANGUAGES:
        passes.append((r"(?<![\w.,:/-])(?P<y>1[1-9]\d\d|20\d\d)(?![\w:/%°-]|[.,]\d|\s?%)", a_year))
    passes.append((r"(?<![\w.])\d+(?:\.\d+){2,}(?!\w|\.\d)", version))
    passes.append((rf"(?P<sign>(?<![^\s(\[])[-−])?(?<![\d.,])(?P<n>{num})(?!\d)", plain))
    return [(re.compile(pattern), _or_as_written(replace)) for pattern, replace in passes]


def _or_as_written(replace: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
    """`replace`, or the match unchanged where a library has no words for it.

    num2words raises NotImplementedError, OverflowError, ValueError (and others, per
    language) for values or currencies a language lacks; such a notation is left for a
    later pass, or for the voice's own phonemiser, rather than failing the request.
    """

    def safe(match: re.Match[str]) -> str:
        try:
            return replace(match)
        except Exception:  # noqa: BLE001 - see above: any library failure means "no words here"
            return match.group(0)

    return safe


def expand(text: str, lang: str) -> str:
    """Every number-like notation in `text` as words of `lang`."""
    if not any(ch.isdigit() for ch in text):
        return text
    for pattern, replace in _passes(lang):
        text = pattern.sub(replace, text)
    return text
