"""Amounts of something, as words: money, percentages, units, durations, fractions, ratios and
scaled numbers ("100k").

The words come from libraries: num2words (numbers, currency amounts and their plural forms),
babel's CLDR data (unit and currency names with their plural rules). What is here only
recognises the notations; `passes(lang)` gives them, in the order `numerals.expand` runs them
(after dates and times, so `3:15` is a time before it could be a ratio):

- ratios (English): `3:1`, `16:9`, `1:50,000`, `3:2:1` -> "three to one"; only where no part
  after the first has two digits (`3:15`, `10:30 pm` are times; `25:99`, which is neither, reads
  its numbers, "twenty-five ninety-nine");
- ranges (English) with a quantity on the right: `5-10%`, `1-2 km`, `10-20 €`, `$5-10`, `$5-$10`
  -> "five to ten percent": the first number is read ("five to ") and the quantity by its pass;
- money: `$3.50`, `€5`, `5 EUR`, `$2.5M`, `$0.99` ("ninety-nine cents": no "zero dollars"), also
  in the other notation than the language's (`$3.50` in German, `3,50 €` in English);
- `5 thousand`, percentages `45%`;
- durations of two or more parts, largest first: `2h 30m`, `1m 45s`, `3d 4h`, `1h30m15s`
  -> "two hours thirty minutes"; a part alone keeps its own reading (`2h` "two hours", `30m`
  "thirty meters", `45s` "forty-five seconds": `seconds`, which `numerals` runs after decades);
- fractions (English): `1/2` "one half", `3/4` "three quarters", `2/3` "two thirds", `2 1/2`
  "two and a half", `3/4 mi` "three quarters of a mile"; a fraction is a numerator smaller than
  a denominator of 2 to 10 or 100; `5/5`, `10/10` "five out of five"; any other `a/b` (`24/7`,
  `50/50`, `12/25`) reads its two numbers ("twenty-four seven");
- multiples (English): `2x`, `10×`, `1.5x` -> "two times"; sizes `2x4`, `1920x1080` -> "two by
  four", "nineteen twenty by ten eighty" (the sides as years are read);
- units: `5 km`, `20°C`, `50 km/h`, and `km/h`, `m/s` alone ("kilometers per hour");
- scaled numbers: `100k`, `2.5M`, `3B`, `4bn` -> "one hundred thousand", "two point five million"
  (`m` is meters, and `t`/`T` tonnes or teslas, so neither is a scale here; `4K`, one digit and
  a capital K, is a display or a run: "four K"; a whole number with `M` or `B` is a scale only
  before a lowercase word and not after "seat", "room", "gate" and the like: "3B users", but
  "221B Baker", "seat 12B and", "room 3M").

A minus sign (`number_words.SIGN`) before any of these but ratios and fractions is read where the
number is: `-5°C` "minus five degrees Celsius", `-$20` "minus twenty dollars".
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Callable, Iterable

from babel.numbers import format_decimal, get_currency_name
from babel.units import format_unit
from num2words import CONVERTER_CLASSES, num2words

from gateway.text import language
from gateway.text.number_words import (
    DECADE_YEARS, SIGN, cardinal, decimal_word, digits, english_plural, money_pattern, number_pattern, ordinal,
    parse_money, parse_number, scaled, signed, ungrouped, year,
)

CURRENCY_SYMBOLS = {"US$": "USD", "A$": "AUD", "C$": "CAD", "R$": "BRL", "$": "USD", "€": "EUR", "£": "GBP",
                    "¥": "JPY", "₹": "INR", "₩": "KRW", "₽": "RUB", "₺": "TRY", "₪": "ILS", "₫": "VND", "฿": "THB",
                    "₴": "UAH", "₦": "NGN", "₱": "PHP", "zł": "PLN"}
CURRENCY_CODES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "BRL", "SEK", "NOK", "DKK",
                  "PLN", "RUB", "KRW", "MXN", "TRY", "ZAR", "NZD", "SGD", "HKD")
# Scale suffixes after an amount ("$2.5M", "€3bn", "$40k").
SCALES = {"k": 3, "K": 3, "thousand": 3, "m": 6, "M": 6, "mn": 6, "million": 6, "b": 9, "B": 9, "bn": 9,
          "billion": 9, "t": 12, "T": 12, "tn": 12, "trillion": 12}
# The scale suffixes a number without a currency takes ("100k", "2.5M"): not "m" (meters), "b",
# "t" or "T" (tonnes, teslas), which a bare number more often means.
BARE_SCALES = ("k", "K", "M", "B", "mn", "bn", "tn")
# Before a number with `M` or `B`, words that make it a name ("seat 12B"), not a scale (English).
PLACE_WORDS = re.compile(r"(?i)\b(?:apt|apartment|room|suite|unit|seat|gate|row|flight|platform|terminal|floor|"
                         r"level|block|building|bus|route|pier|berth|bay|dock|box|no|number)\.?\s*#?\s*$")
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
# The parts of a duration ("2h 30m"), largest first: (group, notations, CLDR unit).
DURATION_PARTS = (("d", "d", "duration-day"), ("h", "hrs|hr|h", "duration-hour"),
                  ("m", "mins|min|m", "duration-minute"), ("s", "secs|sec|s", "duration-second"))
FRACTION_DENOMINATORS = frozenset(range(2, 11)) | {100}
_SLASH_UNITS = re.compile(r"(?<![\w/])(" + "|".join(re.escape(u) for u in UNITS if "/" in u) + r")(?![\w/])")

Pass = tuple[str, Callable[[re.Match[str]], str]]


def alternation(names: Iterable[str]) -> str:
    """A regex alternation of `names`, longest first (so `km/h` wins over `km`)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def unit_words(value: Decimal, unit: str, lang: str, sign: str | None = None) -> str:
    """`2.5`, `length-kilometer` -> "two point five kilometers" (CLDR plural rules pick the form);
    with a minus `sign`, its word goes where the number is ("minus five degrees Celsius")."""
    loc = language.locale(lang)
    words = signed(cardinal(value, lang), sign, lang)
    try:
        formatted = format_unit(value, unit, locale=loc, length="long")
    except Exception:  # noqa: BLE001 - babel raises several kinds for a unit a locale lacks
        return f"{words} {unit.split('-', 1)[-1].replace('-', ' ')}"
    return formatted.replace(format_decimal(value, locale=loc), words, 1)


def unit_name(unit: str, count: int, lang: str) -> str:
    """A CLDR unit's name as `count` of it takes it: (`length-kilometer`, 2) -> "kilometers"."""
    return unit_words(Decimal(count), unit, lang).replace(cardinal(count, lang), "", 1).strip()


FLOAT_DIGITS = 15  # a float holds 15 significant decimal digits exactly


def currency_words(amount: Decimal, code: str, lang: str, scale: int = 0) -> str:
    """`3.50`, `USD` -> "three dollars, fifty cents"; `0.99` -> "ninety-nine cents";
    with `scale` 6: `2.5` -> "two point five million dollars"."""
    num_lang = language.number_language(lang)
    converter = CONVERTER_CLASSES[num_lang]
    forms = getattr(converter, "CURRENCY_FORMS", {}).get(code)
    if scale:
        name = converter.pluralize(2, forms[0]) if forms else get_currency_name(code, count=2, locale=language.locale(lang))
        return f"{scaled(amount, scale, lang)} {name}"
    if amount != amount.to_integral_value():
        rounded = amount.quantize(Decimal("0.01"), ROUND_HALF_UP)  # (as num2words rounds a float's cents)
        if len(rounded.as_tuple().digits) > FLOAT_DIGITS:  # a float would get its digits wrong, silently
            return _long_money(rounded, code, lang, converter, forms)
    if amount != amount.to_integral_value() and forms:
        cents = amount * 100
        if amount < 1 and cents == cents.to_integral_value() and len(forms) > 1 and forms[1]:
            return f"{cardinal(int(cents), lang)} {converter.pluralize(int(cents), forms[1])}"  # not "zero dollars"
        try:
            words = str(num2words(float(amount), lang=num_lang, to="currency", currency=code))
            amount_words, comma, cents_words = words.rpartition(",")  # "..., fifty-six cents": the one pause kept
            return f"{ungrouped(amount_words)},{cents_words}" if comma else words
        except (NotImplementedError, KeyError):
            pass
    whole = int(amount) if amount == amount.to_integral_value() else None
    count = whole if whole is not None else 2
    name = converter.pluralize(count, forms[0]) if forms else get_currency_name(
        code, count=count, locale=language.locale(lang))
    return f"{cardinal(amount if whole is None else whole, lang)} {name}"


def _long_money(amount: Decimal, code: str, lang: str, converter: Any, forms: Any) -> str:
    """An amount of more than `FLOAT_DIGITS` digits (to the cent), every digit kept: num2words reads
    currency, and some languages' decimals, through a float. Its whole part and its cents apart
    ("..., ninety-nine cents"); where num2words has no cent name, the cents after the decimal word
    ("... point eight nine dollars"), or, with no decimal word either (Japanese), as a number after
    the currency's name. `converter`, `forms`: `currency_words`' num2words converter and its forms."""
    units, hundredths = int(amount), int((amount - int(amount)) * 100)
    name = converter.pluralize(units, forms[0]) if forms else get_currency_name(
        code, count=units, locale=language.locale(lang))
    if not hundredths:
        return f"{cardinal(units, lang)} {name}"
    if forms and len(forms) > 1 and forms[1]:
        return f"{cardinal(units, lang)} {name}, {cardinal(hundredths, lang)} {converter.pluralize(hundredths, forms[1])}"
    point = decimal_word(lang)
    if point is not None:
        return f"{cardinal(units, lang)} {point} {digits(f'{hundredths:02d}', lang)} {name}"
    return f"{cardinal(units, lang)} {name} {cardinal(hundredths, lang)}"


def fraction_words(numerator: int, denominator: int, whole: int | None = None) -> str:
    """English: (3, 4) -> "three quarters", (1, 2) -> "one half", (1, 2, whole=2) -> "two and a half".

    The denominator's word is num2words' ordinal ("third", "tenth"), but "half" and "quarter"."""
    one = {2: "half", 4: "quarter"}.get(denominator) or ordinal(denominator, "en").removeprefix("one ")
    name = one if numerator == 1 else english_plural(one) if denominator != 2 else "halves"
    if whole is None:
        return f"{cardinal(numerator, 'en')} {name}"
    count = ("an" if name[0] in "aeiou" else "a") if numerator == 1 else cardinal(numerator, "en")
    return f"{cardinal(whole, 'en')} and {count} {name}"


def slash_units(text: str, lang: str) -> str:
    """`km/h`, `m/s` without a number -> their names ("kilometers per hour")."""
    if "/" not in text:
        return text
    return _SLASH_UNITS.sub(lambda m: f" {unit_name(UNITS[m.group(1)], 2, lang)} ", text)


def passes(lang: str) -> list[Pass]:
    """The (regex, replacement) passes for the quantities `lang` reads, in the order they run."""
    num, _, decimal = number_pattern(lang)
    base = language.base(lang)
    simple = rf"\d+(?:{re.escape(decimal)}\d+)?"

    def number(text: str) -> Decimal:
        return parse_number(text, lang)

    def ratio(m: re.Match[str]) -> str:
        parts = m.group(0).split(":")
        if any(len(re.sub(r"\D", "", part)) == 2 for part in parts[1:]):
            return f" {' '.join(parts)} "  # "3:15" is a time (read before this); "25:99" its numbers
        return " " + " to ".join(cardinal(number(part), lang) for part in parts) + " "

    def money(m: re.Match[str]) -> str:
        code = CURRENCY_SYMBOLS.get(m["sym"] or "") or (m["code"] or "").upper()
        scale = SCALES.get(m["scale"] or "", 0)
        return f" {currency_words(parse_money(m['amount'], lang), code, lang, scale)} "

    def range_start(m: re.Match[str]) -> str:
        low = parse_money(m["a"], lang) if m["sym"] else number(m["a"])
        code = CURRENCY_SYMBOLS.get(m["sym"] or m["rsym"] or "") or (m["rcode"] or "").upper()
        words = currency_words(low, code, lang) if code and low != low.to_integral_value() else cardinal(low, lang)
        return f" {words} to {m['sym'] or ''}"  # "$5-10" -> "five to $10", read by `money` next

    def worded_scale(m: re.Match[str]) -> str:
        return f" {cardinal(number(m['amount']), lang)} {m['scale']}"

    def percent(m: re.Match[str]) -> str:
        return f' {unit_words(number(m["n"]), "concentr-percent", lang, m["sign"])} '

    def duration(m: re.Match[str]) -> str:
        parts = [(m[group], unit) for group, _, unit in DURATION_PARTS if m[group]]
        if len(parts) < 2:
            return m.group(0)  # one part alone ("30m", "5s") is not surely a duration
        return " " + " ".join(unit_words(number(value), unit, lang) for value, unit in parts) + " "

    def fraction(m: re.Match[str]) -> str:
        a, b = int(m["a"]), int(m["b"])
        whole = int(m["w"]) if m["w"] else None
        proper = 0 < a < b and b in FRACTION_DENOMINATORS
        if proper and m["u"]:
            unit = UNITS[m["u"]]
            if whole is not None:
                return f" {fraction_words(a, b, whole)} {unit_name(unit, 2, lang)} "
            name = unit_name(unit, 1, lang)
            article = "an" if name[0].lower() in "aeiou" or name.startswith("hour") else "a"
            return f" {fraction_words(a, b)} of {article} {name} "
        if proper:
            return f" {fraction_words(a, b, whole)} "
        before = f"{m['w']} " if m["w"] else ""
        if m["u"]:  # "24/7 km": the unit goes with the number before it
            return f" {before}{cardinal(a, lang)} {m['b']} {m['u']}"
        said = f"{cardinal(a, lang)} out of {cardinal(b, lang)}" if a == b and b <= 10 else \
            f"{cardinal(a, lang)} {cardinal(b, lang)}"  # "10/10"; "24/7", "50/50", "12/25"
        return f" {before}{said} "

    def dimensions(m: re.Match[str]) -> str:  # "2x4" "two by four"; "1920x1080" "nineteen twenty by ten eighty"
        return " " + " by ".join(year(int(side), lang) for side in (m["a"], m["b"])) + " "

    def unit(m: re.Match[str]) -> str:
        return f' {unit_words(number(m["n"]), UNITS[m["u"]], lang, m["sign"])} '

    def bare_scale(m: re.Match[str]) -> str:
        if m["scale"] == "K" and len(m["amount"]) == 1:
            return m.group(0)  # "4K" (a display), "5K" (a run) are said "four K"
        if m["scale"] in ("M", "B") and m["amount"].isdigit() and (
                not re.match(r"\s+[a-z]", m.string[m.end():]) or PLACE_WORDS.search(m.string[:m.start()])):
            return m.group(0)  # "221B Baker St.", "seat 12B and", "room 3M": a name, not "3B users" or "2.5M"
        return f" {scaled(number(m['amount']), SCALES[m['scale']], lang)} "

    def with_sign(replace: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
        def read(m: re.Match[str]) -> str:  # "-5°C" -> "minus five degrees Celsius"
            words = replace(m)
            return words if words == m.group(0) or not m["sign"] else f" {signed(words.strip(), m['sign'], lang)} "

        return read

    symbols = alternation(CURRENCY_SYMBOLS)
    codes = "|".join(CURRENCY_CODES)
    scales = alternation(SCALES)
    units = alternation(UNITS)
    worded, bare = "thousand|million|billion|trillion", alternation(BARE_SCALES)
    money_num = money_pattern(lang)
    # What makes the number on a range's right a quantity: "5-10%", "5-10 km", "10-20 €", "10-20k".
    quantity_after = (rf"(?:{num})(?:\s?%|\s?(?:{units})(?![\w/])|(?:\s?(?:{scales})(?![A-Za-z]))?\s?"
                      rf"(?:(?P<rsym>{symbols})|(?P<rcode>{codes})\b)|\s?(?:{worded})\b|(?:{bare})(?!\w))")
    duration_parts = "".join(rf"(?:(?P<{group}>{simple})\s?(?:{notation})(?![A-Za-z])\s?)?"
                             for group, notation, _ in DURATION_PARTS)
    found: list[Pass] = []
    if base == "en":
        found += [
            (rf"(?<![\w.:,])(?:{num})(?::(?:{num}))+(?![\d:]|[.,]\d)", ratio),
            # a range's first number, before the quantity that the passes below read ("five to ")
            (rf"(?P<sym>{symbols})(?P<a>{money_num})(?:[-–]|\s?[-–]\s?(?=(?P=sym)))(?:(?P=sym))?(?=\d)"
             r"(?P<rsym>)(?P<rcode>)", range_start),
            (rf"(?<![\w.,-])(?P<sym>)(?P<a>{num})\s?[-–]\s?(?={quantity_after})", range_start),
        ]
    found += [
        (rf"{SIGN}(?:(?P<sym>{symbols})|\b(?P<code>{codes})\s?)(?P<amount>{money_num})"
         rf"(?:\s?(?P<scale>{scales})(?![A-Za-z]))?", with_sign(money)),
        (rf"{SIGN}(?<![\w.])(?P<amount>{money_num})(?:\s?(?P<scale>{scales})(?![A-Za-z]))?\s?"
         rf"(?:(?P<sym>{symbols})|(?P<code>{codes})\b)", with_sign(money)),
        (rf"{SIGN}(?<![\w.])(?P<amount>{num})\s?(?P<scale>{worded})\b",
         with_sign(worded_scale)),
        (rf"{SIGN}(?<![\w.])(?P<n>{num})\s?%", percent),
        (rf"{SIGN}(?<![\w.,])(?=\d){duration_parts}(?<!\s)(?![\w/])", with_sign(duration)),
    ]
    if base == "en":
        found.append((r"(?<![\w.])(?P<a>\d{1,4})[x×](?P<b>\d{1,4})(?![\w×]|\.\d)", dimensions))
        found.append((r"(?<![\w.])(?P<n>\d+(?:\.\d+)?)[x×](?![\w×])",
                      lambda m: f" {cardinal(number(m['n']), lang)} times "))  # "2x faster", "10x"
        found.append((r"(?<![\w/.,:])(?:(?P<w>\d{1,3}) )?(?P<a>\d{1,3})/(?P<b>\d{1,3})(?![\w/]|[.,]\d)"
                      rf"(?:\s?(?P<u>{units})(?![\w/]))?", fraction))
    found += [
        (rf"{SIGN}(?<![\w.])(?P<n>{num})\s?(?P<u>{units})(?![\w/])", unit),
        (rf"{SIGN}(?<![\w.,])(?P<amount>{num})(?P<scale>{bare})(?!\w)", with_sign(bare_scale)),
    ]
    return found


def seconds(lang: str) -> Pass:
    """`45s`, `1.5s`, `-5s` -> "forty-five seconds", ...: a number directly before `s`; in English
    `5-10s` "five to ten seconds". `numerals` runs it after the decades (`80s`, `1990s`), which take
    theirs first; what only a decade can be (`'90s`, `1990s` in any language) and a range whose right
    side is the smaller (`1980-90s`) are left as written."""
    num, _, _ = number_pattern(lang)
    low = rf"(?:(?P<low>{num})\s?[-–]\s?)?" if language.base(lang) == "en" else "(?P<low>)"

    def read(m: re.Match[str]) -> str:
        if re.fullmatch(DECADE_YEARS, m["n"]):
            return m.group(0)
        value = parse_number(m["n"], lang)
        if not m["low"]:
            return f' {unit_words(value, "duration-second", lang, m["sign"])} '
        start = parse_number(m["low"], lang)
        if start >= value:
            return m.group(0)
        return f' {signed(cardinal(start, lang), m["sign"], lang)} to {unit_words(value, "duration-second", lang)} '

    return rf"{SIGN}(?<![\w.,'’‘]){low}(?P<n>{num})s(?![\w'’])", read
