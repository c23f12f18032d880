"""`POST /v1/audio/speech`, OpenAI-compatible, streamed as it is synthesised.

Body: `model`, `input` (1..max_input_chars), `voice` (a voice, a preset, or an OpenAI
voice name), `response_format` (wav|pcm|flac|mp3|opus, default mp3 as OpenAI),
`speed` (0.25..4.0), `instructions` (accepted; ignored by families without
instruction following, and the `X-Voxgate-Instructions: ignored` header says so),
`stream_format` (`audio`: encoded bytes, chunked as produced; `sse`:
`speech.audio.delta` events with base64 audio, then `speech.audio.done`),
`busy_timeout_ms` (Voxgate: wait at most this long for the model to find room; it can
only shorten the server's `busy_timeout_ms` and the model's own, then 503 `server_busy`).

The first chunk is awaited before the response starts, so any error up to then is a
proper JSON error; a client that disconnects cancels the request in the engine.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from typing import Any, AsyncIterator

from starlette.requests import Request

from engine.engine import AudioStream
from engine.types import AudioChunk, EngineError, InvalidInput, SpeechRequest
from gateway.audio import FORMATS, MEDIA_TYPES, StreamEncoder
from gateway.errors import ApiError, read_json
from gateway.residency import Lease
from gateway.state import AppState
from gateway.text import check_input, split_first, split_segments
from gateway.voices import resolve
from gateway.writes import ClosingStreamingResponse

log = logging.getLogger(__name__)

FAMILIES_WITH_INSTRUCTIONS: frozenset[str] = frozenset()


def _choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = data.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(f"{key} must be one of {', '.join(allowed)}; got {value!r}", field=key)
    return value


async def speech(request: Request) -> ClosingStreamingResponse:
    state: AppState = request.app.state.voxgate
    if state.draining:
        raise ApiError(503, "shutting_down", "server is shutting down", headers={"Retry-After": "5"})
    data = await read_json(request, state.settings.max_body_bytes)
    if "input" not in data:
        raise InvalidInput("input is required", field="input")
    text = check_input(data["input"], state.settings.max_input_chars)
    fmt = _choice(data, "response_format", FORMATS, "mp3")
    stream_format = _choice(data, "stream_format", ("audio", "sse"), "audio")
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInput("instructions must be a string", field="instructions")
    choice = await resolve(state.library, model=data.get("model"), voice=data.get("voice"),
                           speed=data.get("speed"), default_model=state.settings.default_model,
                           default_voice=state.settings.default_voice)
    busy_timeout_ms = data.get("busy_timeout_ms")  # may only shorten the server's and the model's
    if busy_timeout_ms is not None and (not isinstance(busy_timeout_ms, (int, float))
                                        or isinstance(busy_timeout_ms, bool) or busy_timeout_ms < 0):
        raise InvalidInput("busy_timeout_ms must be a number >= 0", field="busy_timeout_ms")
    # The lease keeps the model resident (never evicted) until the stream ends.
    lease = await state.residency.acquire(choice.model_id, busy_timeout_ms)
    spec = SpeechRequest(
        request_id=f"speech-{uuid.uuid4().hex[:16]}", model_id=choice.model_id,
        segments=tuple(split_first(split_segments(text), state.settings.first_segment_chars)),
        voice=choice.voice, speed=choice.speed, options=choice.options,
        ttfa_target_ms=state.settings.ttfa_target_ms)
    try:
        stream = state.engine.submit(spec)
    except BaseException:
        lease.release()
        raise
    try:
        first = await stream.__anext__()
    except BaseException:
        state.engine.cancel(spec.request_id)
        lease.release()
        raise

    headers = {"X-Request-Id": spec.request_id, "X-Voxgate-Model": choice.model_id,
               "X-Voxgate-Voice": choice.voice}
    if instructions and choice.family not in FAMILIES_WITH_INSTRUCTIONS:
        headers["X-Voxgate-Instructions"] = "ignored"
    encoder = StreamEncoder(fmt, first.sample_rate)
    log.info("request %s: %s/%s %d chars -> %s (%s)", spec.request_id, choice.model_id,
             choice.voice, len(text), fmt, stream_format)
    body = _audio_body(state, spec, stream, first, encoder, lease)

    def on_close() -> None:  # also when the response is abandoned (gateway/writes.py)
        if not stream.done:
            state.engine.cancel(spec.request_id)
        lease.release()

    if stream_format == "sse":
        return ClosingStreamingResponse(_sse(body), on_close, media_type="text/event-stream", headers=headers)
    return ClosingStreamingResponse(_plain(body, spec.request_id), on_close, media_type=MEDIA_TYPES[fmt],
                                    headers=headers)


async def _audio_body(state: AppState, spec: SpeechRequest, stream: AudioStream,
                      first: AudioChunk, encoder: StreamEncoder, lease: Lease) -> AsyncIterator[bytes]:
    t_start = time.monotonic()
    state.metrics.observe_first_chunk(spec.model_id, 1000.0 * (t_start - spec.arrival_s))
    audio_ms = 0.0
    stalls = 0
    late_ms = 0.0
    try:
        chunk: AudioChunk | None = first
        while chunk is not None:
            audio_ms += chunk.duration_ms
            stalls += chunk.late_ms > 0
            late_ms += chunk.late_ms
            data = encoder.feed(chunk.pcm)
            if data:
                yield data
            chunk = None if chunk.is_last else await stream.__anext__()
        tail = encoder.close()
        if tail:
            yield tail
        state.metrics.observe_done(spec.model_id, audio_ms, time.monotonic() - spec.arrival_s, stalls,
                                   ttfa_ms=1000.0 * (t_start - spec.arrival_s), late_ms=late_ms, source="speech")
    except StopAsyncIteration:
        tail = encoder.close()
        if tail:
            yield tail
    finally:
        if not stream.done:
            state.engine.cancel(spec.request_id)
        lease.release()


async def _plain(body: AsyncIterator[bytes], request_id: str) -> AsyncIterator[bytes]:
    """Audio bytes; a failure after the first byte can only end the stream early."""
    try:
        async for data in body:
            yield data
    except EngineError as error:
        log.warning("request %s ended early: %s", request_id, error.message)


async def _sse(body: AsyncIterator[bytes]) -> AsyncIterator[str]:
    total = 0
    try:
        async for data in body:
            total += len(data)
            delta = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            yield f"data: {json.dumps(delta)}\n\n"
    except EngineError as error:
        failure = {"type": "error", "error": {"code": error.code, "message": error.message, "field": error.field}}
        yield f"data: {json.dumps(failure)}\n\n"
        return
    yield f"data: {json.dumps({'type': 'speech.audio.done', 'usage': {'output_bytes': total}})}\n\n"
