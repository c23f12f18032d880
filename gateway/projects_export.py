"""A project's export, written piece by piece into a temporary file that is then sent and deleted.

The export was rendered whole in memory: float32 for every sample (345 MB an hour at 24 kHz), a
float64 copy or more for the loudness measurement, and the encoded file besides, so a long
project could take gigabytes per request. Here the memory is one take at a time: each piece is
read, resampled and written to the encoder (libsndfile through soundfile; WAV as PCM16 with its
header patched at the end) in turn, into `<data_dir>/projects/.exports/` (the projects' own
folder: a start's sweep keeps it and removes what a kill left in it, gateway/projects_sweep.py),
and the route sends it with `TemporaryFileResponse`, which deletes it once sent (or the client left).

Loudness (`loudness=` LUFS) needs the whole programme's integrated loudness before the first
sample is written: a first pass measures it per ITU-R BS.1770-4 as pyloudnorm does, with
pyloudnorm's K-weighting filters run over the pieces in turn (their state carried across) and
the mean square of each 100 ms hop kept (a few floats a minute), then gated as pyloudnorm
gates its 400 ms blocks of 75 % overlap (`ProgrammeLoudness`); the second pass renders again
and applies the gain (`gateway.projects_audio.loudness_gain`).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy import signal
from starlette.responses import FileResponse
from starlette.types import Receive, Scope, Send

from gateway.audio import OUTPUT_RATE, to_pcm16, wav_header
from gateway.projects_audio import Loudness, Piece, check_measurable, loudness_gain, ms_to_samples, render

EXPORT_DIR = ".exports"
_SOUNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}
BLOCK_S, HOP_S = 0.4, 0.1  # BS.1770's gating block and its step (75 % overlap)


def rendered(pieces: list[Piece], out_rate: int = OUTPUT_RATE) -> Iterator[np.ndarray]:
    """Each piece rendered on its own (`render` of one piece): float32 `[samples]` at `out_rate`."""
    for piece in pieces:
        yield render([piece], out_rate)


class ProgrammeLoudness:
    """Integrated loudness (LUFS, BS.1770-4, mono) and peak of audio fed in pieces (`feed`), as
    `pyloudnorm.Meter(rate).integrated_loudness` of the whole would measure it."""

    def __init__(self, rate: int) -> None:
        import pyloudnorm

        self.rate = rate
        self.num_samples = 0
        self.peak = 0.0
        self._filters = [(f.b, f.a, f.passband_gain) for f in pyloudnorm.Meter(rate)._filters.values()]
        self._states = [signal.lfilter_zi(b, a) * 0.0 for b, a, _ in self._filters]
        self._hop = int(round(HOP_S * rate))
        self._hops: list[float] = []  # sum of squares of the K-weighted signal per hop
        self._partial = 0.0  # of the hop being filled
        self._in_partial = 0

    def feed(self, pcm: np.ndarray) -> None:
        if not len(pcm):
            return
        self.peak = max(self.peak, float(np.max(np.abs(pcm))))
        self.num_samples += len(pcm)
        weighted = pcm.astype(np.float64)
        for i, (b, a, gain) in enumerate(self._filters):
            weighted, self._states[i] = signal.lfilter(b, a, weighted, zi=self._states[i])
            weighted = gain * weighted
        squares = np.square(weighted)
        start = 0
        while start < len(squares):
            take = min(self._hop - self._in_partial, len(squares) - start)
            self._partial += float(np.sum(squares[start:start + take]))
            self._in_partial += take
            start += take
            if self._in_partial == self._hop:
                self._hops.append(self._partial)
                self._partial, self._in_partial = 0.0, 0

    def integrated(self) -> float:
        """LUFS; -inf for silence, as pyloudnorm (it raises for audio shorter than a block: check first)."""
        hops = np.array([*self._hops, self._partial], np.float64)
        per_block = int(round(BLOCK_S / HOP_S))
        num_blocks = int(np.round((self.num_samples / self.rate - BLOCK_S) / HOP_S)) + 1
        padded = np.concatenate([hops, np.zeros(max(0, num_blocks + per_block - len(hops)))])
        z = np.array([padded[j:j + per_block].sum() for j in range(num_blocks)]) / (BLOCK_S * self.rate)
        with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
            warnings.simplefilter("ignore")
            loudness = -0.691 + 10.0 * np.log10(z)
            absolute = z[loudness >= -70.0]
            relative = -0.691 + 10.0 * np.log10(np.mean(absolute)) - 10.0 if len(absolute) else -np.inf
            gated = z[(loudness > relative) & (loudness > -70.0)]
            mean = float(np.mean(gated)) if len(gated) else 0.0
            return float(-0.691 + 10.0 * np.log10(mean)) if mean > 0 else -np.inf


def export_file(pieces: list[Piece], fmt: str, target_lufs: float | None, folder: Path) -> tuple[Path, dict[str, str]]:
    """The export of `pieces` as a file of `fmt` (wav, flac, mp3, opus) at OUTPUT_RATE under `folder/EXPORT_DIR`,
    normalised to `target_lufs` when given, and its headers (X-Voxgate-Duration-Ms; with loudness
    X-Voxgate-Gain-Db, X-Voxgate-Loudness-Limited, X-Voxgate-Measured-Lufs). The caller deletes the file;
    a failure (InvalidInput for audio too short to measure, OSError) leaves none."""
    gain, headers = 1.0, {}
    if target_lufs is not None:
        meter = ProgrammeLoudness(OUTPUT_RATE)
        for pcm in rendered(pieces):
            meter.feed(pcm)
        check_measurable(meter.num_samples, OUTPUT_RATE)
        loudness: Loudness = loudness_gain(meter.integrated(), meter.peak, target_lufs)
        gain = 10 ** (loudness.gain_db / 20)
        headers["X-Voxgate-Gain-Db"] = f"{loudness.gain_db:.2f}"
        headers["X-Voxgate-Loudness-Limited"] = "true" if loudness.limited else "false"
        if loudness.measured_lufs is not None:
            headers["X-Voxgate-Measured-Lufs"] = f"{loudness.measured_lufs:.2f}"
    (folder / EXPORT_DIR).mkdir(parents=True, exist_ok=True)
    path = folder / EXPORT_DIR / f"export-{uuid.uuid4().hex[:12]}.{fmt}"
    num_samples = 0
    try:
        if fmt == "wav":
            with open(path, "wb") as out:
                out.write(wav_header(OUTPUT_RATE, 0))
                for pcm in rendered(pieces):
                    out.write(to_pcm16(pcm * np.float32(gain) if gain != 1.0 else pcm))
                    num_samples += len(pcm)
                out.seek(0)
                out.write(wav_header(OUTPUT_RATE, num_samples))
        else:
            container, subtype = _SOUNDFILE[fmt]
            with sf.SoundFile(path, "w", samplerate=OUTPUT_RATE, channels=1, format=container,
                              subtype=subtype) as out:
                for pcm in rendered(pieces):
                    if len(pcm):
                        out.write(np.clip(pcm * np.float32(gain), -1.0, 1.0))
                    num_samples += len(pcm)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    headers["X-Voxgate-Duration-Ms"] = f"{1000.0 * num_samples / OUTPUT_RATE:.1f}"
    return path, headers


def export_samples(pieces: list[Piece], out_rate: int = OUTPUT_RATE) -> int:
    """How many samples `rendered(pieces)` makes at `out_rate`, from each take's file header
    (`soundfile.info`: no sample is read) and the pauses, as `render` counts them (a take at another
    rate: round(n * out_rate / rate)). Raises what soundfile raises for a file it cannot open."""
    total = 0
    for piece in pieces:
        if piece.path is None:
            total += ms_to_samples(piece.pause_ms, out_rate)
            continue
        info = sf.info(str(piece.path))
        frames, rate = int(info.frames), int(info.samplerate)
        lo = 0 if piece.start_ms is None else max(0, ms_to_samples(piece.start_ms, rate))
        hi = frames if piece.end_ms is None else min(frames, ms_to_samples(piece.end_ms, rate))
        kept = max(lo, hi) - lo
        total += kept if rate == out_rate else int(round(kept * out_rate / rate))
    return total


def head_headers(pieces: list[Piece], fmt: str, target_lufs: float | None) -> dict[str, str]:
    """The headers of `export_file`'s answer that are known without rendering (HEAD):
    X-Voxgate-Duration-Ms, and for WAV (PCM16) its Content-Length. Not the loudness headers (they
    need the programme measured) nor a compressed file's size. InvalidInput naming `loudness`, as
    the export, when `target_lufs` is given and the audio is too short to measure."""
    num_samples = export_samples(pieces)
    if target_lufs is not None:
        check_measurable(num_samples, OUTPUT_RATE)
    headers = {"X-Voxgate-Duration-Ms": f"{1000.0 * num_samples / OUTPUT_RATE:.1f}"}
    if fmt == "wav":
        headers["Content-Length"] = str(len(wav_header(OUTPUT_RATE, 0)) + 2 * num_samples)
    return headers


class TemporaryFileResponse(FileResponse):
    """A FileResponse that deletes its file however the response ends: sent, the client gone, or
    abandoned by WriteTimeout (a background task runs only after a complete send)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            Path(self.path).unlink(missing_ok=True)
