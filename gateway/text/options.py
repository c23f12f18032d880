"""How one request's text is to be read: the per-request and per-server text settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from engine.types import InvalidInput

CODE_MODES = ("inline", "speak", "skip")  # inline: code spans read, fenced blocks skipped
EMOJI_MODES = ("drop", "name")
TEXT_FIELDS = ("normalize", "code", "emoji")


@dataclass(frozen=True, slots=True)
class TextOptions:
    """`normalize`: False passes the text through as written (whitespace and control
    characters cleaned, split into sentences; no markdown, SSML, numbers or links).
    `code`: `inline` reads code spans and skips fenced code blocks, `speak` reads both,
    `skip` drops both. `emoji`: `drop` or `name` (CLDR names in the voice's language).
    `language`: the voice's language code (`en_US`, `de`, ...).
    """

    normalize: bool = True
    code: str = "inline"
    emoji: str = "drop"
    language: str = "en"

    def __post_init__(self) -> None:
        if self.code not in CODE_MODES:
            raise ValueError(f"code must be one of {', '.join(CODE_MODES)}, got {self.code!r}")
        if self.emoji not in EMOJI_MODES:
            raise ValueError(f"emoji must be one of {', '.join(EMOJI_MODES)}, got {self.emoji!r}")


def parse_options(data: Mapping[str, Any], defaults: TextOptions, prefix: str = "") -> TextOptions:
    """`defaults` with the request's `normalize`, `code` and `emoji` fields applied (null, or
    left out: the default, as every optional field's null is).

    Raises InvalidInput naming the field (`prefix` + name, e.g. `session.code`).
    """
    normalize = defaults.normalize if data.get("normalize") is None else data["normalize"]
    if not isinstance(normalize, bool):
        raise InvalidInput(f"{prefix}normalize must be true or false", field=f"{prefix}normalize")
    code = defaults.code if data.get("code") is None else data["code"]
    if code not in CODE_MODES:
        raise InvalidInput(f"{prefix}code must be one of {', '.join(CODE_MODES)}", field=f"{prefix}code")
    emoji = defaults.emoji if data.get("emoji") is None else data["emoji"]
    if emoji not in EMOJI_MODES:
        raise InvalidInput(f"{prefix}emoji must be one of {', '.join(EMOJI_MODES)}", field=f"{prefix}emoji")
    return TextOptions(normalize=normalize, code=code, emoji=emoji, language=defaults.language)
