"""`POST /v1/text/normalize`: what the text frontend makes of an input, without speaking it.

Body: `input` (required, at most `max_input_chars`), `model` and `voice` (whose language
and server defaults apply, as in `/v1/audio/speech`), `language` (a language code that
overrides the voice's, e.g. `de_DE`; one CLDR does not know, e.g. `zz`, is a 400), `normalize`, `code`, `emoji`. Answer:
`{"language", "items": [{"text": ...} | {"pause_ms": ...}], "text"}` where `items` are
the segments and pauses `/v1/audio/speech` would speak, in order, and `text` is the
segments joined with spaces. An input that would have nothing to speak (once the options
read it: emoji alone speak only with `emoji: "name"`) is a 400 naming `input`, as there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.types import InvalidInput
from gateway.errors import read_json
from gateway.json_input import check_fields
from gateway.state import AppState
from gateway.stitch import speech_options
from gateway.text import TEXT_FIELDS, Pause, check_input, check_spoken, language, prepare
from gateway.voices import resolve

NORMALIZE_FIELDS: frozenset[str] = frozenset({"input", "model", "voice", "language", *TEXT_FIELDS})
_LANGUAGE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?$")


async def normalize(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    data = await read_json(request, state.settings.max_body_bytes)
    check_fields(data, NORMALIZE_FIELDS, "/v1/text/normalize")
    if "input" not in data:
        raise InvalidInput("input is required", field="input")
    check_input(data["input"], state.settings.max_input_chars, speakable=False)  # (read with its options below)
    choice = await resolve(state.library, model=data.get("model"), voice=data.get("voice"), speed=None,
                           default_model=state.settings.default_model, default_voice=state.settings.default_voice)
    options = await speech_options(state, choice, data)
    lang = data.get("language")
    if lang is not None:
        if not isinstance(lang, str) or not _LANGUAGE.match(lang):
            raise InvalidInput("language must be a language code such as 'en', 'de_DE' or 'pt-BR'", field="language")
        if not language.is_known(lang):
            raise InvalidInput(f"language {lang!r} is not a language CLDR knows (e.g. 'en', 'de_DE', 'pt-BR')",
                               field="language")
        options = dataclasses.replace(options, language=lang)
    items = await asyncio.to_thread(prepare, data["input"], options, state.settings.first_segment_chars)
    check_spoken(items, data["input"], options)  # refused as /v1/audio/speech refuses it
    return JSONResponse({
        "language": options.language,
        "items": [{"pause_ms": item.ms} if isinstance(item, Pause) else {"text": item} for item in items],
        "text": " ".join(item for item in items if isinstance(item, str)),
    })
