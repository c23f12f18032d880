"""Random Qwen3-TTS-12Hz checkpoints in the released folder layout (for tests and benchmarks).

`write_random(size, out_dir)` writes what a Hugging Face model folder holds:
- `config.json` (model_type `qwen3_tts`; `tts_model_type` the `model_type` argument: custom_voice
  by default, voice_design or base), `generation_config.json`;
- `model.safetensors` with the `talker.*` weights (tiny: float32; full sizes: bf16, in shards of
  <= 2 GiB with `model.safetensors.index.json` when larger, as models/checkpoint.py writes Orpheus');
- the text tokenizer as `vocab.json`, `merges.txt` and `tokenizer_config.json` (Qwen2 layout):
  the 256 byte-level pieces at ids 0..255 with no merges (one id per byte), unused fillers
  up to 151642, and the special tokens from 151643 on, so `<|im_start|>` (151644), `<|im_end|>`
  (151645) and the TTS pad/bos/eos (151671..151673) sit at their real ids;
- `speech_tokenizer/config.json` and `speech_tokenizer/model.safetensors` with the decoder's
  `decoder.*` weights, and for Base models (which encode reference audio) the encoder's
  `encoder.*` ones too, all 32 codebooks as released (models/qwen3_tts_encoder.py);
- Base models: the speaker encoder's `speaker_encoder.*` weights beside `talker.*`, with its
  `speaker_encoder_config` (models/qwen3_tts_speaker.py). Weights are seeded: the same
(size, seed) always writes the same files. Scales keep random activations O(1) and the
random audio mostly inside [-1, 1], so tests see real numbers, not a clamped or zero signal.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from models.qwen3_tts_args import CODEC_FLAVORS, FLAVORS, IM_END, IM_START, TTS_BOS, TTS_EOS, TTS_PAD, Args, CodecArgs
from models.qwen3_tts_encoder import ENCODER_FLAVORS, Encoder, EncoderArgs
from models.qwen3_tts_speaker import SPEAKER_FLAVORS, SpeakerArgs, SpeakerEncoder

FIRST_SPECIAL = 151643  # <|endoftext|>, then the other Qwen2 specials
_SPECIAL_NAMES = {151643: "<|endoftext|>", IM_START: "<|im_start|>", IM_END: "<|im_end|>",
                  TTS_PAD: "<|tts_pad|>", TTS_BOS: "<|tts_text_bos|>", TTS_EOS: "<|tts_text_eod|>"}
LAST_SPECIAL = 151675
GENERATION_CONFIG = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
                     "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0,
                     "subtalker_temperature": 0.9, "max_new_tokens": 8192}


def special_tokens() -> dict[int, str]:
    """id -> content of every added token of the random text tokenizer (contiguous ids)."""
    return {i: _SPECIAL_NAMES.get(i, f"<|reserved_{i - FIRST_SPECIAL}|>")
            for i in range(FIRST_SPECIAL, LAST_SPECIAL + 1)}


def write_text_tokenizer(folder: Path) -> None:
    """`vocab.json`, `merges.txt`, `tokenizer_config.json` of a byte-level Qwen2-layout tokenizer."""
    from tokenizers import pre_tokenizers

    vocab = {piece: i for i, piece in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({f"<|filler_{i}|>": i for i in range(len(vocab), FIRST_SPECIAL)})
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    added = {str(i): {"content": text, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
                      "special": True} for i, text in special_tokens().items()}
    config = {"tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": added, "bos_token": None,
              "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
              "model_max_length": 131072, "clean_up_tokenization_spaces": False, "errors": "replace",
              "split_special_tokens": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def _random_tensors(module: nn.Module, prefix: str, generator: torch.Generator,
                    dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every parameter of a meta-device `module`, one at a time."""
    def randn(shape: torch.Size, std: float, mean: float = 0.0) -> torch.Tensor:
        return (torch.randn(shape, generator=generator) * std + mean).to(dtype)

    for module_name, sub in module.named_modules():
        for name, param in sub.named_parameters(recurse=False):
            full = f"{prefix}{module_name}.{name}" if module_name else f"{prefix}{name}"
            shape, kind = param.shape, type(sub).__name__
            if kind in ("RMSNorm", "LayerNorm"):
                tensor = torch.ones(shape, dtype=dtype) if name == "weight" else randn(shape, 0.02)
            elif name == "bias":
                tensor = randn(shape, 0.02)
            elif kind == "Embedding":
                tensor = randn(shape, 1.0)
            elif kind == "_Codebook":  # positive usage counts; entries of unit scale after the division
                tensor = (torch.rand(shape, generator=generator) + 0.5).to(dtype) if name == "cluster_usage" \
                    else randn(shape, 1.0)
            elif kind == "SnakeBeta":  # log-scales around 0 (alpha = beta = 1)
                tensor = randn(shape, 0.1)
            elif kind in ("LayerScale", "ConvNeXtBlock"):  # residual branch gains (scale, gamma)
                tensor = randn(shape, 0.05, 0.3)
            elif kind == "ConvTranspose1d":  # [in, out, k]: each output sums in * k / stride inputs
                tensor = randn(shape, (shape[0] * shape[2] / sub.stride[0]) ** -0.5)
            else:  # Linear [out, in], Conv1d [out, in / groups, k]: std 1/sqrt(fan_in)
                tensor = randn(shape, math.prod(shape[1:]) ** -0.5)
            yield full, tensor


MODEL_TYPES = ("custom_voice", "voice_design", "base")  # config.json tts_model_type


def write_random(size: str, out_dir: Path, seed: int = 0, model_type: str = "custom_voice") -> Path:
    """Write a random Qwen3-TTS flavor `size` (tiny, 0.6b, 1.7b = full) of `model_type` (CustomVoice:
    named speakers; VoiceDesign: described voices; Base: cloning, with the speaker encoder and
    the speech encoder) under `out_dir`; ValueError for an unknown size or type."""
    from models.checkpoint import _save_shards, save_safetensors
    from models.qwen3_tts_codec import Decoder
    from models.qwen3_tts_talker import Talker

    if size not in FLAVORS:
        raise ValueError(f"size must be one of {', '.join(FLAVORS)}, got {size!r}")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"type must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
    args, codec_args = dataclasses.replace(FLAVORS[size], tts_model_type=model_type), CODEC_FLAVORS[size]
    out_dir = Path(out_dir)
    speech = out_dir / "speech_tokenizer"
    speech.mkdir(parents=True, exist_ok=True)
    dtype = torch.float32 if size == "tiny" else torch.bfloat16
    generator = torch.Generator().manual_seed(seed)
    config = {**args.to_hf(), "torch_dtype": str(dtype).removeprefix("torch.")}
    base = model_type == "base"
    if base:
        config["speaker_encoder_config"] = dataclasses.replace(SPEAKER_FLAVORS[size], enc_dim=args.hidden_size).to_hf()
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    with torch.device("meta"):
        talker = Talker(args)
    tensors: Iterator[tuple[str, torch.Tensor]] = _random_tensors(talker, "talker.", generator, dtype)
    if base:  # its own generator: the talker's and the decoder's weights stay those of the other types
        with torch.device("meta"):
            speaker = SpeakerEncoder(SpeakerArgs.from_hf(config["speaker_encoder_config"]))
        tensors = itertools.chain(tensors, _random_tensors(speaker, "speaker_encoder.",
                                                           torch.Generator().manual_seed(seed + 1), dtype))
    _save_shards(tensors, out_dir)
    write_text_tokenizer(out_dir)

    encoder_args = ENCODER_FLAVORS[size]
    (speech / "config.json").write_text(json.dumps(speech_tokenizer_config(codec_args, encoder_args), indent=2))
    with torch.device("meta"):
        decoder = Decoder(codec_args)
    decoder_tensors = dict(_random_tensors(decoder, "decoder.", generator, torch.float32))
    for name in decoder_tensors:  # residual units add a third of a unit each: the signal stays O(1) over 12
        if name.endswith(".conv2.conv.weight"):
            decoder_tensors[name] *= 0.3
    # the last conv makes the waveform: keep random audio mostly inside the [-1, 1] clamp
    decoder_tensors["decoder.decoder.6.conv.weight"] *= 0.15
    if base:
        decoder_tensors.update(_encoder_tensors(encoder_args, torch.Generator().manual_seed(seed + 2)))
    save_safetensors(decoder_tensors, speech / "model.safetensors")
    return out_dir


def _encoder_tensors(args: EncoderArgs, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """`encoder.*` of a random speech encoder: the parameters, and all `num_quantizers` codebooks
    (buffers: `initialized`, `cluster_usage` > 0, `embed_sum`) as the released file holds them."""
    full = dataclasses.replace(args, valid_num_quantizers=args.num_quantizers)
    with torch.device("meta"):
        encoder = Encoder(full)
    tensors = dict(_random_tensors(encoder, "encoder.", generator, torch.float32))
    for name, buffer in encoder.named_buffers():
        if name.endswith("initialized"):
            tensors[f"encoder.{name}"] = torch.ones(buffer.shape)
        elif name.endswith("cluster_usage"):
            tensors[f"encoder.{name}"] = torch.rand(buffer.shape, generator=generator) + 0.5
        else:  # entries embed_sum / usage of unit scale, as the projected activations
            tensors[f"encoder.{name}"] = torch.randn(buffer.shape, generator=generator)
    return tensors


def speech_tokenizer_config(codec: CodecArgs, encoder: EncoderArgs | None = None) -> dict[str, object]:
    """`speech_tokenizer/config.json` in the released layout (qwen-tts's `Qwen3TTSTokenizerV2Config`)."""
    encoder = encoder or ENCODER_FLAVORS["full"]
    return {"architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": "qwen3_tts_tokenizer_12hz",
            "encoder_valid_num_quantizers": codec.num_quantizers, "input_sample_rate": 24000,
            "output_sample_rate": 24000, "decode_upsample_rate": codec.samples_per_frame,
            "encode_downsample_rate": codec.samples_per_frame, "decoder_config": codec.to_hf(),
            "encoder_config": encoder.to_hf()}


