"""Reference recordings (`/v1/voices/references`): named voices to clone, uploaded once.

  POST   /v1/voices/references               multipart: `name`, `transcript`, `audio` (a file:
                                             WAV, FLAC or Ogg, any rate, mono or stereo) -> 201
  GET    /v1/voices/references               all, by name
  GET    /v1/voices/references/{name}        one
  GET    /v1/voices/references/{name}/audio  the stored WAV (PCM16 mono 24 kHz)
  DELETE /v1/voices/references/{name}        204

A Qwen3-TTS Base model clones a voice from a few seconds of speech and what it says; the
recording is kept under `<data_dir>/references/` as a 24 kHz mono WAV (resampled with soxr,
stereo averaged), its row in `reference_voices` (migrations/0005_voices.sql). Limits: the
upload at most `MAX_UPLOAD_BYTES` (413), the audio `MIN_SECONDS`..`MAX_SECONDS` long (422),
the transcript 1..`MAX_TRANSCRIPT_CHARS` characters; a recording whose WAV would leave less
than `min_free_disk_mb` free is a 507 `insufficient_storage` (gateway/disk_space.py), nothing
written; a file soundfile cannot read, or one with samples that are not finite numbers, is a
400 `invalid_input` naming the field `audio`, and
a silent one (every sample 0 as PCM16) a 422 `audio_silent`. A name is unique (409); names follow presets'
rules, and a preset's name in any case is taken (409 `name_taken`, both ways); a reference voice that a
preset hides (one an older Voxgate saved under its name) is listed with `usable: false` and the `problem`.
These routes are a resource of their own, under `/v1/voices/` beside the model voices
of `/v1/audio/voices`, because a recording belongs to no model: any Base model can use it.
A Qwen3-TTS Base model speaks with them by name (`voice` in `/v1/audio/speech`,
`/v1/realtime`, `/v1/audio/clone` and presets: gateway/clone_voices.py); deleting one drops its
encoding from every loaded model's cache (models/qwen3_tts_references.py).
"""

from __future__ import annotations

import io
import os
import re
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from urllib.parse import quote
from pathlib import Path
from typing import AbstractSet, Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from engine.types import InvalidInput
from gateway.audio import MEDIA_TYPES, wav_header
from gateway.disk_space import check_disk, full_disk_error
from gateway.errors import ApiError
from gateway.library import Library
from gateway.state import AppState
from gateway.text import check_input
from gateway.voices import OPENAI_VOICES

SAMPLE_RATE = 24000  # what the 12 Hz speech tokenizer and speaker encoder read
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
MIN_SECONDS = 1.0
MAX_SECONDS = 30.0  # cloning needs a few seconds; the reference's frames lengthen every prompt
MAX_SAMPLE_RATE = 192_000  # a voice needs no more; what is decoded is bounded by MAX_SECONDS at this rate
MAX_TRANSCRIPT_CHARS = 1000
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9 _.\-]{0,62}[A-Za-z0-9_.\-])?")  # fullmatch: no newline after it
_FIELDS = {"name", "transcript", "audio"}


class ReferenceStore:
    """Rows of `reference_voices` and their WAV files (a row always has its file)."""

    def __init__(self, library: Library, folder: Path) -> None:
        self.library, self.folder = library, folder

    async def get(self, name: str) -> dict[str, Any] | None:
        async with self.library.db.execute("SELECT * FROM reference_voices WHERE name = ?", (name,)) as cur:
            row = await cur.fetchone()
        return dict(row) if row else None

    async def list(self) -> list[dict[str, Any]]:
        async with self.library.db.execute("SELECT * FROM reference_voices ORDER BY name") as cur:
            return [dict(row) for row in await cur.fetchall()]

    async def hidden(self) -> dict[str, str]:
        """The reference voices a preset hides, each with that preset's name. A request's `voice` finds
        a preset in any case before a reference voice (gateway/clone_voices.py); `create_reference` and
        POST /v1/presets refuse such a pair (409 `name_taken`), but an older Voxgate saved presets
        without that check. The preset is the one `Library.find_preset` finds (last here)."""
        async with self.library.db.execute(
                "SELECT r.name, p.name FROM reference_voices r JOIN presets p ON p.name = r.name COLLATE NOCASE"
                " ORDER BY r.name, p.name = r.name, p.name DESC") as cur:
            return {row[0]: row[1] for row in await cur.fetchall()}

    async def add(self, name: str, transcript: str, pcm16: bytes, source_name: str | None) -> dict[str, Any]:
        file = f"ref-{uuid.uuid4().hex[:12]}.wav"
        await run_in_threadpool(self._write, file, pcm16)
        row = {"name": name, "transcript": transcript, "sample_rate": SAMPLE_RATE, "audio_file": file,
               "audio_ms": 1000.0 * (len(pcm16) // 2) / SAMPLE_RATE, "source_name": source_name,
               "created_at": time.time()}
        try:
            async with self.library.transaction() as db:
                async with db.execute("SELECT 1 FROM reference_voices WHERE name = ?", (name,)) as cur:
                    if await cur.fetchone():
                        raise ApiError(409, "reference_exists", f"a reference voice {name!r} exists", field="name")
                await db.execute(
                    "INSERT INTO reference_voices (name, transcript, sample_rate, audio_ms, audio_file, source_name,"
                    " created_at) VALUES (:name, :transcript, :sample_rate, :audio_ms, :audio_file, :source_name,"
                    " :created_at)", row)
        except BaseException:
            (self.folder / file).unlink(missing_ok=True)
            raise
        return row

    def _write(self, file: str, pcm16: bytes) -> None:
        """The WAV file, atomically: a failed write leaves no partial file (a full disk: ApiError 507)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"{file}.part"
        try:
            with open(partial, "wb") as fh:
                fh.write(wav_header(SAMPLE_RATE, len(pcm16) // 2))
                fh.write(pcm16)
            os.replace(partial, self.folder / file)
        except BaseException as error:
            partial.unlink(missing_ok=True)
            raise full_disk_error(error) or error

    async def delete(self, name: str) -> bool:
        row = await self.get(name)
        if row is None:
            return False
        async with self.library.transaction() as db:
            cur = await db.execute("DELETE FROM reference_voices WHERE name = ?", (name,))
        if cur.rowcount:
            (self.folder / row["audio_file"]).unlink(missing_ok=True)
        return cur.rowcount > 0

    def path(self, row: dict[str, Any]) -> Path:
        return self.folder / str(row["audio_file"])

    def read_pcm16(self, row: dict[str, Any]) -> bytes:
        """The stored recording's PCM16 LE samples (the WAV after its header); OSError if it is gone."""
        return self.read_pcm16_at(self.path(row))

    @staticmethod
    def read_pcm16_at(path: Path) -> bytes:
        return path.read_bytes()[len(wav_header(SAMPLE_RATE, 0)):]


_BLOCK_SAMPLES = 1 << 20  # decoded a block at a time: at most this many samples (4 MB as float32)
_UNKNOWN_FRAMES = 1 << 62  # libsndfile's frame count for a stream that does not say its length


def _decode_mono(data: bytes, field: str) -> tuple[np.ndarray, int]:
    """(the audio mixed to mono float32, its rate), decoded a block at a time and no further than
    `MAX_SECONDS`: a compressed file holds far more audio than its size (a FLAC of a constant level,
    a few bytes a block: 89 KB held 10 minutes), and decoding it whole held all of it in memory
    before the length check (sf.read). ApiError 422 `audio_length` past the limit."""
    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            rate, channels, frames = f.samplerate, f.channels, f.frames
            if rate > MAX_SAMPLE_RATE:  # (655,350 Hz in 8 channels, 29 s: 152 MB and 2 s to decode and resample)
                raise InvalidInput(f"{field} is sampled at {rate} Hz; a reference is at most {MAX_SAMPLE_RATE} Hz "
                                   f"(it is resampled to {SAMPLE_RATE} Hz)", field=field)
            limit = int(MAX_SECONDS * rate) if rate > 0 else 0
            if limit < frames < _UNKNOWN_FRAMES:  # the header says so: refused unread
                raise ApiError(422, "audio_length", f"{field} is {frames / rate:.2f} s long; a reference must be "
                               f"{MIN_SECONDS:g} to {MAX_SECONDS:g} s", field=field)
            mono, read, block_frames = [], 0, max(1, _BLOCK_SAMPLES // channels)
            while (block := f.read(block_frames, dtype="float32", always_2d=True)).shape[0]:  # (not f.blocks():
                read += block.shape[0]  # it seeks to the end, which fails where the length is not known)
                if read > limit:
                    raise ApiError(422, "audio_length", f"{field} is longer than {MAX_SECONDS:g} s; a reference "
                                   f"must be {MIN_SECONDS:g} to {MAX_SECONDS:g} s", field=field)
                if not np.isfinite(block).all():  # (NaN cast to PCM16 is undefined: it was stored as silence)
                    raise InvalidInput(f"{field} has samples that are not finite numbers (NaN or infinity)",
                                       field=field)
                mono.append(block.mean(axis=1))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
        why = getattr(error, "error_string", None) or type(error).__name__  # not str(error): it names a BytesIO
        raise InvalidInput(f"{field} is not a readable WAV, FLAC, Ogg or MP3 file ({why})", field=field) from error
    return (np.concatenate(mono) if mono else np.zeros(0, dtype=np.float32)), rate


def to_pcm16(data: bytes, field: str = "audio") -> bytes:
    """An audio file's bytes -> PCM16 LE mono at 24 kHz. InvalidInput (naming `field`) if
    soundfile cannot read it or a sample is NaN or infinite; ApiError 422 if it is shorter or longer
    than the limits, or silent."""
    import soxr

    mono, rate = _decode_mono(data, field)
    seconds = mono.shape[0] / rate if rate else 0.0
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ApiError(422, "audio_length", f"{field} is {seconds:.2f} s long; a reference must be "
                       f"{MIN_SECONDS:g} to {MAX_SECONDS:g} s", field=field)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    pcm = (np.clip(mono, -1.0, 1.0) * 32767.0).round().astype("<i2")
    if not pcm.any():  # nothing of a voice to clone
        raise ApiError(422, "audio_silent", f"{field} is silent (every sample is 0); a reference must hold "
                       "the voice to clone", field=field)
    pcm16: bytes = pcm.tobytes()
    return pcm16


def _store(request: Request) -> ReferenceStore:
    state: AppState = request.app.state.voxgate
    return ReferenceStore(state.library, state.settings.data_dir / "references")


def hidden_problem(hidden_by: str | None) -> str | None:
    """Why a reference voice is not usable when preset `hidden_by` takes its name (`ReferenceStore.hidden`);
    None when no preset does. This list and a Base model's voices (GET /v1/audio/voices) say it."""
    return None if hidden_by is None else (
        f"preset {hidden_by!r} (saved by an older Voxgate) has this name, which requests get instead of this "
        "reference voice; delete that preset, or upload this recording again under another name")


def _public(row: dict[str, Any], hidden_by: str | None = None) -> dict[str, Any]:
    """`usable` false and the `problem` when preset `hidden_by` takes its name (`hidden_problem`),
    as a preset that a voice of its model hides is listed (gateway/presets.py)."""
    problem = hidden_problem(hidden_by)
    return {"name": row["name"], "object": "reference_voice", "transcript": row["transcript"],
            "sample_rate": row["sample_rate"], "audio_ms": round(row["audio_ms"], 1),
            "source_name": row["source_name"], "created_at": row["created_at"],
            "audio_url": f"/v1/voices/references/{quote(str(row['name']))}/audio",
            "usable": problem is None, "problem": problem}


def check_name(name: object) -> str:
    """`name` if it is a valid reference-voice or preset name, else InvalidInput naming `name`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput("name must be 1-64 characters of ASCII letters (A-Z, a-z), digits, space, '_', '.' and "
                           "'-', starting with a letter or digit and not ending with a space", field="name")
    return name


async def _existing(store: ReferenceStore, request: Request) -> dict[str, Any]:
    name = str(request.path_params["name"])
    row = await store.get(name)
    if row is None:
        raise ApiError(404, "reference_not_found", f"no reference voice {name!r}", field="name")
    return row


async def _bounded_body(request: Request, limit: int, field: str) -> AsyncGenerator[bytes, None]:
    """The request body, 413 naming `field` once more than `limit` bytes have come: a chunked
    upload (no Content-Length) stops there, not after spooling all of it to a temporary file."""
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise ApiError(413, "body_too_large", f"the upload is over {MAX_UPLOAD_BYTES} bytes", field=field)
        yield chunk


async def read_upload_form(request: Request, fields: AbstractSet[str], file_field: str, wanted: str) -> FormData:
    """A multipart body of `fields` with one recording in `file_field` (<= MAX_UPLOAD_BYTES); the caller
    closes it. 415 if not multipart (`wanted`: what to send), 413 naming `file_field` over the size,
    400 for a malformed body (naming `file_field`) or an unknown field (naming it)."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(415, "unsupported_media_type", f"send multipart/form-data with {wanted}", field="Content-Type")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_UPLOAD_BYTES + 64 * 1024:
        raise ApiError(413, "body_too_large", f"the upload is over {MAX_UPLOAD_BYTES} bytes", field=file_field)
    stream = _bounded_body(request, MAX_UPLOAD_BYTES + 64 * 1024, file_field)
    try:  # (Starlette's own request.form() bounds fields but spools a file part of any size to disk)
        async with aclosing(stream):
            form = await MultiPartParser(request.headers, stream, max_files=1, max_fields=len(fields) + 1,
                                         max_part_size=MAX_UPLOAD_BYTES).parse()
    except MultiPartException as error:  # a malformed body or a field over its limit
        raise InvalidInput(f"malformed multipart body: {error.message}", field=file_field) from error
    unknown = set(form.keys()) - fields
    if unknown:
        await form.close()
        raise InvalidInput(f"unknown field {min(unknown)!r}; send {', '.join(sorted(fields))}", field=min(unknown))
    return form


async def create_reference(request: Request) -> JSONResponse:
    form = await read_upload_form(request, _FIELDS, "audio", "name, transcript and audio")
    try:
        name = check_name(form.get("name"))
        if form.get("transcript") is None:
            raise InvalidInput("transcript is required: what the recording says", field="transcript")
        transcript = check_input(form.get("transcript"), MAX_TRANSCRIPT_CHARS, field="transcript")
        audio = form.get("audio")
        if not isinstance(audio, UploadFile):
            raise InvalidInput("audio must be a file part (a recording)", field="audio")
        data = await audio.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise ApiError(413, "body_too_large", f"audio is over {MAX_UPLOAD_BYTES} bytes", field="audio")
        source_name = audio.filename
    finally:
        await form.close()
    store = _store(request)
    if await store.get(name) is not None:
        raise ApiError(409, "reference_exists", f"a reference voice {name!r} exists", field="name")
    state: AppState = request.app.state.voxgate
    if name.lower() == "default" or name.lower() in OPENAI_VOICES:  # these names mean the default voice
        raise InvalidInput(f"{name!r} names the default voice on every route; choose another name", field="name")
    hiding = await state.library.find_preset(name)  # a preset of that name, in any case, would hide it
    if hiding is not None:
        raise ApiError(409, "name_taken", f"a preset is named {hiding['name']!r}; choose another name", field="name")
    pcm16 = await run_in_threadpool(to_pcm16, data)
    await run_in_threadpool(check_disk, store.folder, len(wav_header(SAMPLE_RATE, 0)) + len(pcm16),
                            state.settings.min_free_disk_mb, "audio")
    return JSONResponse(_public(await store.add(name, transcript, pcm16, source_name)), status_code=201)


async def list_references(request: Request) -> JSONResponse:
    store = _store(request)
    hidden = await store.hidden()
    return JSONResponse({"object": "list", "data": [_public(r, hidden.get(r["name"])) for r in await store.list()]})


async def get_reference(request: Request) -> JSONResponse:
    store = _store(request)
    row = await _existing(store, request)
    preset = await store.library.find_preset(str(row["name"]))  # as a request's `voice` finds it
    return JSONResponse(_public(row, preset["name"] if preset else None))


async def reference_audio(request: Request) -> Response:
    store = _store(request)
    row = await _existing(store, request)
    path = store.path(row)
    if not path.is_file():
        raise ApiError(404, "reference_audio_missing", f"the audio file of {row['name']!r} is gone", field="name")
    return FileResponse(path, media_type=MEDIA_TYPES["wav"], filename=f"{row['name']}.wav",
                        content_disposition_type="inline")


async def delete_reference(request: Request) -> Response:
    from models.qwen3_tts_references import ReferenceAudio, forget

    store = _store(request)
    name = str(request.path_params["name"])
    row = await store.get(name)
    try:  # the encodings of this audio go with it (no torch: a hash and a dict lookup per model)
        pcm16 = await run_in_threadpool(store.read_pcm16, row) if row else None
    except OSError:
        pcm16 = None
    if not await store.delete(name):
        raise ApiError(404, "reference_not_found", f"no reference voice {name!r}", field="name")
    if pcm16 is not None:
        forget(ReferenceAudio.from_pcm16(pcm16, None).sha256)
    return Response(status_code=204)
