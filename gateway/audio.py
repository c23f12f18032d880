"""Audio output: resampling (soxr) and encoding (soundfile / libsndfile), whole or streamed.

Formats follow OpenAI's `response_format`: `wav`, `flac`, `mp3`, `opus` (Ogg Opus) and
`pcm` = raw signed 16-bit little-endian mono at 24 kHz. Every REST format is produced
at 24 kHz, like OpenAI's, so the same text gives the same duration in every format.
The vendor protocols (gateway/vendor_formats.py) add raw `ulaw` and `alaw` (G.711,
through libsndfile's RAW container), raw `f32` (float32 LE), other rates, and MP3 and
Opus bitrates (libsndfile's compression level, mapped as below).

Streaming: `StreamEncoder.feed(pcm)` returns the bytes that are final so far. WAV is
written by hand (a 44-byte RIFF header whose sizes say "unknown length", 0xFFFFFFFF,
which players accept for streams) followed by PCM16. MP3 and Ogg Opus go through
libsndfile writing into a sink that it appends to sequentially. For MP3, LAME opens the
file with a placeholder frame that libsndfile fills at close with the Xing/Info frame
(frame count, encoder delay), seeking back; a stream cannot wait for that, so its copy
leaves the placeholder out, and a streamed MP3 is constant-bitrate (`MP3_STREAM_KBPS`
unless a bitrate is asked for): without a Xing frame, a decoder can only tell a stream's
length from its size and first frame, which is right for CBR alone (libsndfile/mpg123
read a VBR stream up to that estimate: 1-2 s short on a paragraph). A whole file
(`encode_whole`) keeps libsndfile's default VBR, with the Xing frame filled in.
FLAC is the exception: its STREAMINFO header carries the total length and an MD5 that
libsndfile patches at close, and a FLAC with "unknown length" trips common readers
(soundfile among them), so FLAC is delivered whole when synthesis ends.

Off the event loop: the streaming routes call `feed_async` / `close_async` (and
`Resampler.resample_async`), which run the work in a small thread pool when it is heavy
enough to hold up other streams: MP3, Opus and FLAC always (libsndfile: 12-21 ms of the
loop per second of audio), resampling and G.711 for a piece of at least
`OFFLOAD_MIN_SAMPLES`. soxr and libsndfile release the GIL, so the loop runs on
meanwhile. A PCM16 copy, a short piece's resampling and base64 (which holds the GIL)
stay inline: they cost the loop less than the hop to a thread does (bench/audio_offload.py,
results in bench/results/cpu_load.json `offload`). Each encoder and resampler runs one
call at a time, in the order made (`OffLoop`), so a stream's bytes are those of `feed`.
"""

from __future__ import annotations

import asyncio
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import numpy as np
import soundfile as sf
import soxr

from engine.types import InvalidInput

T = TypeVar("T")
# Resampling (soxr HQ, 22.05 -> 24 kHz) and G.711 cost the loop ~0.01 µs a sample; a piece
# this long costs it about what the hop to a thread does (~30 µs of the loop's CPU), so
# shorter ones stay inline. MP3, Opus and FLAC always go (1-2 ms for 85 ms of audio).
OFFLOAD_MIN_SAMPLES = 4096
_COMPRESSED = ("mp3", "opus", "flac")
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:  # normal priority: a listener's next bytes before synthesis ahead (niced)
        _POOL = ThreadPoolExecutor(max_workers=min(8, max(2, os.cpu_count() or 2)), thread_name_prefix="voxgate-audio")
    return _POOL


class OffLoop:
    """One stream's audio work in the audio thread pool, a call at a time, in call order.

    A caller cancelled while its call runs does not stop the thread: the next call waits
    for it, so an encoder's state never sees two calls at once.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()  # FIFO: calls run in the order they were made
        self._running: asyncio.Future[Any] | None = None

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` in a thread; returns what it returns, raises what it raises."""
        async with self._lock:
            if self._running is not None and not self._running.done():
                await asyncio.wait([self._running])
            future = asyncio.get_running_loop().run_in_executor(_pool(), work)
            # (a cancelled caller leaves the result unread: read it so nothing logs it as lost)
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._running = future
            return await asyncio.shield(future)


OUTPUT_RATE = 24_000  # Hz, OpenAI's rate for every format
FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
MEDIA_TYPES = {
    "wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac",
    "mp3": "audio/mpeg", "opus": "audio/ogg; codecs=opus",
}
_SNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"),
            "ulaw": ("RAW", "ULAW"), "alaw": ("RAW", "ALAW")}
CODECS = (*FORMATS, "ulaw", "alaw", "f32")  # what StreamEncoder writes
MP3_STREAM_KBPS = 64.0  # a streamed MP3 without a bitrate of its own (LAME's VBR default averages ~57 on speech)
# Layer III bitrates (kbps) by header index, MPEG-1 then MPEG-2/2.5, and sample rates by version
_MP3_KBPS = ((0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
             (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160))
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def compression_level(fmt: str, sample_rate: int, bitrate_kbps: float) -> float:
    """libsndfile's compression level (0..1) for a constant `bitrate_kbps`.

    libsndfile maps the level linearly onto a bitrate range, high to low: MP3 320..32
    kbps for MPEG-1 rates (32-48 kHz), 160..8 for MPEG-2 (16-24 kHz), 64..8 for MPEG-2.5
    (8-12 kHz), where LAME takes the nearest standard bitrate; Opus 256..6 kbps
    (measured with libsndfile 1.2 as packaged by soundfile; tests/gateway/test_vendor_formats.py
    checks the bitrates that come out).
    """
    if fmt == "opus":
        high, low = 256.0, 6.0
    elif sample_rate >= 32000:
        high, low = 320.0, 32.0
    elif sample_rate >= 16000:
        high, low = 160.0, 8.0
    else:
        high, low = 64.0, 8.0
    return min(max((high - bitrate_kbps) / (high - low), 0.0), 0.999)  # 1.0 is refused


def lame_placeholder(data: bytes | bytearray) -> int | None:
    """The length of LAME's placeholder for the Xing/Info frame at the start of `data` (an
    MPEG Layer III frame header followed by zeros), 0 when `data` starts otherwise, None
    while `data` is too short to tell."""
    if len(data) < 4:
        return None
    version, layer = (data[1] >> 3) & 3, (data[1] >> 1) & 3
    kbps_index, rate_index = data[2] >> 4, (data[2] >> 2) & 3
    if data[0] != 0xFF or data[1] & 0xE0 != 0xE0 or version == 1 or layer != 1 or kbps_index in (0, 15) \
            or rate_index == 3:
        return 0
    kbps = _MP3_KBPS[version != 3][kbps_index]
    size = (144 if version == 3 else 72) * 1000 * kbps // _MP3_RATES[version][rate_index] + ((data[2] >> 1) & 1)
    if len(data) < size:
        return None
    return 0 if any(data[4:size]) else size


def to_pcm16(pcm: np.ndarray) -> bytes:
    """float32 [samples] in [-1, 1] -> int16 little-endian bytes (clipped)."""
    data: bytes = (np.clip(pcm, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
    return data


class Resampler:
    """Streaming resampler (soxr, HQ) from `in_rate` to `out_rate` Hz; float32 mono."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate, self.out_rate = in_rate, out_rate
        self._stream = None if in_rate == out_rate else soxr.ResampleStream(
            in_rate, out_rate, 1, dtype="float32", quality="HQ")
        self._off_loop: OffLoop | None = None

    @property
    def is_identity(self) -> bool:
        return self._stream is None

    def __call__(self, pcm: np.ndarray, last: bool = False) -> np.ndarray:
        """float32 `[samples]` at `in_rate` -> float32 `[samples']` at `out_rate` (soxr
        holds back a few ms of filter delay until `last`)."""
        if self._stream is None:
            return pcm.astype(np.float32, copy=False)
        out: np.ndarray = self._stream.resample_chunk(pcm.astype(np.float32, copy=False), last=last)
        return out

    async def resample_async(self, pcm: np.ndarray, last: bool = False) -> np.ndarray:
        """The same as calling it, in a thread when `pcm` is long enough to be worth one."""
        if self._stream is None or (len(pcm) < OFFLOAD_MIN_SAMPLES and self._off_loop is None):
            return self(pcm, last)
        if self._off_loop is None:
            self._off_loop = OffLoop()
        return await self._off_loop.run(lambda: self(pcm, last))


def wav_header(sample_rate: int, num_samples: int | None = None) -> bytes:
    """RIFF/WAVE header for PCM16 mono; `num_samples=None` writes streaming sizes."""
    if num_samples is None:
        data_size = riff_size = 0xFFFFFFFF
    else:
        data_size = 2 * num_samples
        riff_size = 36 + data_size
    return (b"RIFF" + struct.pack("<I", riff_size) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
            + b"data" + struct.pack("<I", data_size))


class _Sink:
    """File-like object for libsndfile that remembers how far bytes are final."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.pos = 0
        self.sent = 0

    def write(self, data: bytes) -> int:
        data = bytes(data)
        self.buffer[self.pos:self.pos + len(data)] = data
        self.pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        end = len(self.buffer) if size < 0 else self.pos + size
        data = bytes(self.buffer[self.pos:end])
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: len(self.buffer)}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = bytes(self.buffer[self.sent:])
        self.sent = len(self.buffer)
        return data


class StreamEncoder:
    """Encode float32 PCM at `in_rate` Hz into `fmt` (one of CODECS) at `out_rate` Hz
    (24 kHz by default), piece by piece; MP3 and Opus at `bitrate_kbps` when given, MP3
    otherwise at `MP3_STREAM_KBPS`, or VBR with `whole` (only the file at close is used:
    `encode_whole`)."""

    def __init__(self, fmt: str, in_rate: int, out_rate: int = OUTPUT_RATE,
                 bitrate_kbps: float | None = None, *, whole: bool = False) -> None:
        if fmt not in CODECS:
            raise InvalidInput(f"response_format must be one of {', '.join(FORMATS)}", field="response_format")
        self.fmt = fmt
        self.streams = fmt != "flac"  # see the module docstring
        if fmt == "mp3" and bitrate_kbps is None and not whole:
            bitrate_kbps = MP3_STREAM_KBPS  # a stream has no Xing frame: CBR, so its size tells its length
        self._skip_placeholder = fmt == "mp3"  # (the streamed copy leaves it out)
        self.out_rate = out_rate
        self._resample = Resampler(in_rate, out_rate)
        self._header_sent = False
        self._sink: _Sink | None = None
        self._file: sf.SoundFile | None = None
        if fmt in _SNDFILE:
            container, subtype = _SNDFILE[fmt]
            self._sink = _Sink()
            level = None
            if bitrate_kbps is not None and fmt in ("mp3", "opus"):
                level = compression_level(fmt, out_rate, bitrate_kbps)
            self._file = sf.SoundFile(self._sink, "w", samplerate=out_rate, channels=1,
                                      format=container, subtype=subtype, compression_level=level,
                                      bitrate_mode="CONSTANT" if level is not None and fmt == "mp3" else None)
        self.num_samples = 0
        self._off_loop: OffLoop | None = None

    def _encode(self, pcm: np.ndarray) -> bytes:
        self.num_samples += len(pcm)
        if self._file is not None and self._sink is not None:
            if len(pcm):
                self._file.write(pcm)
            return self._take() if self.streams else b""
        out = b""
        if self.fmt == "f32":
            data: bytes = np.clip(pcm, -1.0, 1.0).astype("<f4").tobytes()
            return data
        if self.fmt == "wav" and not self._header_sent:
            out = wav_header(self.out_rate)
            self._header_sent = True
        return out + to_pcm16(pcm)

    def _take(self) -> bytes:
        """The sink's new bytes; an MP3 stream's from after LAME's placeholder frame (kept when
        the file was already closed: the Xing frame is filled in then)."""
        assert self._sink is not None
        if self._skip_placeholder:
            size = lame_placeholder(self._sink.buffer)
            if size is None:
                return b""
            self._sink.sent = max(self._sink.sent, size)
            self._skip_placeholder = False
        return self._sink.take()

    def feed(self, pcm: np.ndarray) -> bytes:
        """Encoded bytes for this piece that are final (possibly b"" while buffering)."""
        return self._encode(self._resample(pcm))

    def _is_heavy(self, num_samples: int) -> bool:
        if self.fmt in _COMPRESSED:  # ms per piece: never worth holding the loop for
            return True
        busy = not self._resample.is_identity or self.fmt in _SNDFILE  # (G.711 through libsndfile)
        return busy and num_samples >= OFFLOAD_MIN_SAMPLES

    async def feed_async(self, pcm: np.ndarray) -> bytes:
        """`feed(pcm)`, in a thread when the work is heavy (module docstring)."""
        if self._off_loop is None and not self._is_heavy(len(pcm)):
            return self.feed(pcm)
        self._off_loop = self._off_loop or OffLoop()  # once used, every call: order is kept
        return await self._off_loop.run(lambda: self.feed(pcm))

    async def close_async(self) -> bytes:
        """`close()`, in a thread when the encoder runs there."""
        if self._off_loop is None and self.fmt not in _COMPRESSED:
            return self.close()
        self._off_loop = self._off_loop or OffLoop()
        return await self._off_loop.run(self.close)

    def close(self) -> bytes:
        """Flush the resampler and the encoder; the stream's last bytes."""
        out = self._encode(self._resample(np.zeros(0, np.float32), last=True))
        if self._file is not None and self._sink is not None:
            self._file.close()
            self._file = None
            out += self._take() if self.streams else bytes(self._sink.buffer)
        return out


def encode_whole(pcm: np.ndarray, in_rate: int, fmt: str) -> bytes:
    """A complete file of `fmt` (headers with exact sizes) from float32 [samples]."""
    encoder = StreamEncoder(fmt, in_rate, whole=True)
    body = encoder.feed(pcm) + encoder.close()
    if fmt == "wav":
        return wav_header(encoder.out_rate, encoder.num_samples) + body[44:]
    if encoder._sink is not None:
        return bytes(encoder._sink.buffer)  # with the headers patched at close
    return body
