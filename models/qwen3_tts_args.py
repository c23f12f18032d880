"""Shapes and special ids of Qwen3-TTS-12Hz, read from a Hugging Face `config.json`.

A model folder's `config.json` (model_type `qwen3_tts`) nests `talker_config` (the
codebook-0 LM, its special codec ids, speakers and languages) and inside it
`code_predictor_config` (the depth transformer for codebooks 1..15); the top level holds
the text-side special ids and `tts_model_type` (`base`, `custom_voice`, `voice_design`).
Field names are those of qwen-tts's `configuration_qwen3_tts.py` (read for the format);
values not given take that file's defaults. The speech tokenizer's `decoder_config` is read
by `models/qwen3_tts_codec.py`.

The full-size numbers below (1.7B: hidden 2048, 28 layers, 16/8 heads of 128, MLP 6144;
0.6B: hidden 1024, MLP 3072; predictor: 5 layers, hidden 1024, MLP 3072; codec vocabulary
3072 of which 2048 are audio codes; text vocabulary 151936 at width 2048; rope theta 1e6
with M-RoPE sections [24, 20, 20]) and the special codec ids are from public descriptions
of the released checkpoints, not read from them here: a real `config.json` always wins.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

# Text-side special tokens of the Qwen2 tokenizer (qwen-tts configuration defaults).
IM_START = 151644  # <|im_start|>
IM_END = 151645  # <|im_end|>
TTS_PAD = 151671  # <|tts_pad|>: text input of frames after the text ran out
TTS_BOS = 151672  # <|tts_text_bos|>
TTS_EOS = 151673  # <|tts_text_eod|>
TEXT_VOCAB = 151936

NUM_CODE_GROUPS = 16  # codebooks per 80 ms frame: 1 from the talker, 15 from the predictor
CODEBOOK_SIZE = 2048  # audio codes per codebook; talker ids >= this are control tokens

LANGUAGES = {"chinese": 2055, "english": 2050, "german": 2052, "spanish": 2054, "japanese": 2058,
             "french": 2061, "korean": 2064, "russian": 2069, "italian": 2070, "portuguese": 2071,
             "beijing_dialect": 2074, "sichuan_dialect": 2062}
SPEAKERS = {"vivian": 3065, "serena": 3066, "uncle_fu": 3010, "dylan": 2878, "eric": 2875,
            "ryan": 3061, "aiden": 2861, "ono_anna": 2873, "sohee": 2864}
DIALECTS = {"dylan": "beijing_dialect", "eric": "sichuan_dialect"}

_A = TypeVar("_A")


def from_hf_config(cls: type[_A], config: dict[str, Any]) -> _A:
    """A dataclass with an `extra` dict from a Hugging Face config: its fields (lists as tuples),
    every other key kept in `extra` (written back by `hf_fields`' caller)."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in names and k != "extra"}
    return cls(**values, extra={k: v for k, v in config.items() if k not in names})  # type: ignore[call-arg]


def hf_fields(args: Any) -> dict[str, Any]:
    """A dataclass's fields but `extra` as Hugging Face config values (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in
            ((n, getattr(args, n)) for n in args.__dataclass_fields__) if k != "extra"}


@dataclass(frozen=True, slots=True)
class PredictorArgs:
    """`talker_config.code_predictor_config`: the depth transformer."""

    vocab_size: int = CODEBOOK_SIZE
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 5
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    num_code_groups: int = NUM_CODE_GROUPS

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> PredictorArgs:
        return cls(**{k: v for k, v in config.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class Args:
    """`talker_config` plus the top-level text ids: the talker (codebook 0) and its prompt."""

    vocab_size: int = 3072  # codec ids: 0..2047 audio codes, then control and speaker ids
    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    rope_scaling: dict[str, Any] = field(default_factory=lambda: {
        "rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True})
    text_vocab_size: int = TEXT_VOCAB
    text_hidden_size: int = 2048
    num_code_groups: int = NUM_CODE_GROUPS
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    spk_id: dict[str, int] = field(default_factory=lambda: dict(SPEAKERS))
    spk_is_dialect: dict[str, str | bool] = field(
        default_factory=lambda: {name: DIALECTS.get(name, False) for name in SPEAKERS})
    codec_language_id: dict[str, int] = field(default_factory=lambda: dict(LANGUAGES))
    predictor: PredictorArgs = field(default_factory=PredictorArgs)
    # top level of config.json
    tts_model_type: str = "custom_voice"
    tts_model_size: str = "1b7"
    im_start_token_id: int = IM_START
    im_end_token_id: int = IM_END
    tts_pad_token_id: int = TTS_PAD
    tts_bos_token_id: int = TTS_BOS
    tts_eos_token_id: int = TTS_EOS

    def __post_init__(self) -> None:
        assert self.num_attention_heads % self.num_key_value_heads == 0
        assert self.num_code_groups == self.predictor.num_code_groups
        assert self.predictor.vocab_size <= self.vocab_size

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Args:
        """From a whole `config.json` (model_type `qwen3_tts`). Raises KeyError, TypeError."""
        talker = dict(config["talker_config"])
        predictor = PredictorArgs.from_hf(talker.pop("code_predictor_config", {}) or {})
        fields = cls.__dataclass_fields__
        values = {k: v for k, v in talker.items() if k in fields and v is not None}
        if "head_dim" not in talker:
            values["head_dim"] = values.get("hidden_size", 2048) // values.get("num_attention_heads", 16)
        values.update({k: v for k, v in config.items() if k in fields and k not in values and v is not None})
        return cls(**values, predictor=predictor)

    def to_hf(self) -> dict[str, Any]:
        """The whole `config.json` in the released layout (qwen-tts reads it as `Qwen3TTSConfig`)."""
        talker = {k: v for k, v in asdict(self).items() if k not in _TOP_LEVEL and k != "predictor"}
        talker["code_predictor_config"] = {**asdict(self.predictor), "model_type": "qwen3_tts_talker_code_predictor",
                                           "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}
        talker.update(model_type="qwen3_tts_talker", hidden_act="silu", attention_bias=False,
                      tie_word_embeddings=False, max_position_embeddings=32768)
        top = {k: getattr(self, k) for k in _TOP_LEVEL}
        return {"architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
                "tokenizer_type": "qwen3_tts_tokenizer_12hz", **top, "talker_config": talker,
                "speaker_encoder_config": {"enc_dim": self.hidden_size, "sample_rate": 24000}}

    @property
    def voices(self) -> tuple[str, ...]:
        """Named speakers (CustomVoice) in config order; empty for Base and VoiceDesign."""
        return tuple(self.spk_id) if self.tts_model_type == "custom_voice" else ()


@dataclass(frozen=True, slots=True)
class CodecArgs:
    """`decoder_config` of the speech tokenizer's `config.json` (released values as defaults)."""

    codebook_size: int = 2048
    codebook_dim: int = 512
    hidden_size: int = 512
    latent_dim: int = 1024
    head_dim: int = 64
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    num_quantizers: int = 16
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 72
    layer_scale_initial_scale: float = 0.01
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536
    max_position_embeddings: int = 8000
    extra: dict[str, Any] = field(default_factory=dict)  # other fields, written back by to_hf

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> CodecArgs:
        return from_hf_config(cls, config)

    def to_hf(self) -> dict[str, Any]:
        return {**self.extra, **hf_fields(self), "hidden_act": "silu", "attention_bias": False,
                "attention_dropout": 0.0}

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)


_TOP_LEVEL = ("tts_model_type", "tts_model_size", "im_start_token_id", "im_end_token_id",
              "tts_pad_token_id", "tts_bos_token_id", "tts_eos_token_id")

_TINY_PREDICTOR = replace(PredictorArgs(), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=12)
FLAVORS: dict[str, Args] = {
    "full": Args(),  # 1.7B
    "0.6b": replace(Args(), hidden_size=1024, intermediate_size=3072, tts_model_size="0b6"),
    # tiny: test shapes; M-RoPE sections scaled to head_dim 16 (sum = head_dim / 2)
    "tiny": replace(Args(), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, text_hidden_size=32, predictor=_TINY_PREDICTOR,
                    rope_scaling={"rope_type": "default", "mrope_section": [3, 3, 2], "interleaved": True},
                    tts_model_size="tiny"),
}
FLAVORS["1.7b"] = FLAVORS["full"]

# The speech tokenizer's decoder. tiny shrinks widths and depth; strides, kernels and
# dilations are the released ones (so is 1920 samples per frame), and the sliding window is
# 8 frames instead of 72 so that short test streams reach past it.
CODEC_FLAVORS: dict[str, CodecArgs] = {
    "full": CodecArgs(),
    "tiny": replace(CodecArgs(), codebook_dim=16, hidden_size=32, latent_dim=32, head_dim=8, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2, sliding_window=8,
                    decoder_dim=64),
}
for _name in ("0.6b", "1.7b"):
    CODEC_FLAVORS[_name] = CODEC_FLAVORS["full"]
