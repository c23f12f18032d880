"""`POST /v1/audio/speech`, OpenAI-compatible, streamed as it is synthesised.

Body: `model`, `input` (1..max_input_chars), `voice` (a voice, a preset, an OpenAI voice
name, or for a qwen3_tts Base model a library reference voice: gateway/clone_voices.py),
`response_format` (wav|pcm|flac|mp3|opus, default mp3 as OpenAI), `speed` (0.25..4.0),
`instructions` (a style for qwen3_tts CustomVoice models, the voice's description for
VoiceDesign ones, refused (400) by a model type without them; ignored by families without
instruction following, and the `X-Voxgate-Instructions: ignored` header says so),
`stream_format` (`audio`: encoded bytes, chunked as produced; `sse`:
`speech.audio.delta` events with base64 audio, then `speech.audio.done`),
`busy_timeout_ms` (Voxgate: wait at most this long for the model to find room; it can
only shorten the server's `busy_timeout_ms` and the model's own, then 503 `server_busy`),
`normalize` / `code` / `emoji` (Voxgate: how the text is read, gateway/text/options.py).
Those are every field OpenAI documents for the route and Voxgate's own; any other is a
400 naming it (`unknown field 'x'; ...`), so a misspelt option is not spoken with the
defaults in silence.

`POST /v1/audio/design` (`design`) is the same for a VoiceDesign model: `instruct`
(required) describes the voice, `stream: true` asks for the SSE form; 400 naming `instruct`
when it is missing, naming `model` when the model is not a VoiceDesign one. Without `model` it
uses `default_model` if that designs voices, else the one VoiceDesign model installed (none or
several: 400 naming `model`).

The input goes through the text frontend (markdown, SSML breaks, numbers, links; split
into sentences in the voice's language) and is spoken as one or more engine requests
played as one stream (gateway/stitch.py), so inputs past a family's own limit work.

The first chunk is awaited before the response starts, so any error up to then is a
proper JSON error; a client that disconnects cancels the request in the engine.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import time
from typing import Any, AsyncIterator

from starlette.requests import Request

from engine.types import AudioChunk, EngineError, InvalidInput
from gateway.access_log import fields, note
from gateway.audio import FORMATS, MEDIA_TYPES, StreamEncoder
from gateway.clone_voices import resolve_voice
from gateway.errors import ApiError, error_body, read_json
from gateway.models_api import model_type
from gateway.resident import Lease
from gateway.state import AppState
from gateway.stitch import Stitched, plan, request_chars, speech_options, spoken_items
from gateway.json_input import check_fields
from gateway.text import TEXT_FIELDS, TextOptions, check_input, parse_options as parse_text_options
from gateway.voices import Choice, check_speed, is_openai_model
from gateway.writes import ClosingStreamingResponse

log = logging.getLogger(__name__)

FAMILIES_WITH_INSTRUCTIONS: frozenset[str] = frozenset({"qwen3_tts"})  # they reach the engine as options
FAMILIES_WITH_SPEED: frozenset[str] = frozenset({"piper"})  # the speech LMs speak at their own pace
# OpenAI's fields for /v1/audio/speech (model, input, voice, instructions, response_format,
# speed, stream_format), then Voxgate's; /v1/audio/design adds its own two (and refuses
# `instructions` with a message of its own, below).
SPEECH_FIELDS: frozenset[str] = frozenset({"model", "input", "voice", "instructions", "response_format", "speed",
                                           "stream_format", "busy_timeout_ms", *TEXT_FIELDS})
DESIGN_FIELDS: frozenset[str] = SPEECH_FIELDS | {"instruct", "stream"}


def choice_field(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = data.get(key, default)
    if value is None:
        value = default
    if key == "response_format" and value == "aac":
        raise InvalidInput(f"response_format 'aac' is not offered (no AAC encoder is packaged); "
                           f"use one of {', '.join(allowed)}", field=key)
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(f"{key} must be one of {', '.join(allowed)}; got {value!r}", field=key)
    return value


async def speech(request: Request) -> ClosingStreamingResponse:
    return await speak(request)


async def design(request: Request) -> ClosingStreamingResponse:
    """`POST /v1/audio/design`: `/v1/audio/speech` for a VoiceDesign model, whose voice is made
    from `instruct` (required, a description of the voice); `stream: true` is `stream_format: "sse"`."""
    return await speak(request, design=True)


NO_INSTRUCT = ("instruct is required: a description of the voice to make (or a preset whose settings keep one as "
               "instructions)")


def _description(options: dict[str, Any]) -> bool:
    return bool(str(options.get("instructions") or "").strip())


async def speak(request: Request, design: bool = False) -> ClosingStreamingResponse:
    state: AppState = request.app.state.voxgate
    if state.draining:
        raise ApiError(503, "shutting_down", "server is shutting down", headers={"Retry-After": "5"})
    data = await read_json(request, state.settings.max_body_bytes)
    if design:
        check_fields(data, DESIGN_FIELDS, "/v1/audio/design")
    else:
        check_fields(data, SPEECH_FIELDS, "/v1/audio/speech")
    if "input" not in data:
        raise InvalidInput("input is required", field="input")
    check_input(data["input"], state.settings.max_input_chars, speakable=False)  # (read with its options below)
    fmt = choice_field(data, "response_format", FORMATS, "mp3")
    stream_format = choice_field(data, "stream_format", ("audio", "sse"), "audio")
    key = "instruct" if design else "instructions"
    instructions = data.get(key)
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInput(f"{key} must be a string", field=key)
    if design:
        if instructions is not None and not instructions.strip():
            raise InvalidInput("instruct is empty: describe the voice to make", field="instruct")
        if "instructions" in data:
            raise InvalidInput("/v1/audio/design takes the voice's description as instruct, not instructions",
                               field="instructions")
        stream = False if data.get("stream") is None else data["stream"]
        if not isinstance(stream, bool):
            raise InvalidInput("stream must be true or false", field="stream")
        stream_format = "sse" if stream else stream_format
    voice = data.get("voice")
    if isinstance(voice, dict):  # OpenAI's newer form: {"id": "..."}, and only that (as the body's fields)
        if not isinstance(voice.get("id"), str):
            raise InvalidInput('voice as an object must be {"id": "<voice>"}', field="voice.id")
        if extra := set(voice) - {"id"}:
            field = f"voice.{min(extra)}"
            raise InvalidInput(f"unknown field {field[:80]!r}; voice as an object takes only id", field=field)
        voice = voice["id"]
    if voice is not None and not isinstance(voice, str):
        raise InvalidInput("voice must be a string", field="voice")
    if voice is not None and not voice.strip():  # spoke in the default voice (found by a new-user trial)
        raise InvalidInput("voice is empty: name a voice or preset, or leave voice out for the model's default",
                           field="voice")
    if data.get("speed") is not None:
        check_speed(data["speed"])
    busy_timeout_ms = data.get("busy_timeout_ms")  # may only shorten the server's and the model's
    if busy_timeout_ms is not None and (not isinstance(busy_timeout_ms, (int, float))
                                        or isinstance(busy_timeout_ms, bool) or busy_timeout_ms < 0):
        raise InvalidInput("busy_timeout_ms must be a number >= 0", field="busy_timeout_ms")
    parse_text_options(data, TextOptions())  # (their defaults are the model's: applied once it is known)
    # The request's own fields are checked above, before the server's models (as /v1/audio/clone does);
    # a missing instruct too, unless the voice is a preset keeping a description (if the preset applies).
    preset = await state.library.find_preset(voice) if design and voice else None  # (in any case, as resolve)
    if design and instructions is None and not _description(preset["settings"] if preset else {}):
        raise InvalidInput(NO_INSTRUCT, field="instruct")
    model = data.get("model")
    if design and (model is None or is_openai_model(model)) and preset is None:
        model = await design_model(state)  # (a preset names its own model)
    elif design and preset is None and isinstance(model, str) and await state.library.get_model(model):
        await check_voice_design(state, model)  # before its voices: a Base model's asks for a reference voice
    choice = await resolve_voice(state, model=model, voice=voice, speed=data.get("speed"))
    if design:
        if instructions is None and not _description(choice.options):  # the model's own voice of that name won
            raise InvalidInput(NO_INSTRUCT, field="instruct")
        await check_voice_design(state, choice.model_id, choice.preset if not data.get("model") else None)
    if instructions and choice.family in FAMILIES_WITH_INSTRUCTIONS:
        choice = dataclasses.replace(choice, options={**choice.options, "instructions": instructions})
    return await stream_speech(state, choice, data, fmt, stream_format, busy_timeout_ms, instructions)


async def stream_speech(state: AppState, choice: Choice, data: dict[str, Any], fmt: str, stream_format: str,
                        busy_timeout_ms: float | None = None, instructions: str | None = None, *,
                        field: str = "input", emoji_field: str = "emoji") -> ClosingStreamingResponse:
    """Speak `data["input"]` (text options from `data`) with `choice` as a streamed response:
    `fmt` audio bytes, or SSE events when `stream_format` is `sse` (/v1/audio/speech's body,
    which /v1/audio/clone shares: its text is `field` there, and its emoji option the server's,
    `emoji_field`). Raises ApiError/EngineError before the first byte."""
    options = await speech_options(state, choice, data)
    items = await spoken_items(data["input"], options, field, emoji_field, state.settings.first_segment_chars)
    arrival_s = time.monotonic()
    # The lease keeps the model resident (never evicted) until the stream ends.
    lease = await state.residency.acquire(choice.model_id, busy_timeout_ms)
    audio = Stitched(state.engine, choice, plan(items, request_chars(lease.runner)), state.settings.ttfa_target_ms,
                     arrival_s=arrival_s)
    try:
        first = await audio.start()
    except BaseException:
        lease.release()
        raise

    headers = {"X-Request-Id": audio.request_id, "X-Voxgate-Model": choice.model_id,
               "X-Voxgate-Voice": choice.voice}
    if choice.preset:  # `voice` named a speaker preset: its model, voice, speed and settings applied
        headers["X-Voxgate-Preset"] = choice.preset
    if instructions and choice.family not in FAMILIES_WITH_INSTRUCTIONS:
        headers["X-Voxgate-Instructions"] = "ignored"
    if choice.speed != 1.0 and choice.family not in FAMILIES_WITH_SPEED:
        headers["X-Voxgate-Speed"] = "ignored"
    encoder = StreamEncoder(fmt, first.sample_rate)
    log.debug("request %s: %s/%s %d segments -> %s (%s)", audio.request_id, choice.model_id,
              choice.voice, sum(isinstance(item, str) for item in items), fmt, stream_format)
    note(model=choice.model_id, voice=choice.voice, preset=choice.preset,
         format=fmt if stream_format == "audio" else f"{fmt}/sse")
    body = _audio_body(state, audio, first, encoder, lease)

    def on_close() -> None:  # also when the response is abandoned (gateway/writes.py)
        audio.cancel()
        lease.release()

    if stream_format == "sse":
        return ClosingStreamingResponse(_sse(body, len(data["input"]), encoder), on_close,
                                        media_type="text/event-stream", headers=headers)
    return ClosingStreamingResponse(_plain(body, audio.request_id), on_close, media_type=MEDIA_TYPES[fmt],
                                    headers=headers)


async def design_model(state: AppState) -> str:
    """The model `/v1/audio/design` uses when its body names none (or an OpenAI model name): the
    server's `default_model` if it is a VoiceDesign one, else the one VoiceDesign model installed.
    InvalidInput naming `model` when none is installed, or several are (the request must say which)."""
    if await is_voice_design(state, state.settings.default_model):
        return state.settings.default_model
    names = [str(r["id"]) for r in await state.library.list_models()
             if r["family"] == "qwen3_tts" and await model_type(r) == "voice_design"]
    if len(names) == 1:
        return names[0]
    if names:
        raise InvalidInput(f"model is required here: several VoiceDesign models are installed ({', '.join(names)}) "
                           "and the default model is none of them; name one as model", field="model")
    raise InvalidInput(f"model is required: /v1/audio/design needs a VoiceDesign model (a qwen3_tts model of type "
                       f"voice_design), none is installed, and the default model {state.settings.default_model!r} "
                       "cannot design voices (docs/qwen3_tts.md says where to get one)", field="model")


async def is_voice_design(state: AppState, model_id: str) -> bool:
    record = await state.library.get_model(model_id)
    return record is not None and record["family"] == "qwen3_tts" and await model_type(record) == "voice_design"


async def check_voice_design(state: AppState, model_id: str, preset: str | None = None) -> None:
    """InvalidInput naming `model` unless `model_id` is a Qwen3-TTS VoiceDesign model; naming `voice`
    where a `preset` (its name) chose the model (a request without `model` was told its `model` was
    wrong: found by a new-user trial)."""
    if not await is_voice_design(state, model_id):
        whose = f"preset {preset!r} uses model {model_id!r}, which" if preset else f"model {model_id!r}"
        raise InvalidInput(f"{whose} is not a VoiceDesign model (a qwen3_tts model of type voice_design); "
                           "/v1/audio/design needs one", field="voice" if preset else "model")


async def _audio_body(state: AppState, audio: Stitched, first: AudioChunk, encoder: StreamEncoder,
                      lease: Lease) -> AsyncIterator[bytes]:
    t_start = time.monotonic()
    model_id = lease.model_id
    state.metrics.observe_first_chunk(model_id, 1000.0 * (t_start - audio.arrival_s))
    noted = fields()  # the access line's (gateway/access_log.py), kept up to date: a cut stream's too
    noted["ttfa_ms"] = 1000.0 * (t_start - audio.arrival_s)
    audio_ms = 0.0
    stalls = 0
    late_ms = 0.0
    engine_request = ""  # the engine request of the last chunk
    try:
        async for chunk in audio:
            audio_ms += chunk.duration_ms
            stalls += chunk.late_ms > 0
            late_ms += chunk.late_ms
            noted.update(audio_ms=audio_ms, stalls=stalls, stall_ms=late_ms if stalls else None)
            if chunk.request_id == engine_request:  # a request's first chunk has no lateness of its own
                state.metrics.observe_chunk(model_id, chunk.late_ms)
            engine_request = chunk.request_id
            data = await encoder.feed_async(chunk.pcm)  # MP3/Opus/resampling in a thread (gateway/audio.py)
            if data:
                yield data
            if chunk.is_last:
                break
        tail = await encoder.close_async()
        if tail:
            yield tail
        state.metrics.observe_done(model_id, audio_ms, time.monotonic() - audio.arrival_s, stalls,
                                   ttfa_ms=1000.0 * (t_start - audio.arrival_s), late_ms=late_ms, source="speech")
    finally:
        await audio.aclose()
        lease.release()


async def _plain(body: AsyncIterator[bytes], request_id: str) -> AsyncIterator[bytes]:
    """Audio bytes; a failure after the first byte can only end the stream early."""
    try:
        async for data in body:
            yield data
    except EngineError as error:
        log.warning("request %s ended early: %s", request_id, error.message)
        note(cut=error.code)


async def _sse(body: AsyncIterator[bytes], input_chars: int, encoder: StreamEncoder) -> AsyncIterator[str]:
    """`speech.audio.delta` events, then `speech.audio.done` with `usage`: Voxgate has no
    token count for every family, so it reports characters in and audio out."""
    total = 0
    try:
        async for data in body:
            total += len(data)
            delta = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            yield f"data: {json.dumps(delta)}\n\n"
    except EngineError as error:
        note(cut=error.code)
        failure = {"type": "error", "error": error_body(error.code, error.message, error.field, error.status)["error"]}
        yield f"data: {json.dumps(failure)}\n\n"
        return
    usage = {"input_characters": input_chars, "output_bytes": total,
             "output_audio_ms": round(1000.0 * encoder.num_samples / encoder.out_rate, 1)}
    yield f"data: {json.dumps({'type': 'speech.audio.done', 'usage': usage})}\n\n"
