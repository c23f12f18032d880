"""A Llama-architecture LM's shapes (`Args`, Hugging Face `config.json` field names) and its
rotary tables (`rope_tables`, Llama-3 frequency scaling, as Hugging Face's LlamaRotaryEmbedding)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class Args:
    vocab_size: int = 128256
    hidden_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 24
    num_key_value_heads: int = 8
    intermediate_size: int = 8192
    rope_theta: float = 500000.0
    rope_scaling: dict[str, Any] | None = field(default_factory=lambda: {
        "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192})
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 131072

    def __post_init__(self) -> None:
        assert self.hidden_size % self.num_attention_heads == 0
        assert self.num_attention_heads % self.num_key_value_heads == 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Args:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in config.items() if k in names})

    def to_hf(self, **extra: Any) -> dict[str, Any]:
        """A Hugging Face `config.json` for these shapes; `extra` adds keys (token ids)."""
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                "head_dim": self.head_dim, **extra, **asdict(self)}


def rope_tables(args: Args, num_positions: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: float32 `[num_positions, head_dim]`, with Llama-3 frequency scaling.

    Computed in float32 like Hugging Face's LlamaRotaryEmbedding (the checkpoint was trained
    with it): at position 20000 float64 angles would differ from it by ~1e-3 rad.
    """
    dim = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    scaling = args.rope_scaling or {}
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor, old_len = float(scaling["factor"]), float(scaling["original_max_position_embeddings"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        inv_freq = torch.where(is_medium, scaled, inv_freq)
    freqs = torch.outer(torch.arange(num_positions, device=device).float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()
