"""English abbreviations read as their words, where their reading is certain from what is beside them.

Voices read an abbreviation's full stop as a sentence's end ("Dr. Smith" with a pause after "Doctor"),
and some not as the word ("Dec." as "deck", "No. 5" as "no five"). These are spelled out:

- titles before a capitalised name (or `and`: `Mr. and Mrs. Jones`): `Dr.` Doctor, `Mr.` Mister, `Mrs.` Missus, `Ms.` Miz, `Prof.`
  Professor, `Rev.` Reverend, `Gen.` General, `Capt.` Captain, `Sgt.` Sergeant, `Lt.` Lieutenant,
  `Col.` Colonel, `Gov.` Governor, `Sen.` Senator, `Rep.` Representative, `Hon.` Honorable;
  `Jr.`/`Sr.` after a capitalised name (and a comma): Junior, Senior;
- months before a day (`Dec. 5th`, `Sept. 1`, `Jan 1`): the month's name, which the date pass then reads
  ("December fifth", as it reads `March 5`);
- `No.`/`no.` before a number: "number" (`No. 5`, `#5` is read so already); `p.`, `pp.` and `ext.`
  before a number: "page", "pages", "extension"; a unit's full stop after a number within a sentence
  is dropped, so the units pass reads it, and `5 ft. 10 in.` is "5 feet 10 inches";
- in an address (a number within the three words before it): `St.` Street (`221B Baker St.`);
  elsewhere `St.` is left to the voice ("saint"); `Ave.` Avenue, `Blvd.` Boulevard, `Rd.` Road;
- `5'10"` "5 feet 10 inches"; `w/` with, `w/o` without (before a space);
- `vs.` versus, `etc.` et cetera, `e.g.` for example, `i.e.` that is.

The full stop goes with the word, except where the abbreviation ends the text or is followed by a
capital after a space that begins no name it reads (`... etc. Then`): there the sentence's end is kept.
"""

from __future__ import annotations

import re

from gateway.text import language

TITLES = {"Dr": "Doctor", "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Prof": "Professor", "Rev": "Reverend",
          "Gen": "General", "Capt": "Captain", "Sgt": "Sergeant", "Lt": "Lieutenant", "Col": "Colonel",
          "Gov": "Governor", "Sen": "Senator", "Rep": "Representative", "Hon": "Honorable"}
SUFFIXES = {"Jr": "Junior", "Sr": "Senior"}
MONTHS = {"Jan": "January", "Feb": "February", "Mar": "March", "Apr": "April", "Jun": "June", "Jul": "July",
          "Aug": "August", "Sep": "September", "Sept": "September", "Oct": "October", "Nov": "November",
          "Dec": "December"}
STREETS = {"Ave": "Avenue", "Blvd": "Boulevard", "Rd": "Road"}
LATIN = {"vs.": "versus", "etc.": "et cetera", "e.g.": "for example", "i.e.": "that is"}

_TITLE = re.compile(rf"\b(?:(?P<a>{'|'.join(TITLES)})\.|(?P<b>Dr|Mr|Mrs|Ms)\b)(?=\s+(?:[A-Z]|and\s|&))")  # ("Gen Z" stays)
_SUFFIX = re.compile(rf"(?<=[a-z]),? (?P<a>{'|'.join(SUFFIXES)})\.(?P<end>\s*$)?(?=$|[\s,;:!?)])")
_MONTH = re.compile(rf"\b(?P<a>{'|'.join(sorted(MONTHS, key=len, reverse=True))})"
                    r"(?:\.(?=\s?\d)|(?= \d{1,2}(?:st|nd|rd|th)?\b))")  # "Dec. 5", "Jan 1st"
_NUMBER = re.compile(r"\b(?P<a>[Nn]o)\.\s?(?=\d)")
_BEFORE_NUMBER = re.compile(r"\b(?P<a>pp|p|ext)\.\s?(?=\d)")
BEFORE_NUMBER = {"p": "page ", "pp": "pages ", "ext": "extension "}
_FEET_INCHES = re.compile(r"(?<![\w.])(?P<f>\d+)\s?ft\.?\s?(?P<i>\d+(?:\.\d+)?)\s?in\b(?:(?P<end>\.\s*$)|\.)?")
# A unit's full stop inside a sentence ("5 ft. 10 in. tall"): dropped, so the units pass reads it.
_FEET_INCHES_MARKS = re.compile(r"(?<![\w.'’])(?P<f>[1-9])\s?['’′]\s?(?P<i>1[01]|\d)(?:\s?(?:\"|”|″|''))")  # 5'10"
_WITH = re.compile(r"(?<![\w/])(?P<w>[Ww])/(?P<o>o\b)?(?=\s)")  # "w/ milk", "w/o sugar"
_UNIT_DOT = re.compile(r"(?<=\d)(?P<u>\s?(?:ft|in|lbs?|oz|yds?|mi|hrs?|mins?|secs?|gal|qt))\.(?=\s+[a-z\d])")
_STREET = re.compile(rf"\b(?P<a>{'|'.join(STREETS)})\.(?P<end>\s*$|\s+(?=[A-Z]))?")
_SAINT_STREET = re.compile(r"(?<=\d)(?P<between>[A-Za-z]?(?:\s+[A-Z][\w'-]*){1,3})\s+St\.(?P<end>\s*$|\s+(?=[A-Z]))?")
_LATIN = re.compile(r"(?<!\w)(?P<a>vs\.|etc\.|e\.g\.|i\.e\.)(?P<end>\s*$|\s+(?=[A-Z]))?")


def _ending(m: re.Match[str]) -> str:
    """What stays of the full stop: a sentence's end where the text ends or a capital follows."""
    return "." + m["end"] if m["end"] is not None else ""


def expand(text: str, lang: str) -> str:
    """`text` with the English abbreviations above spelled out (other languages: as it is)."""
    if language.base(lang) != "en":
        return text
    text = _TITLE.sub(lambda m: TITLES[m["a"] or m["b"]], text)
    text = _SUFFIX.sub(lambda m: f" {SUFFIXES[m['a']]}{_ending(m)}", text)
    text = _MONTH.sub(lambda m: MONTHS[m["a"]], text)
    text = _NUMBER.sub(lambda m: "Number " if m["a"] == "No" else "number ", text)
    text = _BEFORE_NUMBER.sub(lambda m: BEFORE_NUMBER[m["a"]], text)
    text = _FEET_INCHES.sub(lambda m: f"{m['f']} feet {m['i']} inches{m['end'] or ''}", text)
    text = _FEET_INCHES_MARKS.sub(lambda m: f"{m['f']} feet {m['i']} inches", text)
    text = _WITH.sub(lambda m: ("W" if m["w"] == "W" else "w") + ("ithout" if m["o"] else "ith"), text)
    text = _UNIT_DOT.sub(lambda m: m["u"], text)
    text = _SAINT_STREET.sub(lambda m: f"{m['between']} Street{_ending(m)}", text)
    text = _STREET.sub(lambda m: STREETS[m["a"]] + _ending(m), text)
    # "vs.", "e.g.", "i.e." lead on to what follows ("Apple vs. Google"): only "etc." or the text's end ends a sentence
    return _LATIN.sub(lambda m: LATIN[m["a"]] + (_ending(m) if m["a"] == "etc." or not m.string[m.end():].strip()
                                                  else " " if m["end"] else ""), text)
