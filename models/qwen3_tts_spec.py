"""What the engine knows of a Qwen3-TTS model (`LMSpec`): requests prepared, frames as tokens.

A *token* here is a whole 80 ms frame. The talker and the code predictor make all 16 codes of
a frame in one engine step (models/qwen3_tts_runner.py), so the spec says one token per frame
(`tokens_per_frame = 1`, one talker position each) and a token is the frame packed into one
Python int, code j in bits `11 j .. 11 j + 10` (codes are < 2048); `frame_codes` unpacks it.
The stop token is `STOP` (-1), which no frame packs to. The scheduler needs no change for it:
it appends tokens, counts one KV position each, and hands `frame_codes` its frames.

A prompt is embeddings, not ids (models/qwen3_tts_prompt.py), so `prepare` returns a
`QwenPrepared`: the `Prompt` itself, the settings the generic `Sampling` lacks (top-k, the
code predictor's), and `prompt_ids` of the prompt's length (zeros: the scheduler only counts
them, for the KV slot and the prefill budget).

Chunks: models/qwen3_tts_stream.py's plan is `CHUNK_SHAPE`, the ramp 1, 2, 4, 8 frames with
no context on either side (the decoder is causal and keeps its state between calls, so
engine/chunk_plan.py's windows are exactly the chunks).

Instructions (`options.instructions`, the gateway's `instructions`): CustomVoice models take
them as a style, VoiceDesign models as the voice's description (none: qwen-tts's "no
instruction"); a Base model (it clones) and the 0.6B CustomVoice (qwen-tts drops them for it)
refuse them, field `instructions`.

Cloning (Base models): the request's `options["reference"]` is a
`models.qwen3_tts_references.ReferenceAudio` (the gateway's `/v1/audio/clone`, or a library
reference voice named as `voice`); `prepare` encodes it through the model's cache and builds
the clone prompt (models/qwen3_tts_prompt.py), so the runner needs nothing more. The request's
`voice` is then the reference's name (any string). A Base model without a reference is
refused (field `voice`), and so is a reference for another model type (field `model`).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from engine.chunk_plan import ChunkShape
from engine.lm_spec import LMSpec
from engine.request import Prepared
from engine.types import InvalidInput, SpeechRequest
from models.options import check_request, force_tokens_limit, parse_options
from models.qwen3_tts_args import LANGUAGES
from models.qwen3_tts_references import ReferenceAudio
from models.qwen3_tts_stream import CHUNK_FRAMES

FAMILY = "qwen3_tts"
CODE_BITS = 11  # codes 0..2047
NUM_CODES = 16
STOP = -1
CHUNK_SHAPE = ChunkShape(ramp=CHUNK_FRAMES, context_frames=0)
MAX_TEXT_CHARS = 2000
# The fewest talker rows a prompt has (models/qwen3_tts_prompt.py `build_prompt`): the role's 3
# tokens, 4 of the codec's tags and bos beside the text's pad and bos, and a row of the text.
MIN_PROMPT_ROWS = 8
MAX_FRAMES = 2048  # ~164 s; `max_new_tokens` of generation_config.json and the KV slot may lower it
SETTINGS = ("temperature", "top_p", "top_k", "repetition_penalty", "max_tokens", "seed", "force_tokens",
            "subtalker_temperature", "subtalker_top_p", "subtalker_top_k", "instructions", "language")


def pack_frame(codes: Sequence[int]) -> int:
    """16 codes (each 0..2047) -> one int token."""
    token = 0
    for j, code in enumerate(codes):
        token |= int(code) << (CODE_BITS * j)
    return token


def frame_codes(tokens: Sequence[int]) -> list[list[int]]:
    """Tokens (packed frames, one a frame) -> each frame's 16 codes, codebook 0 first; ValueError
    if one is not a frame."""
    mask, frames = (1 << CODE_BITS) - 1, []
    for token in tokens:
        if token < 0 or token >> (CODE_BITS * NUM_CODES):
            raise ValueError(f"token {token} is not a packed frame of {NUM_CODES} codes")
        frames.append([(token >> (CODE_BITS * j)) & mask for j in range(NUM_CODES)])
    return frames


@dataclass(frozen=True, slots=True)
class Extra:
    """Sampling settings beyond `engine.request.Sampling`: codebook 0's top-k, the predictor's."""

    top_k: int
    sub_temperature: float
    sub_top_k: int
    sub_top_p: float


@dataclass(frozen=True, slots=True)
class QwenPrepared(Prepared):
    """A prepared request: `prompt` is a `models.qwen3_tts_prompt.Prompt` (on the talker's device)."""

    prompt: Any = None
    extra: Extra | None = None


def _number(options: Mapping[str, Any], name: str, kind: type, default: Any, low: float, high: float) -> Any:
    value = options.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise InvalidInput(f"options.{name} must be a{'n integer' if kind is int else ' number'} in "
                           f"[{low}, {high}]", field=f"options.{name}")
    if not low <= value <= high:
        raise InvalidInput(f"options.{name} must be in [{low}, {high}], got {value}", field=f"options.{name}")
    return kind(value)


def parse_extra(options: Mapping[str, Any], generation: Mapping[str, Any], vocab: int) -> Extra:
    """`Extra` from a request's options over the model's generation defaults; raises InvalidInput."""
    sub_greedy = not generation.get("subtalker_dosample", True)
    return Extra(_number(options, "top_k", int, int(generation["top_k"]) or vocab, 1, vocab),
                 _number(options, "subtalker_temperature", float,
                         0.0 if sub_greedy else float(generation["subtalker_temperature"]), 0, 5),
                 _number(options, "subtalker_top_k", int, int(generation["subtalker_top_k"]) or vocab, 1, vocab),
                 _number(options, "subtalker_top_p", float, float(generation["subtalker_top_p"]), 1e-6, 1))


def _text_option(options: Mapping[str, Any], name: str) -> str | None:
    value = options.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string", field=name)
    return value or None


def check_instructions(args: Any, instructions: str | None) -> None:
    """Refuse instructions a model type does not follow, or a model this server cannot serve
    (see the module docstring); InvalidInput naming `instructions` or `model`."""
    kind, size = args.tts_model_type, args.tts_model_size
    if instructions and kind == "base":
        raise InvalidInput("a Base model clones a voice and does not follow instructions; use a CustomVoice or "
                           "VoiceDesign model", field="instructions")
    if instructions and kind == "custom_voice" and size == "0b6":
        raise InvalidInput("the 0.6B CustomVoice model does not follow instructions (qwen-tts drops them); use "
                           "the 1.7B one or leave instructions out", field="instructions")


MIN_REFERENCE_SAMPLES = 24000 // 2  # 0.5 s: the speaker encoder's statistics need some speech


def check_reference(model: Any, reference: object) -> ReferenceAudio | None:
    """The request's reference if the model clones with it; InvalidInput naming `voice` (a
    Base model without one), `model` (a reference for a model that does not clone) or
    `ref_audio` (not a recording, or too short)."""
    kind = model.args.tts_model_type
    if reference is None:
        if kind == "base":
            raise InvalidInput("a Base model speaks only in a cloned voice, which needs a reference recording: "
                               "POST /v1/audio/clone with ref_audio and ref_text, or name a reference voice "
                               "(/v1/voices/references) as voice", field="voice")
        return None
    if kind != "base":
        raise InvalidInput(f"a {kind} model does not clone voices; use a Base model (tts_model_type base)",
                           field="model")
    if not isinstance(reference, ReferenceAudio):
        raise InvalidInput("options.reference must be a recording", field="ref_audio")
    if not model.can_clone:
        raise InvalidInput("this Base model's folder has no speaker encoder or speech encoder weights, so it "
                           "cannot encode a reference", field="model")
    if reference.num_samples < MIN_REFERENCE_SAMPLES:
        raise InvalidInput(f"ref_audio is {reference.num_samples / 24000:.2f} s long; at least "
                           f"{MIN_REFERENCE_SAMPLES / 24000:g} s", field="ref_audio")
    return reference


_streams = threading.local()  # a prepare thread's own CUDA stream


@contextlib.contextmanager
def off_the_step(device: Any, enabled: bool = True) -> Iterator[None]:
    """Run a prepare thread's GPU work (a prompt's embeddings, a reference's encoders) on a CUDA
    stream of that thread's own, then wait for it alone. The worker replays each step's graphs
    on the legacy default stream, which synchronizes with every blocking stream: there each
    host-to-device copy of a prompt (its token ids) would wait for the step in flight, a step
    (~18 ms on the H200) per copy. PyTorch's pool streams are non-blocking. No-op on a CPU or
    with `enabled` false (the `prepare_stream` option)."""
    import torch

    if not enabled or torch.device(device).type != "cuda":
        yield
        return
    stream = getattr(_streams, "stream", None)
    if stream is None or stream.device != torch.device(device):
        stream = _streams.stream = torch.cuda.Stream(torch.device(device))
    with torch.cuda.stream(stream):
        yield
    stream.synchronize()  # what the worker reads later is complete


def make_spec(model: Any, prepare_stream: bool = True) -> LMSpec:
    """The engine's view of a loaded `models.qwen3_tts.Qwen3TTS`, with `prepare` building the
    prompt (thread-safe: embedding lookups only, so requests are prepared off the worker; on a
    GPU on a stream of their own, `off_the_step`)."""
    args, generation = model.args, dict(model.generation)
    voices = tuple(model.voices)
    greedy = not generation.get("do_sample", True)
    max_frames = min(MAX_FRAMES, int(generation.get("max_new_tokens") or MAX_FRAMES))
    spec: LMSpec

    def prepare(request: SpeechRequest) -> Prepared:
        options = request.options
        instructions = _text_option(options, "instructions")
        check_instructions(args, instructions)
        reference_audio = check_reference(model, options.get("reference"))
        # a cloned voice is named by its reference, whatever the model's own voices
        check_request(request, (request.voice,) if reference_audio else voices, MAX_TEXT_CHARS)
        language = _text_option(options, "language") or "auto"
        sampling = parse_options(spec, options)
        extra = parse_extra(options, generation, args.predictor.vocab_size)
        reference = None
        with off_the_step(model.talker.codec_head.weight.device, prepare_stream):
            if reference_audio is not None:
                try:
                    reference = model.reference(reference_audio)
                except ValueError as error:
                    raise InvalidInput(f"ref_audio cannot be encoded: {error}", field="ref_audio") from None
            try:
                prompt = model.prompt(request.text, None if reference else request.voice, instructions, language,
                                      reference)
            except ValueError as error:
                raise InvalidInput(str(error), field="options.language" if "language" in str(error) else "voice") \
                    from None
        return QwenPrepared(prompt_ids=(0,) * int(prompt.prefill.shape[0]), sampling=sampling, prompt=prompt,
                            extra=extra)

    spec = LMSpec(FAMILY, voices, prepare, frame_codes, (STOP,), 1, 0, args.predictor.vocab_size, CHUNK_SHAPE,
                  0.0 if greedy else float(generation["temperature"]), float(generation["top_p"]),
                  float(generation["repetition_penalty"]), max_frames, MAX_TEXT_CHARS)
    return spec


def validate_settings(settings: dict[str, Any], generation: Mapping[str, Any], max_seq_len: int) -> dict[str, Any]:
    """A preset's `settings` (keys `SETTINGS`), checked as a request's options are (force_tokens:
    at most what a KV slot of `max_seq_len` positions holds past the prompt's fixed rows);
    InvalidInput naming `settings.<key>`. Returns the given keys with their parsed values."""
    for key in settings:
        if key not in SETTINGS:
            raise InvalidInput(f"qwen3_tts has no setting {key!r}; settings: {', '.join(SETTINGS)}",
                               field=f"settings.{key}")
    spec = LMSpec(FAMILY, (), lambda r: Prepared(), frame_codes, (STOP,), 1, 0, 2048, CHUNK_SHAPE,
                  float(generation["temperature"]), float(generation["top_p"]),
                  float(generation["repetition_penalty"]), MAX_FRAMES)
    try:
        sampling = parse_options(spec, settings, force_tokens_limit(max_seq_len, MIN_PROMPT_ROWS))
        extra = parse_extra(settings, generation, 2048)
        texts = {name: _text_option(settings, name) for name in ("instructions", "language")}
        language = texts["language"]
        if language is not None and language.lower() not in ("auto", *LANGUAGES):  # the released models' table
            raise InvalidInput(f"options.language {language!r} is not one of auto, {', '.join(LANGUAGES)}",
                               field="options.language")
    except InvalidInput as error:
        field = (error.field or "").removeprefix("options.")
        raise InvalidInput(error.message.replace("options.", "settings.", 1), field=f"settings.{field}") from None
    names = {"subtalker_temperature": "sub_temperature", "subtalker_top_k": "sub_top_k",
             "subtalker_top_p": "sub_top_p"}
    values = {**texts, **{key: getattr(extra, names.get(key, key)) for key in ("top_k", *names)}}
    return {key: values[key] if key in values else getattr(sampling, key)
            for key in settings if settings[key] is not None}
