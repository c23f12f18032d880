"""Encoding and resampling off the event loop (gateway/audio.py `feed_async`, `OffLoop`):
a stream's bytes are those of the plain `feed`, in order, whether its pieces run inline or
in a thread; a cancelled caller never lets two calls overlap; the loop runs meanwhile."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from gateway.audio import CODECS, OFFLOAD_MIN_SAMPLES, OffLoop, Resampler, StreamEncoder

IN_RATE = 22050  # the embedded voice's rate
# Piece sizes as the engine hands them over: whole sentences (~3 s), a short clause, and
# pieces below the offload threshold, which stay inline.
SIZES = (66150, 1000, OFFLOAD_MIN_SAMPLES - 1, 30000, 17, OFFLOAD_MIN_SAMPLES, 44100)


def pieces() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(sum(SIZES)) / IN_RATE
    signal = (0.3 * np.sin(2 * np.pi * 220 * t * (1 + t)) + 0.01 * rng.standard_normal(len(t))).astype(np.float32)
    return np.split(signal, np.cumsum(SIZES)[:-1])


def without_ogg_serials(data: bytes) -> bytes:
    """Ogg pages with their stream serial number and CRC zeroed (libsndfile draws the serial
    at random for every stream, RFC 3533 §6)."""
    out, at = bytearray(data), 0
    while at < len(data):
        assert data[at:at + 4] == b"OggS", f"no Ogg page at {at}"
        out[at + 14:at + 18] = out[at + 22:at + 26] = b"\0\0\0\0"
        num_segments = data[at + 26]
        at += 27 + num_segments + sum(data[at + 27:at + 27 + num_segments])
    return bytes(out)


def comparable(fmt: str, data: bytes) -> bytes:
    return without_ogg_serials(data) if fmt == "opus" else data


def encode_inline(fmt: str, out_rate: int) -> list[bytes]:
    encoder = StreamEncoder(fmt, IN_RATE, out_rate, 64.0 if fmt in ("mp3", "opus") else None)
    return [encoder.feed(p) for p in pieces()] + [encoder.close()]


async def encode_off_loop(fmt: str, out_rate: int) -> list[bytes]:
    encoder = StreamEncoder(fmt, IN_RATE, out_rate, 64.0 if fmt in ("mp3", "opus") else None)
    return [await encoder.feed_async(p) for p in pieces()] + [await encoder.close_async()]


OUT_RATES = {"opus": (48000,), "ulaw": (8000,), "alaw": (8000,), "mp3": (24000, 44100)}


@pytest.mark.parametrize("fmt,out_rate", [(f, r) for f in CODECS for r in OUT_RATES.get(f, (24000, IN_RATE))])
def test_a_stream_is_the_same_bytes_off_the_loop(fmt: str, out_rate: int) -> None:
    inline = encode_inline(fmt, out_rate)
    off_loop = asyncio.run(encode_off_loop(fmt, out_rate))
    assert len(b"".join(inline)) > 0
    # Piece by piece, not only in total: what each chunk of the stream carries is unchanged.
    assert [comparable(fmt, b) for b in off_loop] == [comparable(fmt, b) for b in inline]


def test_pieces_fed_at_once_come_out_in_call_order() -> None:
    """Callers that do not wait for each other (two tasks feeding one context) still get
    the encoder one call at a time, in the order they called."""
    inline = encode_inline("mp3", 24000)

    async def main() -> list[bytes]:
        encoder = StreamEncoder("mp3", IN_RATE, 24000, 64.0)
        tasks = [asyncio.create_task(encoder.feed_async(p)) for p in pieces()]
        return [*await asyncio.gather(*tasks), await encoder.close_async()]

    assert asyncio.run(main()) == inline


def test_the_resampler_gives_the_same_samples_off_the_loop() -> None:
    inline = Resampler(IN_RATE, 24000)
    expected = [inline(p, last=i == len(SIZES) - 1) for i, p in enumerate(pieces())]

    async def main() -> list[np.ndarray]:
        resampler = Resampler(IN_RATE, 24000)
        return [await resampler.resample_async(p, last=i == len(SIZES) - 1) for i, p in enumerate(pieces())]

    got = asyncio.run(main())
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))


def test_a_cancelled_caller_does_not_let_the_next_call_overlap_its_work() -> None:
    spans: list[tuple[str, float, float]] = []
    started = threading.Event()

    def work(name: str, seconds: float) -> str:
        t0 = time.monotonic()
        started.set()
        time.sleep(seconds)
        spans.append((name, t0, time.monotonic()))
        return name

    async def main() -> str:
        off_loop = OffLoop()
        first = asyncio.create_task(off_loop.run(lambda: work("first", 0.3)))
        await asyncio.to_thread(started.wait, 5)
        first.cancel()  # its thread goes on: the next call must wait for it
        with pytest.raises(asyncio.CancelledError):
            await first
        return await off_loop.run(lambda: work("second", 0.0))

    assert asyncio.run(main()) == "second"
    (_, _, first_end), (_, second_start, _) = sorted(spans, key=lambda s: s[1])
    assert [name for name, _, _ in sorted(spans, key=lambda s: s[1])] == ["first", "second"]
    assert second_start >= first_end


def test_the_loop_runs_while_a_long_piece_encodes() -> None:
    """The point of it: other streams' coroutines run while one MP3 piece encodes."""
    long_piece = np.concatenate(pieces() * 4)  # ~20 s of audio: tens of ms of LAME

    async def main() -> tuple[int, float]:
        encoder = StreamEncoder("mp3", IN_RATE)
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        await encoder.feed_async(long_piece)
        elapsed = time.perf_counter() - t0
        done.set()
        await task
        return ticks, elapsed

    ticks, elapsed = asyncio.run(main())
    # Inline, the ticker could not run at all until the piece was encoded.
    assert ticks >= 3, f"the loop ticked {ticks} times in {elapsed * 1000:.0f} ms of encoding"
