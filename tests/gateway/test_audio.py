"""gateway/audio.py: streamed MP3 is one stream that libsndfile decodes to its full length."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from gateway.audio import StreamEncoder, encode_whole, lame_placeholder

LAME_DELAY = 576 + 529  # samples LAME's encoder adds ahead of the audio (a stream has no Xing frame to say so)
MP3_FRAME = 1152


def speechlike(rate: int, seconds: float) -> np.ndarray:
    """A tone gliding in pitch and loudness, with noise: VBR gives its frames many bitrates."""
    t = np.arange(int(rate * seconds)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 220 * t * (1 + 0.3 * np.sin(t))) * (0.5 + 0.5 * np.sin(3 * t))
    return (tone + 0.05 * np.random.default_rng(0).standard_normal(len(t))).astype(np.float32)


def streamed(encoder: StreamEncoder, pcm: np.ndarray, piece: int = 2048) -> bytes:
    return b"".join(encoder.feed(pcm[i:i + piece]) for i in range(0, len(pcm), piece)) + encoder.close()


@pytest.mark.parametrize(("out_rate", "kbps"), [(24000, None), (44100, 128.0), (22050, 32.0), (48000, 64.0),
                                                (16000, 32.0), (8000, 16.0)])
def test_a_streamed_mp3_decodes_to_its_length(out_rate: int, kbps: float | None) -> None:
    # libsndfile (libmpg123) tells a stream without a Xing frame's length from its size and
    # first frame, and reads no further: a VBR stream read 1-2 s short of 8 s.
    pcm = speechlike(22050, 8.0)
    data = streamed(StreamEncoder("mp3", 22050, out_rate, kbps), pcm)
    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    expected = round(len(pcm) * out_rate / 22050)
    assert rate == out_rate
    assert 0 <= len(audio) - expected <= MP3_FRAME + LAME_DELAY, (len(audio), expected)


def test_a_streamed_mp3_leaves_out_lames_placeholder_frame() -> None:
    # The placeholder (an MPEG header and zeros) is only filled in with the Xing frame at close,
    # after the stream has gone: sent as it is, it decodes as a frame of silence.
    encoder = StreamEncoder("mp3", 24000, 24000, 128.0)
    data = streamed(encoder, speechlike(24000, 2.0))
    assert lame_placeholder(bytes(encoder._sink.buffer)) == 0  # (filled in by now)
    assert data[:2] == b"\xff\xf3" and lame_placeholder(data) == 0
    assert bytes(encoder._sink.buffer).endswith(data)
    assert len(encoder._sink.buffer) - len(data) == 72 * 128000 // 24000  # the Xing frame, one frame


def test_a_whole_mp3_keeps_its_xing_frame_and_exact_length() -> None:
    pcm = speechlike(24000, 3.0)
    data = encode_whole(pcm, 24000, "mp3")
    assert lame_placeholder(data) == 0 and (b"Xing" in data[:200] or b"Info" in data[:200])
    assert sf.info(io.BytesIO(data)).frames == len(pcm)  # the Xing frame says where the audio is


def test_lame_placeholder_needs_a_whole_frame_to_tell() -> None:
    header = b"\xff\xf3\x84\xc4"  # MPEG-2 Layer III, 64 kbps, 24 kHz: 192 bytes
    assert lame_placeholder(header[:3]) is None
    assert lame_placeholder(header + bytes(100)) is None
    assert lame_placeholder(header + bytes(188)) == 192
    assert lame_placeholder(header + bytes(100) + b"\x01" + bytes(87)) == 0
    assert lame_placeholder(b"ID3\x04" + bytes(200)) == 0
