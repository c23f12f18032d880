"""Output formats as ElevenLabs and Cartesia name them, mapped onto gateway/audio.py codecs.

ElevenLabs: one string `<codec>_<rate>[_<kbps>]` (`output_format` query parameter):
`pcm_8000|16000|22050|24000|32000|44100|48000` (raw signed 16-bit LE mono), `wav_<rate>`
(the same in a streaming WAV header),
`mp3_<rate>_<kbps>` (e.g. `mp3_22050_32`, `mp3_44100_128`; `mp3_<rate>` is 128 kbps),
`opus_48000_<kbps>` (Ogg Opus), `ulaw_8000`, `alaw_8000` (G.711, raw).
Cartesia: an object `{"container": "raw"|"wav"|"mp3", "encoding": "pcm_s16le"|
"pcm_f32le"|"pcm_mulaw"|"pcm_alaw", "sample_rate": N[, "bit_rate": bps]}`.
Both as described in protocols/vendors.md (from the clients' sources).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.types import InvalidInput

EL_PCM_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
EL_MP3_RATES = (22050, 24000, 44100)
EL_OPUS_KBPS = (32, 64, 96, 128, 192)
EL_DEFAULT = "mp3_44100_128"  # ElevenLabs' own default
CARTESIA_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
CARTESIA_ENCODINGS = {"pcm_s16le": "pcm", "pcm_f32le": "f32", "pcm_mulaw": "ulaw", "pcm_alaw": "alaw"}
MEDIA_TYPES = {"pcm": "audio/pcm", "f32": "audio/pcm", "ulaw": "audio/basic", "alaw": "audio/x-alaw-basic",
               "mp3": "audio/mpeg", "opus": "audio/ogg; codecs=opus", "wav": "audio/wav"}
_EL_FORMAT = re.compile(r"^(pcm|wav|mp3|opus|ulaw|alaw)_(\d+)(?:_(\d+))?$")


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """`codec` (gateway.audio.CODECS) at `sample_rate` Hz; `bitrate_kbps` for mp3/opus."""

    codec: str
    sample_rate: int
    bitrate_kbps: float | None = None

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.codec]


def _el_error(value: object, field: str) -> InvalidInput:
    return InvalidInput(
        f"output_format {value!r} is not supported; use pcm_<rate> or wav_<rate> "
        f"({', '.join(map(str, EL_PCM_RATES))}), "
        f"mp3_<rate>_<kbps> (rates {', '.join(map(str, EL_MP3_RATES))}), "
        f"opus_48000_<kbps> ({', '.join(map(str, EL_OPUS_KBPS))}), ulaw_8000 or alaw_8000", field=field)


def elevenlabs_format(value: object, field: str = "output_format") -> OutputFormat:
    """Parse an ElevenLabs `output_format` (None: the default); InvalidInput otherwise."""
    if value is None or value == "":
        value = EL_DEFAULT
    match = _EL_FORMAT.match(value) if isinstance(value, str) else None
    if match is None:
        raise _el_error(value, field)
    codec, rate, kbps = match.group(1), int(match.group(2)), match.group(3)
    if codec in ("pcm", "wav") and rate in EL_PCM_RATES and kbps is None:
        return OutputFormat(codec, rate)
    if codec in ("ulaw", "alaw") and rate == 8000 and kbps is None:
        return OutputFormat(codec, rate)
    if codec == "mp3" and rate in EL_MP3_RATES and (kbps is None or 8 <= int(kbps) <= 320):
        return OutputFormat("mp3", rate, float(kbps or 128))
    if codec == "opus" and rate == 48000 and kbps is not None and int(kbps) in EL_OPUS_KBPS:
        return OutputFormat("opus", rate, float(kbps))
    raise _el_error(value, field)


def cartesia_format(value: object, field: str = "output_format") -> OutputFormat:
    """Parse a Cartesia `output_format` object; InvalidInput naming the sub-field otherwise."""
    if not isinstance(value, dict):
        raise InvalidInput("output_format must be an object with container, encoding and sample_rate",
                           field=field)
    data: dict[str, Any] = value
    container = data.get("container", "raw")
    if container not in ("raw", "wav", "mp3"):  # first: what the other fields mean depends on it
        raise InvalidInput("container must be raw, wav or mp3", field=f"{field}.container")
    rate = data.get("sample_rate")
    if isinstance(rate, bool) or rate not in CARTESIA_RATES:
        raise InvalidInput(f"sample_rate must be one of {', '.join(map(str, CARTESIA_RATES))}",
                           field=f"{field}.sample_rate")
    if container == "mp3":
        bit_rate = data.get("bit_rate", 128000)
        if isinstance(bit_rate, bool) or not isinstance(bit_rate, (int, float)) or not 8000 <= bit_rate <= 320000:
            raise InvalidInput("bit_rate must be a number of bits per second, 8000-320000",
                               field=f"{field}.bit_rate")
        return OutputFormat("mp3", int(rate), bit_rate / 1000.0)
    encoding = data.get("encoding", "pcm_s16le")
    codec = CARTESIA_ENCODINGS.get(encoding) if isinstance(encoding, str) else None
    if codec is None or (container == "wav" and codec != "pcm"):
        allowed = "pcm_s16le" if container == "wav" else ", ".join(CARTESIA_ENCODINGS)
        raise InvalidInput(f"encoding must be {allowed} for container {container}", field=f"{field}.encoding")
    return OutputFormat("wav" if container == "wav" else codec, int(rate))
