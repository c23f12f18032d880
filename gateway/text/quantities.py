"""Amounts of something, as words: money, percentages and units.

The words come from libraries: num2words (numbers, currency amounts and their plural forms),
babel's CLDR data (unit and currency names with their plural rules). What is here only
recognises the notations; `passes(lang)` gives them, in the order `numerals.expand` runs them
(after dates and times): currency (`$3.50`, `€5`, `5 EUR`, `$2.5M`), `5 thousand`,
percentages (`45%`), units (`5 km`, `20°C`, `50 km/h`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Callable, Iterable

from babel.numbers import format_decimal, get_currency_name
from babel.units import format_unit
from num2words import CONVERTER_CLASSES, num2words

from gateway.text import language
from gateway.text.number_words import cardinal, number_pattern, parse_number, scaled

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

Pass = tuple[str, Callable[[re.Match[str]], str]]


def alternation(names: Iterable[str]) -> str:
    """A regex alternation of `names`, longest first (so `km/h` wins over `km`)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def unit_words(value: Decimal, unit: str, lang: str) -> str:
    """`2.5`, `length-kilometer` -> "two point five kilometers" (CLDR plural rules pick the form)."""
    loc = language.locale(lang)
    try:
        formatted = format_unit(value, unit, locale=loc, length="long")
    except Exception:  # noqa: BLE001 - babel raises several kinds for a unit a locale lacks
        return f"{cardinal(value, lang)} {unit.split('-', 1)[-1].replace('-', ' ')}"
    return formatted.replace(format_decimal(value, locale=loc), cardinal(value, lang), 1)


def currency_words(amount: Decimal, code: str, lang: str, scale: int = 0) -> str:
    """`3.50`, `USD` -> "three dollars, fifty cents"; with `scale` 6: `2.5` -> "two point five million dollars"."""
    num_lang = language.number_language(lang)
    converter = CONVERTER_CLASSES[num_lang]
    forms = getattr(converter, "CURRENCY_FORMS", {}).get(code)
    if scale:
        name = converter.pluralize(2, forms[0]) if forms else get_currency_name(code, count=2, locale=language.locale(lang))
        return f"{scaled(amount, scale, lang)} {name}"
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


def passes(lang: str) -> list[Pass]:
    """The (regex, replacement) passes for the quantities `lang` reads, in the order they run."""
    num, _, _ = number_pattern(lang)

    def number(text: str) -> Decimal:
        return parse_number(text, lang)

    def money(m: re.Match[str]) -> str:
        code = CURRENCY_SYMBOLS.get(m["sym"] or "") or (m["code"] or "").upper()
        scale = SCALES.get(m["scale"] or "", 0)
        return f" {currency_words(number(m['amount']), code, lang, scale)} "

    def worded_scale(m: re.Match[str]) -> str:
        return f" {cardinal(number(m['amount']), lang)} {m['scale']}"

    def percent(m: re.Match[str]) -> str:
        return f' {unit_words(number(m["n"]), "concentr-percent", lang)} '

    def unit(m: re.Match[str]) -> str:
        return f' {unit_words(number(m["n"]), UNITS[m["u"]], lang)} '

    symbols = alternation(CURRENCY_SYMBOLS)
    codes = "|".join(CURRENCY_CODES)
    scales = alternation(SCALES)
    units = alternation(UNITS)
    return [
        (rf"(?:(?P<sym>{symbols})|\b(?P<code>{codes})\s?)(?P<amount>{num})"
         rf"(?:\s?(?P<scale>{scales})(?![A-Za-z]))?", money),
        (rf"(?<![\w.])(?P<amount>{num})(?:\s?(?P<scale>{scales})(?![A-Za-z]))?\s?"
         rf"(?:(?P<sym>{symbols})|(?P<code>{codes})\b)", money),
        (rf"(?<![\w.])(?P<amount>{num})\s?(?P<scale>thousand|million|billion|trillion)\b", worded_scale),
        (rf"(?<![\w.])(?P<n>{num})\s?%", percent),
        (rf"(?<![\w.])(?P<n>{num})\s?(?P<u>{units})(?![\w/])", unit),
    ]
