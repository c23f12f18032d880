"""Which language a voice speaks, and how each library names that language.

A voice's language is a BCP 47-ish code as the model ships it: piper voice configs carry
`language.code` (`en_US`, `de_DE`, ...; `models/piper.py validate()` returns it), Orpheus
speaks English. Each library the frontend uses knows a different set of languages and
spells them differently; the helpers here map one code onto each, falling back to
English where a library does not know the language (the text is then still spoken, with
English rules for that one step).
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from pathlib import Path
from typing import Any

import emoji
import pysbd.languages
from babel import Locale, UnknownLocaleError
from num2words import CONVERTER_CLASSES

from engine.types import EngineError
from models import InvalidModel

DEFAULT_LANGUAGE = "en"
# Families whose every model speaks one language (validate() would be slow to ask).
FAMILY_LANGUAGES = {"orpheus": "en"}


def base(code: str) -> str:
    """`en_US`, `en-us`, `EN` -> `en` (ISO 639-1/-3 part, lower case)."""
    return code.replace("-", "_").split("_")[0].lower() or DEFAULT_LANGUAGE


def region_code(code: str) -> str:
    """`en-us` -> `en_US`; `en` stays `en`."""
    parts = code.replace("-", "_").split("_")
    return parts[0].lower() if len(parts) == 1 else f"{parts[0].lower()}_{parts[1].upper()}"


def sentence_language(code: str) -> str:
    """The pysbd segmenter language for `code` (pysbd knows 23 languages)."""
    lang = base(code)
    return lang if lang in pysbd.languages.LANGUAGE_CODES else DEFAULT_LANGUAGE


def number_language(code: str) -> str:
    """The num2words language for `code` (`pt_BR` keeps its region where num2words has it)."""
    full = region_code(code)
    if full in CONVERTER_CLASSES:
        return full
    lang = base(code)
    return lang if lang in CONVERTER_CLASSES else DEFAULT_LANGUAGE


def emoji_language(code: str) -> str:
    lang = base(code)
    return lang if lang in emoji.LANGUAGES else DEFAULT_LANGUAGE


@lru_cache(maxsize=64)
def is_known(code: str) -> bool:
    """Whether CLDR (babel) knows `code`'s language, e.g. `de_DE`, `pt-BR`, `en`; `zz` is not one."""
    try:
        Locale.parse(base(code))
    except (UnknownLocaleError, ValueError):
        return False
    return True


@lru_cache(maxsize=64)
def locale(code: str) -> Locale:
    """The babel (CLDR) locale for unit, currency, month and list words."""
    for candidate in (region_code(code), base(code)):
        try:
            return Locale.parse(candidate)
        except (UnknownLocaleError, ValueError):
            continue
    return Locale.parse(DEFAULT_LANGUAGE)


@lru_cache(maxsize=64)
def _piper_language(path: str | None) -> str:
    from models import family

    module = family("piper")
    folder = Path(path) if path else module.embedded_model_path()
    info: dict[str, Any] = module.validate(folder)
    return str(info.get("language") or DEFAULT_LANGUAGE)


async def model_language(family_name: str, path: str | None) -> str:
    """The language code a model speaks (e.g. `en_US`); DEFAULT_LANGUAGE when unknown.

    Piper voices are asked once per folder (their JSON config is read in a worker thread,
    then cached); other families have one language each (FAMILY_LANGUAGES).
    """
    if family_name in FAMILY_LANGUAGES:
        return FAMILY_LANGUAGES[family_name]
    if family_name == "piper":
        try:
            return await asyncio.to_thread(_piper_language, path)
        except (InvalidModel, EngineError, OSError):  # a broken folder fails at load, with its own error
            return DEFAULT_LANGUAGE
    return DEFAULT_LANGUAGE
