"""Family `orpheus`: Orpheus-TTS 3B, a Llama-3.2-3B speech LM over SNAC 24 kHz codes.

Prompt and token ids (the English fine-tune `canopylabs/orpheus-3b-0.1-ft`): learned
from the authors' repo canopyai/Orpheus-TTS (`orpheus_tts_pypi/orpheus_tts/engine_class.py`
builds `[start_of_human] tokens("<voice>: <text>") [end_of_text, end_of_human,
start_of_ai, start_of_speech]`; `decoder.py` maps `<custom_token_N>` to codes with
`N - 10 - 4096 * (index % 7)`; `pretrain/train.py` adds `7 * 4096 + 10` tokens after
the 128256 Llama-3 tokens; `realtime_streaming_example/main.py` stops on 128258) and
their data-prep notebooks (`start_of_speech = 128256 + 1` ... `audio_tokens_start =
128256 + 10`). The shape is Llama-3.2-3B's (28 layers, 3072 hidden, 24/8 heads, 8192
MLP, rope theta 500000, llama3 scaling x32, tied head); the vocabulary, 156940 =
128256 + 28684 custom tokens, is the size a public GGML port of the fine-tune declares
(the training script's 28683 new tokens, padded). The README lists the voices in order
of realism and says `repetition_penalty >= 1.1` is needed for stable output, and that a
higher penalty makes speech faster. Not verified against the real weights here.

Audio: each codec frame (85.33 ms of 24 kHz audio) is 7 tokens. Token k of a frame
(k = 0..6) is `AUDIO_TOKEN_BASE + 4096 * k + code`, and the 7 codes fill SNAC's three
codebooks as coarse `[k0]`, middle `[k1, k4]`, fine `[k2, k3, k5, k6]`. A generation
that stops mid-frame loses that partial frame (as the authors' decoder does).

Streaming (`CHUNK_SHAPE`, engine/chunk_plan.py): the first chunk is 1 frame (85 ms) and
is ready once 2 frames (14 tokens) exist, 1 being right context (`RAMP_CONTEXT`;
SNAC's receptive field is 3, models/snac.py, which later chunks keep, so they equal a
whole decode); later chunks are 2, 4, then 8 frames (171, 341, 683 ms).

The backbone is models/llama.py. `load` returns the model's parts (`engine.runner.LMParts`);
the engine builds the runner. `make_spec` gives what the engine needs to know, including
`prepare`: a request's validation and its prompt, tokenised once before it is queued.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

import torch

from engine.chunk_plan import ChunkShape
from engine.lm_spec import LMSpec
from models.model_options import FLAG, PATH, Option, at_least, check_options, one_of
from models.options import check_request, force_tokens_limit, parse_options
from engine.request import Prepared
from engine.runner import LMParts
from engine.types import InvalidInput, SpeechRequest
from models import InvalidModel
from models.file_checks import check_weights
from models.llama import LlamaLM
from models.llama_args import Args
from models.orpheus_frames import (  # noqa: F401  (re-exported: orpheus.frame_codes etc.)
    AUDIO_TOKEN_BASE, CODEBOOK_SIZE, SNAC_ORDER, TOKENS_PER_FRAME, audio_token, frame_codes)
from models.snac import CONTEXT_FRAMES

FAMILY = "orpheus"

# -- token ids of the fine-tuned model (see module docstring for sources) ------------
LLAMA_VOCAB = 128256  # Llama-3 tokenizer size; Orpheus tokens follow it
BEGIN_OF_TEXT = 128000  # <|begin_of_text|>, what the Llama tokenizer prepends
END_OF_TEXT = 128009  # <|eot_id|>
START_OF_SPEECH = LLAMA_VOCAB + 1  # 128257
END_OF_SPEECH = LLAMA_VOCAB + 2  # 128258, the stop token
START_OF_HUMAN = LLAMA_VOCAB + 3  # 128259
END_OF_HUMAN = LLAMA_VOCAB + 4  # 128260
START_OF_AI = LLAMA_VOCAB + 5  # 128261
END_OF_AI = LLAMA_VOCAB + 6  # 128262
PAD_TOKEN = LLAMA_VOCAB + 7  # 128263
assert AUDIO_TOKEN_BASE == LLAMA_VOCAB + 10  # the audio tokens (models/orpheus_frames.py) follow the markers
VOCAB_SIZE = 156940  # 128256 + <custom_token_0..28683> (7 * 4096 + 10 used, 2 spare)
STOP_TOKEN_IDS = (END_OF_SPEECH,)

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")  # default first
# Sampling defaults: temperature and top-p as the authors' package; a repetition
# penalty of 1.1, the lowest the README calls stable, so speaking rate stays natural.
TEMPERATURE = 0.6
TOP_P = 0.8
REPETITION_PENALTY = 1.1
DTYPES = ("bfloat16", "float16", "float32", "fp8")  # options.dtype; fp8: bf16 with FP8 projections (CUDA)
CODEC_DTYPES = ("float32", "bfloat16", "float16")  # options.codec_dtype: the SNAC decoder's (default float32)
MAX_TOKENS = 2048  # ~25 s of audio (82 tokens/s); options["max_tokens"] may lower it
MAX_TEXT_CHARS = 2000
# The first chunk's window has 1 frame of right context, not SNAC's 3: first audio after 14
# decode steps instead of 28, its 85 ms at a median 39 dB signal-to-error against a
# full-context decode (bench/results/first_chunk.md); later chunks stay exact.
RAMP_CONTEXT = 1
CHUNK_SHAPE = ChunkShape(ramp=(1, 2, 4, 8), context_frames=CONTEXT_FRAMES, ramp_context=RAMP_CONTEXT)


def prompt_ids(text_ids: Sequence[int]) -> list[int]:
    """Wrap the tokenized `"<voice>: <text>"` (no special tokens) in Orpheus' markers."""
    return [START_OF_HUMAN, BEGIN_OF_TEXT, *text_ids, END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]


# A model's options (checked when it is added, models/model_options.py): load's and the
# runner's (models/lm_runner.py RunnerConfig; tests/models/test_orpheus.py keeps them in step).
OPTIONS: dict[str, Option] = {
    "backbone_path": PATH, "codec_path": PATH, "random_weights": FLAG, "dtype": one_of(*DTYPES),
    "ramp_context": Option("int", lambda v: 0 <= v <= CONTEXT_FRAMES, f"an integer 0..{CONTEXT_FRAMES}"),
    "max_seq_len": at_least(2), "enforce_eager": FLAG, "compile_layers": FLAG, "max_codec_batch": at_least(1),
    "codec_graph_batches": Option("ints"), "triton_attention": FLAG, "fused_attention": FLAG, "attn_block": at_least(1),
    "graph_batches": Option("ints"), "lanes": FLAG, "lm_sms": at_least(0), "codec_sms": at_least(0),
    "urgent_codec_batch": at_least(1), "max_prefill_batch": at_least(1), "gemv": FLAG,
    "split_k": FLAG, "fused_rows": FLAG, "fused_sampler": FLAG, "pdl": FLAG, "skinny_rows": FLAG, "codec_dtype": one_of(*CODEC_DTYPES)}

FLAVORS: dict[str, Args] = {
    "full": Args(vocab_size=VOCAB_SIZE),  # Llama-3.2-3B shape with the Orpheus vocabulary
    "tiny": Args(vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128),
}


# -- loading ----------------------------------------------------------------------------

def _folders(path: Path | None, options: dict[str, Any]) -> tuple[Path, Path]:
    """(backbone, codec) folders: `<path>/backbone`, `<path>/codec` unless options name them."""
    backbone = options.get("backbone_path") or (Path(path) / "backbone" if path is not None else None)
    codec = options.get("codec_path") or (Path(path) / "codec" if path is not None else None)
    if backbone is None or codec is None:
        raise InvalidModel("give a model folder or both options.backbone_path and options.codec_path")
    return Path(backbone), Path(codec)


def kv_cache_shape(path: Path | None, options: dict[str, Any], device: str) -> tuple[int, int, int, int, int]:
    """(layers, KV heads, head dim, positions a slot, bytes an element) of the KV cache a load on `device`
    allocates (models/lm_runner.py `_allocate_kv_cache`), from config.json alone: the memory guard's
    estimate (gateway/model_spec.py). Raises InvalidModel, OSError, ValueError, KeyError for a folder it
    cannot read."""
    from models.lm_runner import RunnerConfig

    backbone, _ = _folders(path, options)
    args = Args.from_hf(json.loads((backbone / "config.json").read_text()))
    name = options.get("dtype") or ("bfloat16" if device.startswith("cuda") else "float32")
    positions = int(options.get("max_seq_len") or RunnerConfig().max_seq_len)
    return args.num_hidden_layers, args.num_key_value_heads, args.head_dim, positions, 4 if name == "float32" else 2


def _weight_files(backbone: Path) -> list[Path]:
    single = backbone / "model.safetensors"
    if single.is_file():
        return [single]
    index = backbone / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise InvalidModel(f"{index} is not a safetensors index (a weight_map of shard names): {error}") \
                from error
        missing = [s for s in shards if not (backbone / s).is_file()]
        if missing:
            raise InvalidModel(f"{backbone} lacks shards {', '.join(missing)}")
        return [backbone / s for s in shards]
    raise InvalidModel(f"{backbone} has neither model.safetensors nor model.safetensors.index.json")


def validate(path: Path | None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check an Orpheus folder (backbone/ + codec/) without loading weights: configs, tokenizer,
    and every weight file readable to its end (models/file_checks.py); facts for the library.
    Raises InvalidModel."""
    from tokenizers import Tokenizer

    check_options(options, OPTIONS, FAMILY)
    if path is not None and not ((options or {}).get("backbone_path") and (options or {}).get("codec_path")):
        if not Path(path).is_dir():
            raise InvalidModel(f"{path} does not exist" if not Path(path).exists() else
                               f"{path} is not a folder (an Orpheus model is a folder of backbone/ and codec/)")
    backbone, codec = _folders(path, options or {})
    for required in (backbone / "config.json", backbone / "tokenizer.json", codec / "config.json"):
        if not required.is_file():
            raise InvalidModel(f"{required} is missing")
    try:
        args = Args.from_hf(json.loads((backbone / "config.json").read_text()))
    except (ValueError, TypeError, AssertionError) as error:
        raise InvalidModel(f"{backbone / 'config.json'} is not a Llama config: {error}") from error
    if args.vocab_size < VOCAB_SIZE:
        raise InvalidModel(f"vocab_size {args.vocab_size} < {VOCAB_SIZE}: not an Orpheus fine-tune")
    tokenizer = Tokenizer.from_file(str(backbone / "tokenizer.json"))
    if tokenizer.token_to_id(f"<custom_token_{AUDIO_TOKEN_BASE - LLAMA_VOCAB}>") != AUDIO_TOKEN_BASE:
        raise InvalidModel(f"{backbone / 'tokenizer.json'} lacks the Orpheus audio tokens at {AUDIO_TOKEN_BASE}")
    codec_weights = [codec / n for n in ("pytorch_model.bin", "model.safetensors") if (codec / n).is_file()]
    if not codec_weights:
        raise InvalidModel(f"{codec} has neither pytorch_model.bin nor model.safetensors")
    files = ([] if (options or {}).get("random_weights") else _weight_files(backbone)) + codec_weights
    check_weights(files)
    return {"voices": list(VOICES), "sample_rate": 24000, "size_bytes": sum(f.stat().st_size for f in files),
            "num_layers": args.num_hidden_layers, "hidden_size": args.hidden_size}


def validate_settings(settings: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A preset's `settings` for this family, checked by `models.options.parse_options` as a
    request's options are: temperature, top_p, repetition_penalty, max_tokens, seed,
    force_tokens (at most what the KV slot of a model with these `options` holds: its
    `max_seq_len` less the prompt's fixed tokens). Raises InvalidInput with field
    `settings.<key>` for an unknown key or a bad value; returns the given keys with their
    parsed values.
    """
    from models.lm_runner import RunnerConfig

    spec = make_spec(None)
    known = ("temperature", "top_p", "repetition_penalty", "max_tokens", "seed", "force_tokens")
    for key in settings:
        if key not in known:
            raise InvalidInput(f"orpheus has no setting {key!r}; settings: {', '.join(known)}", field=f"settings.{key}")
    max_seq_len = int((options or {}).get("max_seq_len") or RunnerConfig().max_seq_len)
    try:
        parsed = parse_options(spec, settings, force_tokens_limit(max_seq_len, len(prompt_ids([]))))
    except InvalidInput as error:
        field = (error.field or "").removeprefix("options.")
        raise InvalidInput(error.message.replace("options.", "settings.", 1), field=f"settings.{field}") from None
    return {key: getattr(parsed, key) for key in settings if settings[key] is not None}


def random_backbone(args: Args, device: torch.device | str, dtype: torch.dtype, seed: int = 0) -> LlamaLM:
    """Random weights of `args`' shapes on `device` (norms 1, the rest N(0, 1/fan_in)), tied
    head: the compute of a real checkpoint without reading one (GPU benchmarks)."""
    with torch.device("meta"):
        model = LlamaLM(args)
    model = model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0) if name.endswith("norm.weight") else param.normal_(0.0, param.shape[-1] ** -0.5,
                                                                                  generator=generator)
    if args.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(dtype).eval()


def load_backbone(backbone: Path, device: torch.device | str, dtype: torch.dtype, random_weights: bool = False) -> LlamaLM:
    """Build on the meta device, then assign the safetensors weights (cast to `dtype`);
    `random_weights`: `random_backbone` instead (no weight files read)."""
    from safetensors.torch import load_file

    args = Args.from_hf(json.loads((backbone / "config.json").read_text()))
    if random_weights:
        return random_backbone(args, device, dtype)
    with torch.device("meta"):
        model = LlamaLM(args)
    state: dict[str, torch.Tensor] = {}
    for file in _weight_files(backbone):
        state.update({k: v.to(dtype) for k, v in load_file(str(file), device=str(device)).items()})
    if args.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as error:
        raise InvalidModel(f"{backbone}: weights do not match config.json: {error}") from error
    if args.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def make_spec(tokenizer: Any, ramp_context: int = RAMP_CONTEXT) -> LMSpec:
    """The engine's view of Orpheus, with `prepare` tokenising through `tokenizer` (a
    `tokenizers.Tokenizer`; thread-safe, so requests are prepared off the worker);
    `ramp_context` (0..3): right context of the first chunk's codec window."""
    spec: LMSpec

    def prepare(request: SpeechRequest) -> Prepared:
        check_request(request, VOICES, MAX_TEXT_CHARS)
        sampling = parse_options(spec, request.options)
        text_ids = tokenizer.encode(f"{request.voice}: {request.text}", add_special_tokens=False).ids
        return Prepared(prompt_ids=tuple(prompt_ids(text_ids)), sampling=sampling)

    spec = LMSpec(FAMILY, VOICES, prepare, frame_codes, STOP_TOKEN_IDS, TOKENS_PER_FRAME, AUDIO_TOKEN_BASE,
                  CODEBOOK_SIZE, dataclasses.replace(CHUNK_SHAPE, ramp_context=ramp_context),
                  TEMPERATURE, TOP_P, REPETITION_PENALTY, MAX_TOKENS, MAX_TEXT_CHARS)
    return spec


def load(model_id: str, path: Path | None, options: dict[str, Any] | None = None, device: str = "cpu") -> LMParts:
    """Load backbone + codec; returns the parts the engine builds a runner from.

    options: `backbone_path`, `codec_path`, `random_weights` (benchmarks: random weights of
    config.json's shapes, no weight files read), `dtype` ("bfloat16" | "float16" | "float32" | "fp8"; default
    bf16 on CUDA, float32 on CPU; "fp8": bf16 with the layers' projections in float8_e4m3fn, CUDA
    only, models/gemv.py), `gemv` (one-row bf16 decode matmuls on Triton; default on), `split_k` (FP8
    matmuls of 2-64 rows on models/gemv.py split_k_linear; default on), `fused_rows` (one-row decode steps on
    models/llama.py forward_rows: norms folded, five kernels a layer; default on), `fused_sampler` (sampling and
    slot update in one kernel, models/sample_step.py; default on), `pdl` (the one-row steps' kernels
    with programmatic dependent launch, sm90+; default on), `skinny_rows` (decode steps of 2-64 rows the same
    way on the tensor cores, models/skinny.py, bf16 only; default on), `ramp_context` (right context of the first chunk, 0..3,
    default RAMP_CONTEXT), `codec_dtype` (the SNAC decoder's weights and activations: "float32", the default,
    "bfloat16" or "float16"; PCM is float32 either way; bench/results/codec_dtype.md), and runner settings (models/lm_runner.py `RunnerConfig`:
    `max_seq_len`, `enforce_eager`, `max_codec_batch`, `compile_layers` (GPU: slower load,
    faster decode; see bench/results/orpheus_decode.md), `triton_attention`), `max_running`.
    Raises InvalidModel for a folder that is not an Orpheus checkpoint.
    """
    from tokenizers import Tokenizer

    from models.snac import SnacCodec

    options = dict(options or {})
    validate(path, options)
    backbone, codec_dir = _folders(path, options)
    on_gpu = torch.device(device).type == "cuda"
    name = options.get("dtype") or ("bfloat16" if on_gpu else "float32")
    if name == "fp8" and not on_gpu:
        raise InvalidModel("options.dtype fp8 needs a CUDA device (its matmuls are Triton kernels)", field="options.dtype")
    options["fp8"] = name == "fp8"
    dtype = torch.bfloat16 if name == "fp8" else getattr(torch, name)
    model = load_backbone(backbone, device, dtype, bool(options.get("random_weights")))
    codec = SnacCodec.from_dir(codec_dir, device, getattr(torch, options.get("codec_dtype") or "float32"))
    first = int(options.get("ramp_context", RAMP_CONTEXT))
    if not 0 <= first <= CONTEXT_FRAMES:
        raise InvalidModel(f"options.ramp_context must be 0..{CONTEXT_FRAMES}, got {first}",
                           field="options.ramp_context")
    spec = make_spec(Tokenizer.from_file(str(backbone / "tokenizer.json")), first)
    return LMParts(spec, model, codec, options)
