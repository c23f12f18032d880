"""Studio takes (`/v1/takes`): an utterance kept with its settings, replayed or downloaded.

  POST   /v1/takes                   `Content-Type: audio/pcm`: the body is PCM16 LE mono, streamed
                                     to disk; text, model, voice, speed, sample_rate, ttfa_ms,
                                     stalls in the query string -> 201 the take
                                     or JSON (small takes): the same fields + audio (base64 PCM16)
  GET    /v1/takes                   newest first (`?limit=N`, 1-1000, default 100), with `total`:
                                     how many takes there are (more than listed: the page says so)
  GET    /v1/takes/{id}              one take
  GET    /v1/takes/{id}/audio        `?format=wav|mp3|flac` (default wav)
  DELETE /v1/takes/{id}              204

The browser uploads what it received over /v1/realtime, with the `ttfa_ms` and `stalls`
of that utterance's `utterance.done` (either null, or left out, when unknown: a take that ended
early has none; its TTFA is then the page's own measure): the server keeps no audio of realtime sessions, so
agents' sessions cost nothing and the studio keeps exactly the audio it played.

The audio is stored as a PCM16 WAV file under `<data_dir>/takes/`, not as a BLOB: the
library's one SQLite connection is shared by every request, and multi-megabyte BLOB
writes and reads would hold it; a file is also served with Range requests, which the
page's `<audio>` element uses to seek. A file is written under a temporary name and
renamed before its row is inserted, and deleted after its row, so a row always has a file.
A kill can leave a `.wav.part` (mid-upload) or a `.wav` without a row (between the rename
and the insert): `TakeStore.sweep()` removes both at start.

An upload as `audio/pcm` is written to disk piece by piece as it arrives, in a worker
thread, so a take costs no more memory than one network read and never blocks the event
loop; the JSON form holds the whole body (base64) and is limited to MAX_TAKE_JSON_BYTES.
Either is refused (507) where it would leave less than `min_free_disk_mb` free (gateway/disk_space.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import IO, Any, AsyncIterator

import numpy as np
from slugify import slugify
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from engine.types import InvalidInput, UnknownModel
from gateway.audio import MEDIA_TYPES, encode_whole, wav_header
from gateway.disk_space import check_disk, full_disk_error
from gateway.errors import ApiError, read_json
from gateway.json_input import finite_number
from gateway.library import Library
from gateway.realtime import SAMPLE_RATES
from gateway.state import AppState
from gateway.stitch import SERVER_EMOJI, model_options, spoken_items
from gateway.strays import remove_strays
from gateway.text import check_input
from gateway.voices import check_speed, model_alias

MAX_TAKE_AUDIO_BYTES = 64 * 1024 * 1024  # PCM16: about 23 minutes at 24 kHz
MAX_TAKE_JSON_BYTES = 8 * 1024 * 1024  # base64 audio of ~2 minutes at 24 kHz; larger: send audio/pcm
DOWNLOAD_FORMATS = ("wav", "mp3", "flac")
_FIELDS = frozenset({"text", "model", "voice", "speed", "sample_rate", "ttfa_ms", "stalls", "audio"})
_NUMBER_FIELDS = frozenset({"speed", "sample_rate", "ttfa_ms", "stalls"})
_TAKE_ID = re.compile(r"^take-[0-9a-f]{12}$")
_WAV_HEADER_BYTES = 44

log = logging.getLogger(__name__)


def _finish_wav(fh: IO[bytes], sample_rate: int, num_samples: int) -> None:
    """Write the real sizes into the header of a WAV whose samples are all written, and sync it."""
    fh.seek(0)
    fh.write(wav_header(sample_rate, num_samples))
    fh.flush()
    os.fsync(fh.fileno())


class TakeStore:
    """Rows in the `takes` table (migrations/0002_takes.sql) and their WAV files."""

    def __init__(self, library: Library, folder: Path) -> None:
        self.library = library
        self.folder = folder

    async def add(self, take: dict[str, Any], pcm16: bytes) -> dict[str, Any]:
        take_id = f"take-{uuid.uuid4().hex[:12]}"
        name = f"{take_id}.wav"
        await run_in_threadpool(self._write, name, take["sample_rate"], pcm16)
        return await self._insert(take, take_id, name, len(pcm16))

    async def _insert(self, take: dict[str, Any], take_id: str, name: str, num_bytes: int) -> dict[str, Any]:
        row = {**take, "id": take_id, "audio_file": name, "created_at": time.time(),
               "audio_ms": 1000.0 * (num_bytes // 2) / take["sample_rate"]}
        try:
            async with self.library.transaction() as db:
                await db.execute(
                    "INSERT INTO takes (id, text, model_id, voice, speed, sample_rate, ttfa_ms, stalls,"
                    " audio_ms, audio_file, created_at) VALUES (:id, :text, :model_id, :voice, :speed,"
                    " :sample_rate, :ttfa_ms, :stalls, :audio_ms, :audio_file, :created_at)", row)
        except BaseException:
            (self.folder / name).unlink(missing_ok=True)
            raise
        return row

    def _write(self, name: str, sample_rate: int, pcm16: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"{name}.part"
        try:
            with open(partial, "wb") as fh:
                fh.write(wav_header(sample_rate, len(pcm16) // 2))
                fh.write(pcm16)
                os.fsync(fh.fileno())
            os.replace(partial, self.folder / name)
        except BaseException as error:  # (a full disk is a 507, as check_disk's; no partial file stays)
            partial.unlink(missing_ok=True)
            raise full_disk_error(error) or error

    async def add_stream(self, take: dict[str, Any], chunks: AsyncIterator[bytes],
                         max_bytes: int = MAX_TAKE_AUDIO_BYTES) -> dict[str, Any]:
        """Like `add`, with the PCM16 arriving in pieces: each is written as it comes, off the loop.

        ApiError 413 past `max_bytes`, InvalidInput for no audio or half a sample; the
        partial file is removed whatever ends the upload early (a disconnect too).
        """
        take_id = f"take-{uuid.uuid4().hex[:12]}"
        name = f"{take_id}.wav"
        partial = self.folder / f"{name}.part"
        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)
        fh = await asyncio.to_thread(open, partial, "wb")
        num_bytes = 0
        try:
            try:
                await asyncio.to_thread(fh.write, wav_header(take["sample_rate"], 0))  # sizes set at the end
                async for piece in chunks:
                    num_bytes += len(piece)
                    if num_bytes > max_bytes:
                        raise ApiError(413, "audio_too_large", f"audio is over {max_bytes} bytes", field="audio")
                    if piece:
                        await asyncio.to_thread(fh.write, piece)
                if num_bytes < 2 or num_bytes % 2:
                    why = "is empty" if not num_bytes else "must hold whole 16-bit samples (PCM16 LE mono)"
                    raise InvalidInput(f"audio {why}", field="audio")
                await asyncio.to_thread(_finish_wav, fh, take["sample_rate"], num_bytes // 2)
            finally:
                await asyncio.to_thread(fh.close)
            await asyncio.to_thread(os.replace, partial, self.folder / name)
        except BaseException as error:
            await asyncio.to_thread(partial.unlink, missing_ok=True)
            raise full_disk_error(error) or error
        return await self._insert(take, take_id, name, num_bytes)

    async def sweep(self) -> tuple[int, int]:
        """Remove partial uploads and WAV files without a row (left by a kill); returns both counts.

        Only a server's start-up calls this, inside the data dir's exclusive lock
        (gateway/server_lock.py `serving`, taken before gateway/app.py's start-up work), so no
        other live process can be writing a `.part` here: a second server on the data dir is
        refused before it gets this far, and the one holding the lock has not started serving.
        """
        if not self.folder.is_dir():
            return 0, 0
        async with self.library.db.execute("SELECT audio_file FROM takes") as cur:
            kept = {row[0] for row in await cur.fetchall()}

        partials, orphans = await asyncio.to_thread(remove_strays, self.folder, kept)
        if partials or orphans:
            log.info("takes: removed %d partial upload(s) and %d file(s) without a row", partials, orphans)
        return partials, orphans

    async def list(self, limit: int) -> list[dict[str, Any]]:
        async with self.library.db.execute(
                "SELECT * FROM takes ORDER BY created_at DESC, id LIMIT ?", (limit,)) as cur:
            return [dict(row) for row in await cur.fetchall()]

    async def count(self) -> int:
        async with self.library.db.execute("SELECT COUNT(*) FROM takes") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def get(self, take_id: str) -> dict[str, Any] | None:
        async with self.library.db.execute("SELECT * FROM takes WHERE id = ?", (take_id,)) as cur:
            row = await cur.fetchone()
        return dict(row) if row else None

    async def delete(self, take_id: str) -> bool:
        take = await self.get(take_id)
        if take is None:
            return False
        async with self.library.transaction() as db:
            cur = await db.execute("DELETE FROM takes WHERE id = ?", (take_id,))
        if cur.rowcount:
            (self.folder / take["audio_file"]).unlink(missing_ok=True)
        return cur.rowcount > 0

    def path(self, take: dict[str, Any]) -> Path:
        return self.folder / str(take["audio_file"])


def _store(request: Request) -> tuple[AppState, TakeStore]:
    state: AppState = request.app.state.voxgate
    return state, TakeStore(state.library, state.settings.data_dir / "takes")


def _public(take: dict[str, Any]) -> dict[str, Any]:
    return {"id": take["id"], "object": "take", "text": take["text"], "model": take["model_id"],
            "voice": take["voice"], "speed": take["speed"], "sample_rate": take["sample_rate"],
            "ttfa_ms": take["ttfa_ms"], "stalls": take["stalls"], "audio_ms": round(take["audio_ms"], 1),
            "created_at": take["created_at"], "audio_url": f"/v1/takes/{take['id']}/audio"}


def _number(data: dict[str, Any], key: str, *, integer: bool = False, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    number = finite_number(value)
    if number is None or number < 0 or (integer and not isinstance(value, int)) or number > 1e12:
        kind = "an integer" if integer else "a number"
        raise InvalidInput(f"{key} must be {kind} >= 0{' or null' if optional else ''}", field=key)
    return value


async def _validated(state: AppState, data: dict[str, Any], fields: frozenset[str] = _FIELDS) -> dict[str, Any]:
    """The take's row fields from `data` (JSON or query parameters), checked; not its audio."""
    unknown = set(data) - fields
    if unknown:
        field = min(unknown)
        raise InvalidInput(f"unknown field {field!r}; takes have {', '.join(sorted(fields))}", field=field)
    text = data.get("text")
    check_input(text, state.settings.max_input_chars, field="text", speakable=False)
    model_id = data.get("model")
    if not isinstance(model_id, str) or not model_id:
        raise InvalidInput("model is required: the id of the model that spoke the take", field="model")
    model_id = model_alias(model_id, state.settings.default_model)  # tts-1: the default model, as in speech
    if await state.library.get_model(model_id) is None:
        raise UnknownModel(f"unknown model {model_id[:80]!r}", field="model")
    assert isinstance(text, str)
    # What speech would say something for (the server's text options), as it was said.
    await spoken_items(text, await model_options(state, model_id), "text", SERVER_EMOJI)
    voice = data.get("voice")
    if not isinstance(voice, str) or not voice.strip() or len(voice) > 128:
        raise InvalidInput("voice must be a voice or preset name (1-128 characters)", field="voice")
    speed = check_speed(data.get("speed", 1.0))
    sample_rate = data.get("sample_rate")
    if sample_rate not in SAMPLE_RATES or isinstance(sample_rate, bool):
        rates = ", ".join(map(str, SAMPLE_RATES))
        raise InvalidInput(f"sample_rate is required: one of {rates}" if sample_rate is None
                           else f"sample_rate must be one of {rates}", field="sample_rate")
    ttfa_ms = _number(data, "ttfa_ms", optional=True)
    stalls = _number(data, "stalls", integer=True, optional=True)  # (null or left out: unknown, as ttfa_ms)
    return {"text": text, "model_id": model_id, "voice": voice, "speed": speed, "sample_rate": sample_rate,
            "ttfa_ms": ttfa_ms, "stalls": stalls}


def _audio(data: dict[str, Any]) -> bytes:
    audio = data.get("audio")
    if not isinstance(audio, str) or not audio:
        raise InvalidInput("audio must be base64 PCM16 little-endian mono", field="audio")
    try:
        pcm16 = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidInput(f"audio is not valid base64: {error}", field="audio") from error
    if len(pcm16) < 2 or len(pcm16) % 2:
        raise InvalidInput("audio must hold whole 16-bit samples", field="audio")
    if len(pcm16) > MAX_TAKE_AUDIO_BYTES:
        raise ApiError(413, "audio_too_large", f"audio is over {MAX_TAKE_AUDIO_BYTES} bytes", field="audio")
    return pcm16


def _from_query(request: Request) -> dict[str, Any]:
    """Query parameters as the JSON form's types (numbers parsed; a bad one names its field)."""
    data: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if key in data:
            raise InvalidInput(f"{key} is given twice", field=key)
        if key in _NUMBER_FIELDS:
            try:
                data[key] = int(value) if key in ("sample_rate", "stalls") else float(value)
            except ValueError:
                raise InvalidInput(f"{key} must be a number, got {value[:40]!r}", field=key) from None
        else:
            data[key] = value
    return data


def _take_id(request: Request) -> str:
    take_id = str(request.path_params["take_id"])
    if not _TAKE_ID.match(take_id):
        raise ApiError(404, "take_not_found", f"no take {take_id!r}", field="id")
    return take_id


async def _existing(store: TakeStore, request: Request) -> dict[str, Any]:
    take_id = _take_id(request)
    take = await store.get(take_id)
    if take is None:
        raise ApiError(404, "take_not_found", f"no take {take_id!r}", field="id")
    return take


async def create_take(request: Request) -> JSONResponse:
    state, store = _store(request)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "audio/pcm":
        take = await _validated(state, _from_query(request), _FIELDS - {"audio"})
        length = request.headers.get("content-length", "")  # (without one, the most a take may be)
        expected = int(length) if length.isdigit() else MAX_TAKE_AUDIO_BYTES
        if expected > MAX_TAKE_AUDIO_BYTES:  # (refused unread: it was read, and written, up to the limit first)
            raise ApiError(413, "audio_too_large", f"audio is over {MAX_TAKE_AUDIO_BYTES} bytes", field="audio")
        await run_in_threadpool(check_disk, store.folder, expected, state.settings.min_free_disk_mb)
        row = await store.add_stream(take, request.stream())
    else:  # JSON, or read_json's 415 naming both forms
        data = await read_json(request, MAX_TAKE_JSON_BYTES)
        take = await _validated(state, data)
        pcm16 = _audio(data)
        await run_in_threadpool(check_disk, store.folder, len(pcm16), state.settings.min_free_disk_mb)
        row = await store.add(take, pcm16)
    return JSONResponse(_public(row), status_code=201)


async def list_takes(request: Request) -> JSONResponse:
    _, store = _store(request)
    raw = request.query_params.get("limit", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise InvalidInput("limit must be an integer from 1 to 1000", field="limit")
    # `total`: the studio listed the newest 100 and said nothing of the others (still on disk, out of
    # its reach: found by a studio-user trial).
    data = [_public(t) for t in await store.list(int(raw))]
    return JSONResponse({"object": "list", "data": data, "total": await store.count()})


async def get_take(request: Request) -> JSONResponse:
    _, store = _store(request)
    return JSONResponse(_public(await _existing(store, request)))


async def take_audio(request: Request) -> Response:
    _, store = _store(request)
    fmt = request.query_params.get("format", "wav")
    if fmt not in DOWNLOAD_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(DOWNLOAD_FORMATS)}; got {fmt!r}", field="format")
    take = await _existing(store, request)
    path = store.path(take)
    if not path.is_file():
        raise ApiError(404, "take_audio_missing", f"the audio file of {take['id']} is gone", field="id")
    filename = download_name(take, fmt)
    if fmt == "wav":  # served from disk, with Range for seeking
        return FileResponse(path, media_type=MEDIA_TYPES["wav"], filename=filename, content_disposition_type="inline")
    data = await run_in_threadpool(_encode, path, take["sample_rate"], fmt)
    return Response(data, media_type=MEDIA_TYPES[fmt],
                    headers={"Content-Disposition": f'inline; filename="{filename}"'})


def download_name(take: dict[str, Any], fmt: str) -> str:
    """A take's file name: the first words of its text, its voice and its id, `_` between them, e.g.
    `hello-there_default_take-1a2b3c4d5e6f.wav` (it was `take-<id>.wav`, which said nothing of what it
    holds: new-user trial). The words are python-slugify's (text-unidecode's transliteration to ASCII,
    lower case, `-` between words, whole words up to 40 characters, 24 for the voice; markup such as
    `<break>` left out first), so only ASCII letters, digits and `-` besides the `_`: safe on every file
    system and in `filename="…"`. A part with nothing left is left out."""
    parts = (slugify(re.sub(r"<[^>]*>", " ", take["text"]), max_length=40, word_boundary=True),
             slugify(take["voice"], max_length=24, word_boundary=True), take["id"])
    return "_".join(part for part in parts if part) + f".{fmt}"


def _encode(path: Path, sample_rate: int, fmt: str) -> bytes:
    pcm16 = np.frombuffer(path.read_bytes()[_WAV_HEADER_BYTES:], dtype="<i2")
    return encode_whole(pcm16.astype(np.float32) / 32768.0, sample_rate, fmt)


async def delete_take(request: Request) -> Response:
    _, store = _store(request)
    take_id = _take_id(request)
    if not await store.delete(take_id):
        raise ApiError(404, "take_not_found", f"no take {take_id!r}", field="id")
    return Response(status_code=204)
