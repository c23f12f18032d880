"""`POST /v1/audio/clone`: speech in the voice of a reference recording (Qwen3-TTS Base models).

Multipart form fields:
  `text`            what to say (1..max_input_chars), required
  `ref_audio`       a recording (a file part: WAV, FLAC or Ogg, any rate, mono or stereo,
                    1..30 s, at most 16 MiB: the limits of gateway/references.py), or
  `voice`           the name of a library reference voice (`/v1/voices/references`) instead;
                    exactly one of the two
  `ref_text`        what `ref_audio` says, required with it; with `voice`, it replaces the
                    stored transcript for this request
  `x_vector_only`   `true`: clone from the speaker embedding alone (qwen-tts's
                    `x_vector_only_mode`: no transcript needed, less like the recording)
  `model`           a qwen3_tts Base model (default: `default_model` if it is one, else the first
                    Base model by id; an OpenAI model name means the same)
  `response_format` wav|pcm|flac|mp3|opus (default mp3), `stream` `true`: SSE events as
                    `/v1/audio/speech`'s `stream_format: "sse"`
The response is `/v1/audio/speech`'s (gateway/speech.py `stream_speech`), with
`X-Voxgate-Voice` the reference voice's name (`upload` for an uploaded recording).

Errors (JSON, naming the field): 415 not multipart; 413 `ref_audio` over the size limit;
400 a missing `text` or one with nothing to say once read as `/v1/audio/speech` reads its
`input` (with the server's text options), neither or both of `ref_audio` and `voice`, a
missing `ref_text` (without `x_vector_only`), an `x_vector_only` that is not true or false,
an unreadable or empty `ref_audio` (or one with NaN samples), an unknown field; 422 `ref_audio` too
short, too long or silent;
404 an unknown `voice` or `model`; 400 naming `model` for a model that is not a Base one.
The recording is read into memory, resampled to 24 kHz and handed to the engine request;
nothing is written to disk, and the model's reference cache keeps its encoding by content.
"""

from __future__ import annotations

import dataclasses
import logging

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

from engine.types import InvalidInput, UnknownModel
from gateway.audio import FORMATS
from gateway.clone_voices import is_base, load_reference
from gateway.errors import ApiError
from gateway.references import MAX_TRANSCRIPT_CHARS, MAX_UPLOAD_BYTES, read_upload_form, to_pcm16
from gateway.speech import choice_field, stream_speech
from gateway.state import AppState
from gateway.stitch import SERVER_EMOJI
from gateway.text import check_input
from gateway.voices import Choice, is_openai_model
from gateway.writes import ClosingStreamingResponse
from models.qwen3_tts_references import ReferenceAudio

log = logging.getLogger(__name__)

FIELDS = frozenset({"text", "ref_audio", "voice", "ref_text", "x_vector_only", "model", "response_format", "stream"})
UPLOADED = "upload"  # the voice name of a request's own recording


def _text_field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{name} must be a text field, not a file", field=name)
    return value


async def _base_model(state: AppState, model: str | None) -> tuple[str, str]:
    """(model id, family) of the Base model to clone with: `model`, or without one (or with an OpenAI
    model name, which means `default_model` wherever a model is named: a 404 before, found by a new-user
    trial) `default_model` if it is a Base model, else the first Base model by id. UnknownModel or
    InvalidInput naming `model`."""
    if model and is_openai_model(model):
        model = state.settings.default_model if await is_base(state, state.settings.default_model) else None
    elif not model and await is_base(state, state.settings.default_model):
        model = state.settings.default_model
    if model:
        record = await state.library.get_model(model)
        if record is None:
            known = ", ".join(m["id"] for m in await state.library.list_models())
            raise UnknownModel(f"unknown model {model[:80]!r}; installed: {known}", field="model")
        if not await is_base(state, model):
            raise InvalidInput(f"model {model!r} is not a Base model (a qwen3_tts model of type base); "
                               "/v1/audio/clone needs one", field="model")
        return model, str(record["family"])
    for record in sorted(await state.library.list_models(), key=lambda m: str(m["id"])):
        if await is_base(state, str(record["id"])):
            return str(record["id"]), str(record["family"])
    raise InvalidInput("no Qwen3-TTS Base model is installed, and /v1/audio/clone needs one: add its folder on the "
                       "Library page or with `voxgate models add --family qwen3_tts --path DIR` (docs/qwen3_tts.md "
                       "says where to get one)", field="model")


async def _reference(state: AppState, form: FormData) -> ReferenceAudio:
    """The request's recording: an uploaded `ref_audio` with its `ref_text`, or a library `voice`."""
    audio, voice = form.get("ref_audio"), _text_field(form, "voice")
    ref_text, x_only = _text_field(form, "ref_text"), (_text_field(form, "x_vector_only") or "false").lower()
    if x_only not in ("true", "false"):
        raise InvalidInput("x_vector_only must be true or false", field="x_vector_only")
    if ref_text is not None:
        ref_text = check_input(ref_text, MAX_TRANSCRIPT_CHARS, field="ref_text")
    if x_only == "true":  # the speaker embedding alone: no transcript, none of the recording's codes
        if ref_text is not None:
            raise InvalidInput("x_vector_only=true takes no ref_text (it clones without a transcript)",
                               field="ref_text")
        reference = await _reference_audio(state, audio, voice, "")
        return dataclasses.replace(reference, transcript=None)
    return await _reference_audio(state, audio, voice, ref_text)


async def _reference_audio(state: AppState, audio: object, voice: str | None,
                           ref_text: str | None) -> ReferenceAudio:
    """An uploaded `audio` with `ref_text` (required), or the library voice `voice` (its own
    transcript unless `ref_text`)."""
    if audio is not None and voice:
        raise InvalidInput("give ref_audio or voice (a library reference voice), not both", field="ref_audio")
    if audio is None:
        if not voice:
            raise InvalidInput("ref_audio (a recording) or voice (a library reference voice) is required",
                               field="ref_audio")
        return await load_reference(state, voice, ref_text)
    if not isinstance(audio, UploadFile):
        raise InvalidInput("ref_audio must be a file part (a recording)", field="ref_audio")
    if ref_text is None:
        raise InvalidInput("ref_text is required with ref_audio: what the recording says (or x_vector_only=true)",
                           field="ref_text")
    data = await audio.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise ApiError(413, "body_too_large", f"ref_audio is over {MAX_UPLOAD_BYTES} bytes", field="ref_audio")
    if not data:
        raise InvalidInput("ref_audio is empty", field="ref_audio")
    pcm16 = await run_in_threadpool(to_pcm16, data, "ref_audio")
    return ReferenceAudio.from_pcm16(pcm16, ref_text, UPLOADED)


async def clone(request: Request) -> ClosingStreamingResponse:
    state: AppState = request.app.state.voxgate
    if state.draining:
        raise ApiError(503, "shutting_down", "server is shutting down", headers={"Retry-After": "5"})
    form = await read_upload_form(request, FIELDS, "ref_audio", "text, ref_audio and ref_text (or voice)")
    try:
        text = _text_field(form, "text")
        if text is None:
            raise InvalidInput("text is required", field="text")
        check_input(text, state.settings.max_input_chars, field="text", speakable=False)  # (read as speech reads it)
        fmt = choice_field({"response_format": _text_field(form, "response_format")}, "response_format", FORMATS,
                           "mp3")
        stream = (_text_field(form, "stream") or "false").lower()
        if stream not in ("true", "false"):
            raise InvalidInput("stream must be true or false", field="stream")
        reference = await _reference(state, form)  # the request's own fields first, then the server's models
        model_id, family = await _base_model(state, _text_field(form, "model"))
    finally:
        await form.close()
    choice = Choice(model_id, reference.name or UPLOADED, 1.0, {"reference": reference}, family=family)
    log.info("clone: %s with %s (%.1f s of reference)", model_id, choice.voice, reference.num_samples / 24000)
    return await stream_speech(state, choice, {"input": text}, fmt, "sse" if stream == "true" else "audio",
                               field="text", emoji_field=SERVER_EMOJI)
