"""Audio work for studio projects: take files, edits, joins and the export.

Takes are PCM16 mono WAV at the model's rate. Exports and join previews are rendered at
`OUTPUT_RATE` (24 kHz, like every REST format): each take is resampled whole (soxr, HQ)
to `round(samples * 24000 / rate)` samples and each pause is exactly
`round(pause_ms * 24)` zero samples, so an export's length is the sum of its takes and
pauses (to a sample per piece).

Silence trimming: the level is RMS over 10 ms frames; frames more than `SILENCE_DB`
below full scale at either end are silence, and `KEEP_MS` of it is kept before the first
and after the last loud frame so word onsets and releases are not clipped. (A plain
energy gate: VITS and SNAC output has a digital-silence floor, so nothing subtler is
needed; librosa.effects.trim does the same with a peak reference, and would bring numba.)

Loudness normalisation measures integrated loudness per ITU-R BS.1770-4 as pyloudnorm
(Steinmetz & Reiss 2021) does, over the export's pieces in turn (gateway/projects_export.py),
and applies one gain (`loudness_gain`); if that gain would push a sample past full scale, the
gain is lowered so the peak sits at `PEAK_CEILING` (-1 dBFS) instead, and the response says
the target was not reached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from engine.types import InvalidInput
from gateway.audio import OUTPUT_RATE, Resampler, wav_header

SILENCE_DB = -45.0  # dBFS RMS: quieter frames at the ends count as silence
FRAME_MS = 10.0
KEEP_MS = 30.0  # silence kept at each end after a trim
PEAK_CEILING = 10 ** (-1.0 / 20)  # -1 dBFS, the usual ceiling for lossy encoders
MIN_LOUDNESS_S = 0.4  # BS.1770 gates 400 ms blocks: shorter audio has no integrated loudness
EXPORT_FORMATS = ("wav", "flac", "mp3", "opus")


def write_wav(path: Path, sample_rate: int, pcm16: bytes) -> None:
    """PCM16 LE mono bytes to a WAV file at `path`, atomically (temp name, then rename); a failed write
    (OSError: a full disk) leaves no partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    try:
        with open(partial, "wb") as fh:
            fh.write(wav_header(sample_rate, len(pcm16) // 2))
            fh.write(pcm16)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def read_pcm16(path: Path) -> tuple[np.ndarray, int]:
    """(int16 samples `[n]`, sample rate in Hz) of a mono WAV file."""
    data, rate = sf.read(str(path), dtype="int16", always_2d=False)
    return np.ascontiguousarray(data, dtype="<i2"), int(rate)


def to_float(pcm16: np.ndarray) -> np.ndarray:
    return pcm16.astype(np.float32) / 32768.0


def ms_to_samples(ms: float, rate: int) -> int:
    return int(round(ms * rate / 1000.0))


def silence_bounds(pcm16: np.ndarray, rate: int) -> tuple[int, int]:
    """(start, end) sample indices that drop silence at both ends, keeping `KEEP_MS` of it.

    All-silent audio gives (0, 0); audio without silence at its ends gives (0, len). Idempotent: the
    audio cut to the bounds gives (0, its length).
    """
    frame = max(1, ms_to_samples(FRAME_MS, rate))
    num_frames = len(pcm16) // frame + (len(pcm16) % frame > 0)
    if num_frames == 0:
        return 0, 0
    padded = np.zeros(num_frames * frame, np.float32)
    padded[:len(pcm16)] = to_float(pcm16)
    rms = np.sqrt(np.mean(padded.reshape(num_frames, frame) ** 2, axis=1))
    loud = np.flatnonzero(rms > 10 ** (SILENCE_DB / 20))
    if not len(loud):
        return 0, 0
    # Whole frames (30 ms at 22050 Hz is 661.5 samples, three frames 660): a cut on a frame boundary keeps the
    # trimmed audio's frames those of the original, so a second trim finds the same bounds and changes nothing.
    keep = frame * round(KEEP_MS / FRAME_MS)
    start = max(0, int(loud[0]) * frame - keep)
    end = min(len(pcm16), (int(loud[-1]) + 1) * frame + keep)
    return start, end


def delete_range(pcm16: np.ndarray, rate: int, start_ms: float, end_ms: float) -> np.ndarray:
    """The audio without [start_ms, end_ms); InvalidInput naming the field if out of range."""
    duration_ms = 1000.0 * len(pcm16) / rate
    if not 0 <= start_ms < end_ms:
        raise InvalidInput("start_ms must be >= 0 and less than end_ms", field="start_ms")
    if start_ms >= duration_ms:
        raise InvalidInput(f"start_ms is past the end of the take ({duration_ms:.0f} ms)", field="start_ms")
    start, end = ms_to_samples(start_ms, rate), min(len(pcm16), ms_to_samples(end_ms, rate))
    if end - start >= len(pcm16):
        raise InvalidInput("that range is the whole take; delete the take instead", field="end_ms")
    return np.concatenate([pcm16[:start], pcm16[end:]])


def resample_whole(pcm: np.ndarray, rate: int, out_rate: int = OUTPUT_RATE) -> np.ndarray:
    """float32 `[n]` at `rate` -> float32 `[round(n * out_rate / rate)]` at `out_rate`."""
    if rate == out_rate:
        return pcm.astype(np.float32, copy=False)
    stream = Resampler(rate, out_rate)
    out = np.concatenate([stream(pcm), stream(np.zeros(0, np.float32), last=True)])
    want = int(round(len(pcm) * out_rate / rate))
    if len(out) < want:
        out = np.concatenate([out, np.zeros(want - len(out), np.float32)])
    return out[:want]


@dataclass(frozen=True, slots=True)
class Piece:
    """One part of a rendering: a take's file, or a pause of `pause_ms` when `path` is None.

    `start_ms`/`end_ms` cut a take (join previews); None means its start / its end.
    """

    path: Path | None = None
    pause_ms: float = 0.0
    start_ms: float | None = None
    end_ms: float | None = None


def render(pieces: list[Piece], out_rate: int = OUTPUT_RATE) -> np.ndarray:
    """The pieces joined: float32 `[samples]` at `out_rate` (see the module docstring)."""
    parts: list[np.ndarray] = []
    for piece in pieces:
        if piece.path is None:
            parts.append(np.zeros(ms_to_samples(piece.pause_ms, out_rate), np.float32))
            continue
        pcm16, rate = read_pcm16(piece.path)
        lo = 0 if piece.start_ms is None else max(0, ms_to_samples(piece.start_ms, rate))
        hi = len(pcm16) if piece.end_ms is None else min(len(pcm16), ms_to_samples(piece.end_ms, rate))
        parts.append(resample_whole(to_float(pcm16[lo:max(lo, hi)]), rate, out_rate))
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


@dataclass(frozen=True, slots=True)
class Loudness:
    measured_lufs: float | None  # before normalisation; None: too short or silent to measure
    gain_db: float
    limited: bool  # the gain was lowered to keep the peak at -1 dBFS


def check_measurable(num_samples: int, rate: int) -> None:
    """InvalidInput naming `loudness` for audio shorter than one BS.1770 gating block (`MIN_LOUDNESS_S`)."""
    if num_samples < MIN_LOUDNESS_S * rate:
        raise InvalidInput(f"loudness needs at least {MIN_LOUDNESS_S:g} s of audio to measure", field="loudness")


def loudness_gain(measured_lufs: float, peak: float, target_lufs: float) -> Loudness:
    """The one gain (dB) that brings audio measured at `measured_lufs` (-inf or NaN: silent) with sample
    peak `peak` (0..1) to `target_lufs`, lowered to keep the peak at `PEAK_CEILING`."""
    if not np.isfinite(measured_lufs):
        return Loudness(None, 0.0, False)
    gain_db = target_lufs - measured_lufs
    limited = peak > 0 and peak * 10 ** (gain_db / 20) > PEAK_CEILING
    if limited:
        gain_db = 20 * float(np.log10(PEAK_CEILING / peak))
    return Loudness(float(measured_lufs), gain_db, limited)
