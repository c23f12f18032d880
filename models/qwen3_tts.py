"""Family `qwen3_tts`: Qwen3-TTS-12Hz (Qwen's talker + code predictor + 12 Hz tokenizer).

A model folder is the Hugging Face one (`Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice` and its
0.6B / Base / VoiceDesign siblings): `config.json`, `generation_config.json`,
`model.safetensors` (or shards + index; keys `talker.*`, plus `speaker_encoder.*` in Base
models), the Qwen2 text tokenizer (`vocab.json` + `merges.txt` + `tokenizer_config.json`, or
`tokenizer.json`) and `speech_tokenizer/` (`config.json` + `model.safetensors`, of which the
decoder's `decoder.*` keys are used). Options may point elsewhere: `speech_tokenizer_path`.

Per 80 ms frame (12.5 Hz): the talker (models/qwen3_tts_talker.py) writes codebook 0 from
the prompt and the frames so far, the code predictor (models/qwen3_tts_predictor.py) the
other 15 codebooks in 15 sequential steps, and the decoder (models/qwen3_tts_codec.py)
turns frames into 1920 samples at 24 kHz, causally, so a one-frame first chunk is ready as
soon as frame 0 exists (models/qwen3_tts_stream.py). Prompts: models/qwen3_tts_prompt.py;
an eager greedy loop through all of it: models/qwen3_tts_generate.py.

Model types (`tts_model_type`): `custom_voice`, named speakers (the voices; `instructions`
steer the style); `voice_design`, no speakers, `instructions` describe the voice; `base`,
clones a reference recording (its codes and speaker embedding). Sampling defaults are
qwen-tts's (`generation_config.json` overrides them).

The engine serves it through models/qwen3_tts_runner.py (a whole frame per step) with the
spec of models/qwen3_tts_spec.py. A Base model also loads its speaker encoder
(models/qwen3_tts_speaker.py) and the speech tokenizer's encoder (models/qwen3_tts_encoder.py),
which turn a reference recording into what `Reference` holds (`Qwen3TTS.encode_reference`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import InvalidModel
from models.file_checks import check_weights
from models.model_options import FLAG, PATH, Option, at_least, between, check_options, one_of
from models.qwen3_tts_args import CodecArgs, Args
from models.qwen3_tts_references import ReferenceAudio, ReferenceCache
from models.qwen3_tts_stream import FRAME_MS, SAMPLE_RATE, SAMPLES_PER_FRAME

FAMILY = "qwen3_tts"
MAX_TEXT_CHARS = 2000
# A model's options (checked when it is added, models/model_options.py): load's and the runner's.
MAX_SEQ_LEN = 32768  # talker positions a slot may have: the released configs' max_position_embeddings
OPTIONS: dict[str, Option] = {"speech_tokenizer_path": PATH, "dtype": one_of("bfloat16", "float16", "float32"),
                              "max_seq_len": between(2, MAX_SEQ_LEN), "max_codec_batch": at_least(1),
                              "max_prefill_batch": at_least(1), "frame_graphs": FLAG, "predictor_graphs": FLAG,
                              "attn_block": between(1, MAX_SEQ_LEN), "triton_attention": FLAG, "codec_graphs": FLAG,
                              "prepare_stream": FLAG, "prefill_graphs": FLAG}
DEFAULT_VOICE = "default"  # Base and VoiceDesign models: no speaker row in the prompt
# qwen-tts's hard defaults (its wrapper's `_merge_generate_kwargs`), for codebook 0 and the predictor
GENERATION_DEFAULTS: dict[str, Any] = {
    "do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
    "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0, "subtalker_temperature": 0.9,
    "max_new_tokens": 2048}

__all__ = ["FAMILY", "FRAME_MS", "SAMPLE_RATE", "SAMPLES_PER_FRAME", "Qwen3TTS", "validate", "load_parts", "load",
           "validate_settings"]


def _weight_files(folder: Path) -> list[Path]:
    from models.orpheus import _weight_files as orpheus_weight_files  # same single-file-or-shards layout

    return orpheus_weight_files(folder)


def _speech_folder(path: Path, options: dict[str, Any]) -> Path:
    return Path(options.get("speech_tokenizer_path") or Path(path) / "speech_tokenizer")


def read_args(path: Path) -> Args:
    """`Args` of a model folder's `config.json`; InvalidModel when it is not a Qwen3-TTS one."""
    config_path = Path(path) / "config.json"
    try:
        config = json.loads(config_path.read_text())
        if config.get("model_type") != "qwen3_tts":
            raise ValueError(f"model_type is {config.get('model_type')!r}, not 'qwen3_tts'")
        return Args.from_hf(config)
    except FileNotFoundError:
        raise InvalidModel(f"{config_path} is missing") from None
    except (ValueError, TypeError, KeyError, AssertionError) as error:
        raise InvalidModel(f"{config_path} is not a Qwen3-TTS config: {error}") from error


def voices(args: Args) -> list[str]:
    """CustomVoice: its speakers (config order); Base and VoiceDesign: `default`."""
    return list(args.voices) or [DEFAULT_VOICE]


def validate(path: Path | None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check a Qwen3-TTS folder without loading weights (every weight file readable to its end:
    models/file_checks.py); facts for the library. Raises InvalidModel."""
    check_options(options, OPTIONS, FAMILY)
    if path is None:
        raise InvalidModel("give the model folder")
    options = options or {}
    if not Path(path).is_dir():
        raise InvalidModel(f"{path} does not exist" if not Path(path).exists() else f"{path} is not a folder")
    args = read_args(Path(path))
    if not ((Path(path) / "tokenizer.json").is_file() or all(
            (Path(path) / n).is_file() for n in ("vocab.json", "merges.txt", "tokenizer_config.json"))):
        raise InvalidModel(f"{path} has no text tokenizer (tokenizer.json, or vocab.json + merges.txt + "
                           "tokenizer_config.json)")
    speech = _speech_folder(Path(path), options)
    for required in (speech / "config.json", speech / "model.safetensors"):
        if not required.is_file():
            raise InvalidModel(f"{required} is missing", field="speech_tokenizer_path"
                               if "speech_tokenizer_path" in options else "path")
    try:
        codec = CodecArgs.from_hf(json.loads((speech / "config.json").read_text())["decoder_config"])
    except (ValueError, TypeError, KeyError) as error:
        raise InvalidModel(f"{speech / 'config.json'} is not a 12 Hz speech tokenizer config: {error}") from error
    if codec.samples_per_frame != SAMPLES_PER_FRAME or codec.num_quantizers != args.num_code_groups:
        raise InvalidModel(f"{speech}: {codec.samples_per_frame} samples and {codec.num_quantizers} codebooks per "
                           f"frame; the talker needs {SAMPLES_PER_FRAME} and {args.num_code_groups}")
    files = _weight_files(Path(path)) + [speech / "model.safetensors"]
    check_weights(files)
    return {"voices": voices(args), "sample_rate": SAMPLE_RATE, "size_bytes": sum(f.stat().st_size for f in files),
            "num_layers": args.num_hidden_layers, "hidden_size": args.hidden_size, "model_type": args.tts_model_type}


@dataclass
class Qwen3TTS:
    """A loaded model: talker (+ predictor), codec, text tokenizer and sampling defaults."""

    args: Args
    talker: Any  # models.qwen3_tts_talker.Talker
    codec: Any  # models.qwen3_tts_codec.Qwen3TTSCodec
    tokenizer: Any  # tokenizers.Tokenizer
    generation: dict[str, Any] = field(default_factory=lambda: dict(GENERATION_DEFAULTS))
    speaker_encoder: Any = None  # models.qwen3_tts_speaker.SpeakerEncoder (Base models)
    speech_encoder: Any = None  # models.qwen3_tts_encoder.SpeechEncoder (Base models)
    references: Any = field(default_factory=lambda: ReferenceCache())  # sha256 -> (codes, x-vector)

    @property
    def has_speaker_encoder(self) -> bool:
        return self.speaker_encoder is not None

    @property
    def can_clone(self) -> bool:
        """A Base model with both encoders: it turns a recording into a `Reference`."""
        return self.args.tts_model_type == "base" and self.speaker_encoder is not None \
            and self.speech_encoder is not None

    def encode_reference(self, audio: Any, text: str | None) -> Any:
        """A recording -> `models.qwen3_tts_prompt.Reference`, as qwen-tts's
        `create_voice_clone_prompt` makes one: float32 mono audio `[N]` at 24 kHz (a numpy array;
        N >= models.qwen3_tts_speaker.MIN_SAMPLES), its transcript (None: the x-vector-only mode,
        no codes). Codes int64 `[ceil(N / 1920), 16]` and the x-vector `[hidden]`, on the CPU.
        Raises ValueError (audio too short, or not a Base model with its encoders)."""
        from models.qwen3_tts_prompt import Reference
        from models.qwen3_tts_speaker import speaker_embedding

        if not self.can_clone:
            raise ValueError("this model has no speaker encoder and speech encoder (only Base models clone)")
        embedding = speaker_embedding(self.speaker_encoder, audio).cpu()
        codes = self.speech_encoder.encode(audio) if text else None
        return Reference(text or "", codes, embedding)

    def reference(self, audio: ReferenceAudio) -> Any:
        """`encode_reference` of a request's `ReferenceAudio` through the model's cache: the codes
        and x-vector of audio already seen (same content hash) are not computed again."""
        from models.qwen3_tts_prompt import Reference

        codes, embedding = self.references.get(audio.sha256, lambda: _encoding(self, audio))
        return Reference(audio.transcript or "", codes if audio.transcript else None, embedding)

    @property
    def voices(self) -> list[str]:
        return voices(self.args)

    def prompt(self, text: str, voice: str | None = None, instructions: str | None = None,
               language: str = "auto", reference: Any = None, stream_text: bool | None = None) -> Any:
        """`models.qwen3_tts_prompt.Prompt` for `text`. voice: a CustomVoice speaker, or
        None / `default` (no speaker); reference: a `Reference` to clone (Base). Raises ValueError."""
        from models.qwen3_tts_prompt import build_prompt

        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"text has {len(text)} characters; at most {MAX_TEXT_CHARS}")
        speaker = None if voice in (None, "", DEFAULT_VOICE) else voice
        return build_prompt(self.talker, self.tokenizer, text, speaker, language, instructions, reference, stream_text)


def _encoding(model: Qwen3TTS, audio: ReferenceAudio) -> tuple[Any, Any]:
    """(codes, x-vector) of a recording: codes are made even when this request does not use them
    (x-vector only), so one entry serves every later request of that audio."""
    from models.qwen3_tts_speaker import speaker_embedding

    if not model.can_clone:
        raise ValueError("this model has no speaker encoder and speech encoder (only Base models clone)")
    samples = audio.samples()
    return model.speech_encoder.encode(samples), speaker_embedding(model.speaker_encoder, samples).cpu()


def load_talker(path: Path, device: str, dtype: Any) -> tuple[Any, bool]:
    """Build the talker on the meta device and assign the `talker.*` weights (cast to `dtype`).
    Returns (talker, whether `speaker_encoder.*` weights were present)."""
    import torch
    from safetensors.torch import load_file

    from models.qwen3_tts_talker import Talker

    args = read_args(path)
    with torch.device("meta"):
        talker = Talker(args)
    state: dict[str, torch.Tensor] = {}
    has_speaker_encoder = False
    for file in _weight_files(path):
        for key, value in load_file(str(file), device=str(device)).items():
            if key.startswith("talker."):
                state[key.removeprefix("talker.")] = value.to(dtype)
            has_speaker_encoder |= key.startswith("speaker_encoder.")
    try:
        talker.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as error:
        raise InvalidModel(f"{path}: weights do not match config.json: {error}") from error
    return talker.requires_grad_(False).eval(), has_speaker_encoder


def load_speaker_encoder(path: Path, device: str) -> Any:
    """The `speaker_encoder.*` weights of a Base folder as a float32
    `models.qwen3_tts_speaker.SpeakerEncoder` (shapes from `speaker_encoder_config`); None
    when the checkpoint has none. Raises InvalidModel when they do not match the config."""
    import torch
    from safetensors import safe_open

    from models.qwen3_tts_speaker import SpeakerArgs, SpeakerEncoder

    state: dict[str, torch.Tensor] = {}
    for file in _weight_files(Path(path)):
        with safe_open(str(file), framework="pt", device=str(device)) as weights:
            for key in weights.keys():
                if key.startswith("speaker_encoder."):
                    state[key.removeprefix("speaker_encoder.")] = weights.get_tensor(key).float()
    if not state:
        return None
    config = json.loads((Path(path) / "config.json").read_text()).get("speaker_encoder_config") or {}
    try:
        with torch.device("meta"):
            encoder = SpeakerEncoder(SpeakerArgs.from_hf(config))
        encoder.load_state_dict(state, strict=True, assign=True)
    except (RuntimeError, TypeError, AssertionError) as error:
        raise InvalidModel(f"{path}: speaker_encoder weights do not match speaker_encoder_config: {error}") \
            from error
    return encoder.requires_grad_(False).eval()


def load_speech_encoder(folder: Path, device: str) -> Any:
    """The speech tokenizer's encoder (`models.qwen3_tts_encoder.SpeechEncoder`), or None when
    `model.safetensors` has no `encoder.*` weights. Raises InvalidModel when they do not match."""
    from safetensors import safe_open

    from models.qwen3_tts_encoder import SpeechEncoder

    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
        if not any(key.startswith("encoder.") for key in weights.keys()):
            return None
    try:
        return SpeechEncoder.from_dir(folder, device)
    except (RuntimeError, KeyError, TypeError, AssertionError) as error:
        raise InvalidModel(f"{folder}: the speech encoder's weights do not match encoder_config: {error}") \
            from error


def load_parts(path: Path, options: dict[str, Any] | None = None, device: str = "cpu") -> Qwen3TTS:
    """Load every part of a Qwen3-TTS folder. options: `speech_tokenizer_path`, `dtype`
    ("bfloat16" | "float16" | "float32"; default bf16 on CUDA, float32 on CPU; the codec stays float32),
    `max_seq_len` (rope table length, default 8192)."""
    import torch

    from models.qwen3_tts_codec import Qwen3TTSCodec
    from models.qwen3_tts_prompt import load_text_tokenizer

    options = dict(options or {})
    validate(path, options)
    path = Path(path)
    on_gpu = torch.device(device).type == "cuda"
    dtype = getattr(torch, options.get("dtype") or ("bfloat16" if on_gpu else "float32"))
    talker, has_speaker_encoder = load_talker(path, device, dtype)
    talker.set_rope(int(options.get("max_seq_len", 8192)), device)
    codec = Qwen3TTSCodec.from_dir(_speech_folder(path, options), device, torch.float32)
    try:
        tokenizer = load_text_tokenizer(path)
    except ValueError as error:
        raise InvalidModel(str(error)) from error
    generation = dict(GENERATION_DEFAULTS)
    if (path / "generation_config.json").is_file():
        given = json.loads((path / "generation_config.json").read_text())
        generation.update({k: v for k, v in given.items() if k in GENERATION_DEFAULTS})
    speaker_encoder = speech_encoder = None
    if talker.args.tts_model_type == "base":  # only Base models encode references
        speaker_encoder = load_speaker_encoder(path, device) if has_speaker_encoder else None
        speech_encoder = load_speech_encoder(_speech_folder(path, options), device)
    return Qwen3TTS(talker.args, talker, codec, tokenizer, generation, speaker_encoder, speech_encoder)


def load(model_id: str, path: Path | None, options: dict[str, Any] | None = None, device: str = "cpu") -> Any:
    """What the gateway calls: the model's parts (`engine.runner.LMParts`), served by
    models/qwen3_tts_runner.py (`LMParts.runner`), with the spec of models/qwen3_tts_spec.py.

    options: those of `load_parts`, `prepare_stream` (models/qwen3_tts_spec.py `off_the_step`;
    default true), the runner's (models/qwen3_tts_runner.py `Qwen3TTSRunner`: `max_seq_len`, default
    2048 positions a slot; `max_codec_batch`; `max_prefill_batch`; the graph options), `max_running`.
    Raises InvalidModel.
    """
    from engine.runner import LMParts
    from models.qwen3_tts_runner import MAX_SEQ_LEN, Qwen3TTSRunner
    from models.qwen3_tts_spec import make_spec

    if path is None:
        raise InvalidModel("give the model folder")
    options = dict(options or {})
    max_seq_len = int(options.get("max_seq_len", MAX_SEQ_LEN))
    model = load_parts(Path(path), {**options, "max_seq_len": max_seq_len + 1}, device)
    return LMParts(make_spec(model, bool(options.get("prepare_stream", True))), model, model.codec, options,
                   runner=Qwen3TTSRunner)


def kv_cache_shape(path: Path | None, options: dict[str, Any], device: str) -> tuple[int, int, int, int, int]:
    """(layers, KV heads, head dim, positions a slot, bytes an element) of the talker's KV cache a load on
    `device` allocates (models/qwen3_tts_runner.py), from config.json alone: the memory guard's estimate
    (gateway/model_spec.py). Raises InvalidModel, OSError, ValueError, KeyError for a folder it cannot read."""
    import json

    from models.qwen3_tts_args import Args
    from models.qwen3_tts_runner import MAX_SEQ_LEN

    if path is None:
        raise InvalidModel("give the model folder")
    args = Args.from_hf(json.loads((Path(path) / "config.json").read_text()))
    name = options.get("dtype") or ("bfloat16" if device.startswith("cuda") else "float32")
    positions = int(options.get("max_seq_len", MAX_SEQ_LEN))
    return args.num_hidden_layers, args.num_key_value_heads, args.head_dim, positions, 4 if name == "float32" else 2


def validate_settings(settings: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A preset's `settings` for this family (models/qwen3_tts_spec.py `SETTINGS`: sampling,
    `instructions`, `language`), checked as a request's options are, for a model with these
    `options` (its `max_seq_len` bounds force_tokens); InvalidInput naming `settings.<key>`.
    Returns the given keys with their parsed values."""
    from models.qwen3_tts_runner import MAX_SEQ_LEN as SLOT_POSITIONS
    from models.qwen3_tts_spec import validate_settings as check

    return check(settings, GENERATION_DEFAULTS, int((options or {}).get("max_seq_len") or SLOT_POSITIONS))
