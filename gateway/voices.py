"""Which model, voice and settings a request means.

Resolution order for `voice`: a voice of the requested model, a speaker preset of that
name (its model, voice, speed and settings apply; a request's own `speed` replaces the
preset's), or an OpenAI voice name, which maps to the configured default voice so OpenAI
clients work unchanged. OpenAI model
names (`tts-1`, dated ones like `gpt-4o-mini-tts-2025-12-15`) map to the default model.

The vendor protocols (ElevenLabs, Cartesia) resolve with `resolve_vendor`: their model
ids map to the default model, and a voice id they send means the voice or preset of
that name, else the model's default voice (so a preset can be named after the id an
agent uses).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.types import InvalidInput, UnknownModel, UnknownVoice
from gateway.library import Library

OPENAI_MODELS = frozenset({"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-tts"})
OPENAI_VOICES = frozenset({
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
})
# ElevenLabs (eleven_flash_v2_5, ...) and Cartesia (sonic-3, ...) model ids.
VENDOR_MODEL_PREFIXES = ("eleven_", "sonic")
MIN_SPEED, MAX_SPEED = 0.25, 4.0
_DATED = re.compile(r"^(.+)-(\d{4}-\d{2}-\d{2}|\d{4})$")  # OpenAI's snapshots: -2025-03-20, and -1106 (tts-1-1106)


@dataclass(frozen=True, slots=True)
class Choice:
    model_id: str
    voice: str
    speed: float
    options: dict[str, Any] = field(default_factory=dict)
    preset: str | None = None
    family: str = ""


def is_openai_model(model: object) -> bool:
    """`tts-1`, `gpt-4o-mini-tts`, ... with or without a snapshot date (`-YYYY-MM-DD`, or `-MMDD` as in
    `tts-1-1106`)."""
    if not isinstance(model, str):
        return False
    dated = _DATED.match(model)
    return model in OPENAI_MODELS or (dated is not None and dated.group(1) in OPENAI_MODELS)


def model_alias(model_id: str, default_model: str) -> str:
    """The installed model a path's model id means: an OpenAI model name is `default_model`
    (as in requests), any other id itself. `GET /v1/models/{id}`, `/load` and `/unload` use it."""
    return default_model if is_openai_model(model_id) else model_id


def check_speed(speed: object, field_name: str = "speed") -> float:
    if isinstance(speed, bool) or not isinstance(speed, (int, float)):
        raise InvalidInput(f"{field_name} must be a number", field=field_name)
    if not MIN_SPEED <= float(speed) <= MAX_SPEED:
        raise InvalidInput(f"{field_name} must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}",
                           field=field_name)
    return float(speed)


def _shown(value: object, limit: int = 80) -> str:
    """`value` for an error message, cut at `limit` characters (an error must not echo a huge input)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def unknown_default_model(default_model: str, installed: str, asked: object = None,
                          field: str = "model") -> UnknownModel:
    """The 404 for a request that falls to `default_model` (it names no model, or `asked`, an
    OpenAI model name) when that model is not installed (removed while the server runs): it
    names the setting and its value, and how to change it; `field`: the request's model field."""
    means = f"{field} {_shown(asked)} means" if asked else f"a request without {field} uses"
    return UnknownModel(f"{means} the default_model setting, {_shown(default_model)}, which is not installed "
                        f"(installed: {installed or 'none'}); name a model, or set default_model "
                        "(VOXGATE_DEFAULT_MODEL, or default_model in the config file) to an installed one "
                        "and restart", field=field)


async def _unknown_model(library: Library, model: object, model_field: str) -> UnknownModel:
    known = ", ".join(m["id"] for m in await library.list_models())
    return UnknownModel(f"unknown model {_shown(model)}; installed: {known}", field=model_field)


async def resolve(library: Library, *, model: object, voice: object, speed: object | None,
                  default_model: str, default_voice: str, preset_may_switch_model: bool = False,
                  model_field: str = "model", voice_field: str = "voice") -> Choice:
    """Raises InvalidInput, UnknownModel or UnknownVoice naming the field: `model_field` and
    `voice_field` are what the request calls them (a vendor's `model_id`, `voice_id`). `model` None
    is the default model; an empty one is an InvalidInput (a client's bug, not a choice).

    A model's own voice wins over a preset of the same name. A preset applies when the
    request names no model, an OpenAI model name, or the preset's own model (or always,
    with `preset_may_switch_model`: a realtime session changing only its voice).
    """
    if model is not None and not isinstance(model, str):
        raise InvalidInput(f"{model_field} must be a string", field=model_field)
    if isinstance(model, str) and not model.strip():  # (it spoke with the default model: a client's unset variable)
        raise InvalidInput(f"{model_field} is empty: name a model, or leave {model_field} out (or null) for the "
                           f"default model, {default_model!r}", field=model_field)
    if voice is not None and not isinstance(voice, str):
        raise InvalidInput(f"{voice_field} must be a string", field=voice_field)
    speed_value = None if speed is None else check_speed(speed)
    explicit_model = bool(model) and not is_openai_model(model)
    model_id = str(model) if explicit_model else default_model
    record = await library.get_model(model_id)
    voices = await library.voices(model_id) if record is not None else []
    if voice and voice in voices:
        assert record is not None
        return Choice(model_id, voice, speed_value if speed_value is not None else 1.0, family=record["family"])

    if record is None and explicit_model and not preset_may_switch_model:  # (before a preset is judged against it)
        raise await _unknown_model(library, model, model_field)
    preset = await library.find_preset(voice) if voice else None
    if preset is not None:
        if explicit_model and preset["model_id"] != model_id and not preset_may_switch_model:
            raise InvalidInput(f"{voice!r} is a preset of model {preset['model_id']!r}, not of {model_id!r}; "
                               f"leave {model_field} out or name that model", field=voice_field)
        preset_model = await library.get_model(preset["model_id"])
        if preset_model is None:
            raise UnknownModel(f"preset {voice!r} uses model {preset['model_id']!r}, which is not installed; "
                               "edit or delete the preset", field=voice_field)
        return Choice(preset["model_id"], preset["voice"],
                      speed_value if speed_value is not None else float(preset["speed"]),
                      dict(preset["settings"]), preset=preset["name"], family=preset_model["family"])

    if record is None:
        if not explicit_model:  # no model of its own to name: the setting it fell to is the problem
            known = ", ".join(m["id"] for m in await library.list_models())
            raise unknown_default_model(default_model, known, model, model_field)
        raise await _unknown_model(library, model, model_field)
    model_default = default_voice if default_voice in voices else (voices[0] if voices else default_voice)
    if not voice or voice in OPENAI_VOICES:
        voice = model_default
    elif voice not in voices:
        presets = [p["name"] for p in await library.list_presets() if p["model_id"] == model_id]
        raise UnknownVoice(f"model {_shown(model_id)} has no voice or preset {_shown(voice)}; "
                           f"voices: {', '.join(voices)}" + (f"; presets: {', '.join(presets)}" if presets else ""),
                           field=voice_field)
    return Choice(model_id, voice, speed_value if speed_value is not None else 1.0, family=record["family"])


async def resolve_vendor(library: Library, *, model: object, voice: object, speed: object | None,
                         default_model: str, default_voice: str, voice_field: str) -> Choice:
    """A Choice for an ElevenLabs or Cartesia request (see the module docstring).

    `model`: a vendor id or none (the default model) or an installed model's id;
    `voice`: any string. Raises InvalidInput (bad speed; a preset of another model than
    `model`) or UnknownModel naming the vendor's field: `model_id` (both vendors call it so)
    or `voice_field` (ElevenLabs `voice_id`, Cartesia `voice.id`).
    """
    if model is None or model == "" or (isinstance(model, str) and model.startswith(VENDOR_MODEL_PREFIXES)):
        model = None
    if not isinstance(voice, str):
        voice = None
    try:
        choice = await resolve(library, model=model, voice=voice, speed=speed, default_model=default_model,
                               default_voice=default_voice, preset_may_switch_model=model is None,
                               model_field="model_id", voice_field=voice_field)
    except UnknownVoice:
        choice = await resolve(library, model=model, voice=None, speed=speed, default_model=default_model,
                               default_voice=default_voice, model_field="model_id", voice_field=voice_field)
    return choice
