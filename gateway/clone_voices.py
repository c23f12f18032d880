"""Library reference voices as voices of a Qwen3-TTS Base model (which speaks only in a cloned one).

`resolve_voice` is `gateway.voices.resolve` for the speech routes and realtime sessions (and
`resolve_vendor_voice` `resolve_vendor` for the ElevenLabs and Cartesia routes), plus:
a `voice` that is no voice or preset of a Base model but names a reference voice
(`/v1/voices/references`) means that recording, and so does a preset whose voice names one.
The recording reaches the family as `options["reference"]`, a
`models.qwen3_tts_references.ReferenceAudio` (PCM16 24 kHz, transcript, content hash), which its
`prepare` encodes once per model and content (models/qwen3_tts_spec.py). The engine request's
`voice` stays the reference's name, so logs and `X-Voxgate-Voice` say which voice spoke.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from engine.types import InvalidInput, UnknownVoice
from gateway.models_api import model_type
from gateway.library import Library
from gateway.references import ReferenceStore
from gateway.state import AppState
from gateway.voices import Choice, resolve, resolve_vendor
from models.qwen3_tts_references import ReferenceAudio


def store(state: AppState) -> ReferenceStore:
    return ReferenceStore(state.library, state.settings.data_dir / "references")


async def load_reference(state: AppState, name: str, transcript: str | None = None,
                         field: str = "voice") -> ReferenceAudio:
    """The stored reference voice `name` (its transcript, or `transcript` instead);
    UnknownVoice naming `field` if there is none (or its file is gone)."""
    references = store(state)
    row = await references.get(name)
    if row is None:
        raise UnknownVoice(f"no reference voice {name!r} (/v1/voices/references)", field=field)
    try:
        pcm16, sha256 = await run_in_threadpool(_recording, references.path(row), float(row["created_at"]))
    except OSError:
        raise UnknownVoice(f"the audio file of reference voice {name!r} is gone; upload it again",
                           field=field) from None
    return ReferenceAudio(pcm16, transcript or str(row["transcript"]), sha256, name)


async def check_still_stored(state: AppState, choice: Choice, field: str = "voice") -> None:
    """UnknownVoice naming `field` if `choice` speaks in a library reference voice that has been
    deleted since it was chosen: a realtime session kept speaking in a deleted voice, which every new
    REST request refused (found by a new-user trial). Asked before each engine request of a socket."""
    reference = choice.options.get("reference")
    if isinstance(reference, ReferenceAudio) and reference.name and await store(state).get(reference.name) is None:
        raise UnknownVoice(f"reference voice {reference.name!r} was deleted (/v1/voices/references); choose "
                           "another voice", field=field)


@functools.lru_cache(maxsize=16)  # <= 1.4 MB each (30 s at 24 kHz)
def _recording(path: Path, created_at: float) -> tuple[bytes, str]:
    """A stored recording's PCM16 and content hash, read and hashed once per upload (a new
    upload under the same name is a new row: another `created_at`). OSError if the file is gone."""
    pcm16 = ReferenceStore.read_pcm16_at(path)
    return pcm16, ReferenceAudio.from_pcm16(pcm16, None).sha256


async def is_base(state: AppState, model_id: str) -> bool:
    record = await state.library.get_model(model_id)
    return record is not None and await model_type(record) == "base"


async def with_reference(state: AppState, choice: Choice, field: str = "voice") -> Choice:
    """`choice` with its reference voice's recording in `options["reference"]` when its model is
    a Base one and its voice names a reference voice (the model's own `default` does not)."""
    if choice.family != "qwen3_tts" or "reference" in choice.options or not await is_base(state, choice.model_id):
        return choice
    if choice.voice in await state.library.voices(choice.model_id):  # its `default`: no recording
        raise InvalidInput(await no_default_message(state, choice.model_id, field), field=field)
    reference = await load_reference(state, choice.voice, field=field)
    return dataclasses.replace(choice, options={**choice.options, "reference": reference})


async def no_default_message(state: AppState, model_id: str, field: str = "voice") -> str:
    """Why a Base model was asked for no voice, its default or an OpenAI voice name: it has no
    default voice (it speaks only in a cloned one), so `field` must name a reference voice; the
    message lists those there are."""
    names = [str(row["name"]) for row in await store(state).list()]
    listed = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") if names else \
        "none yet: upload one with POST /v1/voices/references"
    return (f"model {model_id!r} is a Base model: it speaks only in a cloned voice and has no default voice; "
            f"{field} must name a reference voice (reference voices: {listed}), or clone from a recording "
            "with POST /v1/audio/clone")


async def unknown_reference_message(state: AppState, model_id: str, voice: str) -> str:
    """Why a Base model was asked for a voice that is no reference voice (nor a preset): its
    voices are the reference voices, which the message lists (not its own `default`)."""
    names = [str(row["name"]) for row in await store(state).list()]
    listed = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") if names else \
        "none yet: upload one with POST /v1/voices/references"
    presets = [p["name"] for p in await state.library.list_presets() if p["model_id"] == model_id]
    shown = voice if len(voice) <= 80 else voice[:80] + "…"
    return (f"model {model_id!r} is a Base model and has no reference voice or preset {shown!r}; "
            f"reference voices: {listed}" + (f"; presets: {', '.join(presets)}" if presets else ""))


async def resolve_voice(state: AppState, *, model: object, voice: object, speed: object | None,
                        preset_may_switch_model: bool = False) -> Choice:
    """`gateway.voices.resolve` with the server's defaults, where a Base model's voice may also
    be a reference voice (see the module docstring). Raises what `resolve` raises."""
    settings = state.settings
    try:
        choice = await resolve(state.library, model=model, voice=voice, speed=speed,
                               default_model=settings.default_model, default_voice=settings.default_voice,
                               preset_may_switch_model=preset_may_switch_model)
    except UnknownVoice as unknown:
        model_id = model if isinstance(model, str) and model else settings.default_model
        if not isinstance(voice, str) or not await is_base(state, model_id):
            raise
        if await store(state).get(voice) is None:  # (resolve's message lists the Base model's own `default`)
            raise UnknownVoice(await unknown_reference_message(state, model_id, voice),
                               field=unknown.field) from None
        choice = await resolve(state.library, model=model_id, voice=None, speed=speed,
                               default_model=settings.default_model, default_voice=settings.default_voice)
        choice = dataclasses.replace(choice, voice=voice)
    return await with_reference(state, choice)


async def check_preset_voice(state: AppState, model_id: str, voice: object, voices: list[str]) -> None:
    """A preset's voice: one of the model's, or for a Base model a reference voice; UnknownVoice
    or InvalidInput naming `voice`."""
    if isinstance(voice, str) and await is_base(state, model_id):  # only reference voices (not its `default`)
        if voice in voices:
            raise InvalidInput(f"model {model_id!r} is a Base model: it speaks only in a cloned voice; voice must "
                               "name a reference voice (/v1/voices/references)", field="voice")
        if await store(state).get(voice) is None:
            raise UnknownVoice(f"no reference voice {voice!r} for Base model {model_id!r} "
                               "(/v1/voices/references)", field="voice")
        return
    if voice in voices:
        return
    if not isinstance(voice, str):
        raise InvalidInput("voice must be a string", field="voice")
    raise UnknownVoice(f"model {model_id!r} has no voice {voice!r}; voices: {', '.join(voices)}", field="voice")


async def resolve_vendor_voice(state: AppState, *, model: object, voice: object, speed: object | None,
                               voice_field: str) -> Choice:
    """`gateway.voices.resolve_vendor` with the server's defaults, where a Base model's vendor
    voice id may name a reference voice (an ElevenLabs `voice_id`, a Cartesia `voice.id`: what
    `voice_field` names in errors). Raises what `resolve_vendor` raises, and UnknownVoice for a
    reference whose file is gone."""
    settings = state.settings
    choice = await resolve_vendor(state.library, model=model, voice=voice, speed=speed,
                                  default_model=settings.default_model, default_voice=settings.default_voice,
                                  voice_field=voice_field)
    if isinstance(voice, str) and voice and choice.voice != voice and choice.family == "qwen3_tts" \
            and await is_base(state, choice.model_id):  # an unknown vendor id fell back to the default
        if await store(state).get(voice) is None:
            raise UnknownVoice(f"no reference voice {voice!r} for Base model {choice.model_id!r} "
                               "(/v1/voices/references)", field=voice_field)
        choice = dataclasses.replace(choice, voice=voice)
    return await with_reference(state, choice, field=voice_field)


async def model_voices(state: AppState, record: dict[str, Any]) -> tuple[list[str], str]:
    """The voices a model speaks in, and their kind: a Base model's are the library reference
    voices ("reference"; its own `default` is no voice it can speak in), others' its own ("builtin")."""
    return await library_voices(state.library, state.settings.data_dir, record)


async def library_voices(library: Library, data_dir: Path, record: dict[str, Any]) -> tuple[list[str], str]:
    """`model_voices` without a server (`voxgate models add` and `list` say the same as the API)."""
    if record["family"] == "qwen3_tts" and await model_type(record) == "base":
        references = ReferenceStore(library, data_dir / "references")
        return [str(row["name"]) for row in await references.list()], "reference"
    return await library.voices(str(record["id"])), "builtin"
