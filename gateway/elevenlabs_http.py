"""ElevenLabs-compatible HTTP text-to-speech (protocols/vendors.md §3).

`POST /v1/text-to-speech/{voice_id}` and `.../stream`: audio in `output_format`
(query; default `mp3_44100_128`), streamed as it is synthesised. `.../with-timestamps`:
one JSON object `{"audio_base64", "alignment", "normalized_alignment"}`;
`.../stream/with-timestamps`: one such object per line (NDJSON) as audio is made.
`alignment = {"characters", "character_start_times_seconds",
"character_end_times_seconds"}`, in seconds from the start of the audio.
Body: `text` (required), `model_id` (vendor ids: the default model),
`voice_settings.speed`, `apply_text_normalization` (`off`: read as written); the other
fields ElevenLabs takes are accepted and ignored. The text is read and split like
`/v1/audio/speech`'s (gateway/vendor_http.py), long texts as several engine requests.
"""

from __future__ import annotations

import base64
import json
from typing import Any, AsyncIterator, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.types import EngineError, WordTiming
from gateway.clone_voices import resolve_vendor_voice
from gateway.elevenlabs import text_fields
from gateway.errors import ApiError, read_json
from gateway.state import AppState
from gateway.timings import char_times
from gateway.vendor_formats import OutputFormat, elevenlabs_format
from gateway.vendor_http import Speech, ended_early, speech_headers, start_speech
from gateway.writes import ClientGone, ClosingStreamingResponse, unless_disconnected


def alignment_seconds(words: Sequence[WordTiming], end_ms: float) -> dict[str, Any] | None:
    """The HTTP alignment (seconds from the start) of `words`, the last space up to `end_ms`."""
    if not words:
        return None
    times = char_times(words, 0.0, end_ms)
    return {"characters": list(times.chars),
            "character_start_times_seconds": [round(s / 1000, 4) for s in times.start_ms],
            "character_end_times_seconds": [round((s + d) / 1000, 4)
                                            for s, d in zip(times.start_ms, times.duration_ms)]}


async def _speak(request: Request) -> tuple[OutputFormat, Speech, dict[str, str]]:
    state: AppState = request.app.state.voxgate
    if state.draining:
        raise ApiError(503, "shutting_down", "server is shutting down", headers={"Retry-After": "5"})
    fmt = elevenlabs_format(request.query_params.get("output_format"))
    data = await read_json(request, state.settings.max_body_bytes)
    if "text" not in data:
        raise ApiError(400, "invalid_input", "text is required", field="text")
    settings = data.get("voice_settings")
    if settings is not None and not isinstance(settings, dict):
        raise ApiError(400, "invalid_input", "voice_settings must be an object", field="voice_settings")
    speed = settings.get("speed") if isinstance(settings, dict) else None
    try:
        choice = await resolve_vendor_voice(state, model=data.get("model_id"), voice=request.path_params["voice_id"],
                                            speed=speed, voice_field="voice_id")
    except EngineError as error:
        if error.field == "speed":
            error.field = "voice_settings.speed"
        raise
    fields = text_fields(data.get("apply_text_normalization", request.query_params.get("apply_text_normalization")))
    pieces = await start_speech(state, choice, data["text"], fmt, source="elevenlabs", field="text", data=fields)
    return fmt, pieces, speech_headers(pieces, choice)  # (X-Voxgate-Preset: a preset named as the voice_id)


async def _audio(pieces: Speech) -> AsyncIterator[bytes]:
    try:
        async for piece in pieces:
            if piece.data:
                yield piece.data
    except EngineError as error:  # (after the first chunk: the status is sent)
        ended_early(pieces, error)


async def convert(request: Request) -> Response:
    fmt, pieces, headers = await _speak(request)
    # Closing: the engine request is freed however the response ends (gateway/writes.py).
    return ClosingStreamingResponse(_audio(pieces), pieces.close, media_type=fmt.media_type, headers=headers)


stream = convert  # the same stream of audio bytes


async def _whole(pieces: Speech) -> tuple[bytes, list[WordTiming], float]:
    """All of `pieces`: the audio, its words, its end in ms; the speech is closed however it ends."""
    audio, words, end_ms = bytearray(), list[WordTiming](), 0.0
    try:
        async for piece in pieces:
            audio += piece.data
            words.extend(piece.words)
            end_ms = piece.end_ms
    finally:
        pieces.close()
    return bytes(audio), words, end_ms


async def with_timestamps(request: Request) -> Response:
    fmt, pieces, headers = await _speak(request)
    try:  # answered whole: a client that leaves meanwhile frees the engine at once
        audio, words, end_ms = await unless_disconnected(request.receive, _whole(pieces))
    except ClientGone:
        return Response(status_code=499, headers=headers)  # (nobody reads it; the access line says cut=)
    finally:
        pieces.close()  # (also where `_whole` was cancelled before it began)
    aligned = alignment_seconds(words, end_ms)
    return JSONResponse({"audio_base64": base64.b64encode(audio).decode("ascii"), "alignment": aligned,
                         "normalized_alignment": aligned}, headers=headers)


async def _lines(pieces: Speech) -> AsyncIterator[str]:
    try:
        async for piece in pieces:
            aligned = alignment_seconds(piece.words, piece.end_ms)
            if piece.data or aligned:
                yield json.dumps({"audio_base64": base64.b64encode(piece.data).decode("ascii"),
                                  "alignment": aligned, "normalized_alignment": aligned}) + "\n"
    except EngineError as error:
        ended_early(pieces, error)
        yield json.dumps({"error": error.code, "code": error.code, "message": error.message, "field": error.field,
                          "request_id": pieces.request_id}) + "\n"  # (the X-Request-Id the logs name)


async def stream_with_timestamps(request: Request) -> Response:
    _, pieces, headers = await _speak(request)
    return ClosingStreamingResponse(_lines(pieces), pieces.close, media_type="application/x-ndjson", headers=headers)
