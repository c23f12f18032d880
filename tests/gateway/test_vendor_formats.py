"""Vendor output formats: parsing, and the bitrates libsndfile gives for our compression levels."""

from __future__ import annotations

import numpy as np
import pytest

from engine.types import InvalidInput
from gateway.audio import StreamEncoder
from gateway.vendor_formats import OutputFormat, cartesia_format, elevenlabs_format


@pytest.mark.parametrize(("value", "expected"), [
    (None, OutputFormat("mp3", 44100, 128.0)),
    ("pcm_32000", OutputFormat("pcm", 32000)),
    ("wav_16000", OutputFormat("wav", 16000)),
    ("mp3_22050_32", OutputFormat("mp3", 22050, 32.0)),
    ("mp3_44100", OutputFormat("mp3", 44100, 128.0)),
    ("opus_48000_96", OutputFormat("opus", 48000, 96.0)),
    ("ulaw_8000", OutputFormat("ulaw", 8000)),
    ("alaw_8000", OutputFormat("alaw", 8000)),
])
def test_elevenlabs_formats(value: str | None, expected: OutputFormat) -> None:
    assert elevenlabs_format(value) == expected


@pytest.mark.parametrize("value", ["pcm_12345", "ulaw_16000", "opus_24000_64", "flac_44100", 5, "mp3_44100_999"])
def test_elevenlabs_formats_refused(value: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        elevenlabs_format(value)
    assert caught.value.field == "output_format" and "ulaw_8000" in caught.value.message


def test_cartesia_formats() -> None:
    assert cartesia_format({"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}) == \
        OutputFormat("ulaw", 8000)
    assert cartesia_format({"container": "wav", "encoding": "pcm_s16le", "sample_rate": 44100}) == \
        OutputFormat("wav", 44100)
    assert cartesia_format({"container": "mp3", "sample_rate": 24000, "bit_rate": 64000}) == \
        OutputFormat("mp3", 24000, 64.0)
    with pytest.raises(InvalidInput) as caught:
        cartesia_format({"container": "wav", "encoding": "pcm_alaw", "sample_rate": 8000})
    assert caught.value.field == "output_format.encoding"


@pytest.mark.parametrize("value", [{"container": "ogg"}, {"container": "ogg", "sample_rate": 8000},
                                   {"container": "ogg", "sample_rate": 12345, "encoding": "opus"}])
def test_cartesia_unsupported_container_is_the_error(value: dict[str, object]) -> None:
    """An unsupported container is what is wrong, whatever else the format lacks."""
    with pytest.raises(InvalidInput) as caught:
        cartesia_format(value)
    assert caught.value.field == "output_format.container" and "raw, wav or mp3" in caught.value.message


@pytest.mark.parametrize(("codec", "rate", "kbps"), [
    ("mp3", 44100, 128), ("mp3", 44100, 64), ("mp3", 22050, 32), ("mp3", 24000, 48), ("opus", 48000, 64),
    ("opus", 48000, 32),
])
def test_bitrates_come_out_as_asked(codec: str, rate: int, kbps: int) -> None:
    seconds = 4
    noise = (np.random.default_rng(0).standard_normal(rate * seconds) * 0.2).astype(np.float32)
    encoder = StreamEncoder(codec, rate, rate, kbps)
    size = len(encoder.feed(noise) + encoder.close())
    assert abs(size * 8 / seconds / 1000 - kbps) < 0.2 * kbps
