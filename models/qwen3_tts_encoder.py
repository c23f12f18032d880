"""The 12 Hz speech tokenizer's encoder: a 24 kHz waveform -> codes int64 `[frames, 16]`.

The released `speech_tokenizer/` holds it under `encoder.*` (config: `encoder_config`, the
fields of transformers' `MimiConfig`, whose defaults `EncoderArgs` takes): Kyutai's Mimi
encoder (Défossez et al., "Moshi", 2024) without its decoder half. Attribute names follow the
checkpoint keys. Per clip:

1. a SEANet convolution stack, causal (zero left padding of kernel - stride, then right
   padding up to a whole last frame), downsampling by prod(upsampling_ratios) = 960 to 25 Hz;
2. a transformer over those frames (pre-LayerNorm, rotary positions, GELU MLP, layer scales),
   causal over the whole clip: qwen-tts runs transformers' Mimi with eager/SDPA attention,
   whose mask does not apply `sliding_window`, so neither does this (parity over the window is
   tested);
3. a causal stride-2 convolution (replicate padding) to 12.5 Hz;
4. split residual vector quantisation: one semantic codebook, then the acoustic ones on the
   same input, each projected 1x1 into the codebook space and quantised to the nearest entry
   (Euclidean; entries are `embed_sum / max(cluster_usage, 1e-5)`); the first
   `encoder_valid_num_quantizers` (16) codebooks are the codes, and a clip of N samples keeps
   ceil(N / 1920) frames, as qwen-tts's `Qwen3TTSTokenizerV2Model.encode` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920


@dataclass(frozen=True, slots=True)
class EncoderArgs:
    """`encoder_config` of `speech_tokenizer/config.json` (MimiConfig's defaults) plus the top
    level's `encoder_valid_num_quantizers`."""

    sampling_rate: int = SAMPLE_RATE
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "constant"
    compress: int = 2
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    use_conv_shortcut: bool = False
    vector_quantization_hidden_dimension: int = 256
    num_semantic_quantizers: int = 1
    upsample_groups: int = 512  # of Mimi's decoder half, which this encoder lacks (kept for the config)
    num_hidden_layers: int = 8
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int | None = None
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 250
    layer_scale_initial_scale: float = 0.01
    frame_rate: float = 12.5
    valid_num_quantizers: int = 16
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.use_causal_conv and self.audio_channels == 1, "the 12 Hz tokenizer's encoder is causal and mono"
        assert self.hidden_act == "gelu" and self.num_attention_heads % self.num_key_value_heads == 0
        assert self.num_semantic_quantizers < self.valid_num_quantizers <= self.num_quantizers

    @classmethod
    def from_hf(cls, config: dict[str, Any], valid_num_quantizers: int = 16) -> EncoderArgs:
        names = set(cls.__dataclass_fields__) - {"extra", "valid_num_quantizers"}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in names and v is not None}
        return cls(**values, valid_num_quantizers=valid_num_quantizers,
                   extra={k: v for k, v in config.items() if k not in names})

    def to_hf(self) -> dict[str, Any]:
        out = {n: getattr(self, n) for n in self.__dataclass_fields__ if n not in ("extra", "valid_num_quantizers")}
        return {**self.extra, **{k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}}

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def hop_length(self) -> int:
        """Samples per frame of the convolution stack (25 Hz: 960)."""
        return math.prod(self.upsampling_ratios)


class CausalConv(nn.Module):
    """Conv1d with causal padding: left (kernel - 1) * dilation + 1 - stride, right what
    makes the last window whole; `[B, C_in, N]` -> `[B, C_out, ceil(N / stride)]`."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1, bias: bool = True,
                 pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride, dilation=dilation, bias=bias)
        self.stride, self.effective_kernel = stride, (kernel - 1) * dilation + 1
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left, length = self.effective_kernel - self.stride, x.shape[-1]
        frames = math.ceil((length - self.effective_kernel + left) / self.stride + 1) - 1
        right = frames * self.stride + self.effective_kernel - left - length
        mode = "constant" if self.pad_mode in ("constant", "zero") else self.pad_mode
        return self.conv(F.pad(x, (left, right), mode=mode))


class ResnetBlock(nn.Module):
    """SEANet residual unit: ELU, conv k (dilated) to dim / compress, ELU, conv 1 back, plus the input."""

    def __init__(self, args: EncoderArgs, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // args.compress
        self.block = nn.ModuleList([nn.ELU(), CausalConv(dim, hidden, args.residual_kernel_size, dilation=dilation,
                                                         pad_mode=args.pad_mode),
                                    nn.ELU(), CausalConv(hidden, dim, 1, pad_mode=args.pad_mode)])
        self.shortcut = CausalConv(dim, dim, 1, pad_mode=args.pad_mode) if args.use_conv_shortcut else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.shortcut(x)
        for layer in self.block:
            x = layer(x)
        return residual + x


def _seanet(args: EncoderArgs) -> nn.ModuleList:
    """Audio `[B, 1, N]` -> `[B, hidden, N / hop_length]`, as `layers` of the checkpoint."""
    layers: list[nn.Module] = [CausalConv(args.audio_channels, args.num_filters, args.kernel_size,
                                          pad_mode=args.pad_mode)]
    width = args.num_filters
    for ratio in reversed(args.upsampling_ratios):
        layers += [ResnetBlock(args, width, args.dilation_growth_rate ** j) for j in range(args.num_residual_layers)]
        layers += [nn.ELU(), CausalConv(width, 2 * width, 2 * ratio, stride=ratio, pad_mode=args.pad_mode)]
        width *= 2
    layers += [nn.ELU(), CausalConv(width, args.hidden_size, args.last_kernel_size, pad_mode=args.pad_mode)]
    return nn.ModuleList(layers)


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class Attention(nn.Module):
    def __init__(self, args: EncoderArgs) -> None:
        super().__init__()
        h, d = args.hidden_size, args.dim_per_head
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_attention_heads, args.num_key_value_heads, d
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(proj: nn.Linear, n: int) -> torch.Tensor:
            return proj(x).view(b, t, n, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj, self.num_heads), heads(self.k_proj, self.num_kv_heads), \
            heads(self.v_proj, self.num_kv_heads)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.num_heads != self.num_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions, halves layout (Su et al., RoFormer): x `[B, heads, T, d]`, cos/sin `[T, d]`."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class TransformerLayer(nn.Module):
    def __init__(self, args: EncoderArgs) -> None:
        super().__init__()
        h = args.hidden_size
        self.input_layernorm = nn.LayerNorm(h, eps=args.norm_eps)
        self.self_attn = Attention(args)
        self.self_attn_layer_scale = LayerScale(h)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=args.norm_eps)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(h, args.intermediate_size, bias=False)
        self.mlp.fc2 = nn.Linear(args.intermediate_size, h, bias=False)
        self.mlp_layer_scale = LayerScale(h)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin))
        mlp = self.mlp.fc2(F.gelu(self.mlp.fc1(self.post_attention_layernorm(x))))
        return x + self.mlp_layer_scale(mlp)


class Transformer(nn.Module):
    def __init__(self, args: EncoderArgs) -> None:
        super().__init__()
        self.args = args
        self.layers = nn.ModuleList([TransformerLayer(args) for _ in range(args.num_hidden_layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, T, hidden]` -> `[B, T, hidden]`, positions 0..T-1."""
        d = self.args.dim_per_head
        inv_freq = 1.0 / (self.args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=x.device)
                                                    .float() / d))
        angles = torch.arange(x.shape[1], device=x.device).float()[:, None] * inv_freq[None]
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class Codebook(nn.Module):
    def __init__(self, args: EncoderArgs) -> None:
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(args.codebook_size))
        self.register_buffer("embed_sum", torch.zeros(args.codebook_size, args.codebook_dim))

    def entries(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class Quantizer(nn.Module):
    """`codebook` of each layer (a Mimi VectorQuantization) under `layers.N.codebook`."""

    def __init__(self, args: EncoderArgs, count: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(count):
            layer = nn.Module()
            layer.codebook = Codebook(args)
            self.layers.append(layer)
        dim = args.vector_quantization_hidden_dimension
        self.input_proj = nn.Conv1d(args.hidden_size, dim, 1, bias=False) if dim != args.hidden_size else None
        self.output_proj = nn.Conv1d(dim, args.hidden_size, 1, bias=False) if dim != args.hidden_size else None

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        """`[B, hidden, T]` -> codes int64 `[B, count, T]` (residual: each layer quantises what is left)."""
        residual = (self.input_proj(x) if self.input_proj is not None else x).transpose(1, 2)  # [B, T, dim]
        codes = []
        for layer in self.layers[:count]:
            entries = layer.codebook.entries()
            flat = residual.reshape(-1, residual.shape[-1])
            index = torch.cdist(flat[None].float(), entries[None].float(), p=2)[0].argmin(dim=-1)
            index = index.view(residual.shape[:-1])
            residual = residual - F.embedding(index, entries)
            codes.append(index)
        return torch.stack(codes, dim=1)


class SplitQuantizer(nn.Module):
    def __init__(self, args: EncoderArgs) -> None:
        super().__init__()
        self.args = args
        semantic = args.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = Quantizer(args, semantic)
        # only the valid codebooks are built: later ones never change earlier codes
        self.acoustic_residual_vector_quantizer = Quantizer(args, args.valid_num_quantizers - semantic)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        semantic = self.args.num_semantic_quantizers
        return torch.cat([self.semantic_residual_vector_quantizer.encode(x, semantic),
                          self.acoustic_residual_vector_quantizer.encode(x, self.args.valid_num_quantizers - semantic)],
                         dim=1)


class Encoder(nn.Module):
    """Module tree of the checkpoint's `encoder.*` keys (those of the valid codebooks)."""

    def __init__(self, args: EncoderArgs) -> None:
        super().__init__()
        self.args = args
        self.encoder = nn.Module()
        self.encoder.layers = _seanet(args)
        self.encoder_transformer = Transformer(args)
        ratio = int(math.ceil(args.sampling_rate / args.hop_length) / args.frame_rate)
        self.downsample = CausalConv(args.hidden_size, args.hidden_size, 2 * ratio, stride=2, bias=False,
                                     pad_mode="replicate")
        self.quantizer = SplitQuantizer(args)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """float32 audio `[B, N]` at 24 kHz -> codes int64 `[B, 16, ceil(N / 1920)]` (every frame)."""
        x = audio[:, None]
        for layer in self.encoder.layers:
            x = layer(x)
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        return self.quantizer.encode(self.downsample(x))


class SpeechEncoder:
    """The loaded encoder of a `speech_tokenizer/` folder, float32 on `device`."""

    def __init__(self, encoder: Encoder, device: torch.device | str = "cpu") -> None:
        self.encoder = encoder.to(device).requires_grad_(False).eval()
        self.device = torch.device(device)
        self.sample_rate = encoder.args.sampling_rate

    @classmethod
    def from_dir(cls, path: Path, device: torch.device | str = "cpu") -> SpeechEncoder:
        """`<path>/config.json` (`encoder_config`, `encoder_valid_num_quantizers`) + the `encoder.*`
        keys of `model.safetensors`. Raises KeyError (no encoder config) or RuntimeError (weights
        missing or of other shapes)."""
        import json

        from safetensors import safe_open

        config = json.loads((Path(path) / "config.json").read_text())
        args = EncoderArgs.from_hf(config["encoder_config"], int(config.get("encoder_valid_num_quantizers", 16)))
        with torch.device("meta"):
            encoder = Encoder(args)
        wanted = set(encoder.state_dict())
        state: dict[str, torch.Tensor] = {}
        with safe_open(str(Path(path) / "model.safetensors"), framework="pt", device=str(device)) as file:
            for key in file.keys():
                if key.removeprefix("encoder.") in wanted and key.startswith("encoder."):
                    state[key.removeprefix("encoder.")] = file.get_tensor(key).float()
        encoder.load_state_dict(state, strict=True, assign=True)
        return cls(encoder, device)

    @torch.inference_mode()
    def encode(self, audio: np.ndarray) -> torch.Tensor:
        """float32 mono audio `[N]` (N >= 1) at 24 kHz -> codes int64 `[ceil(N / 1920), 16]` (CPU)."""
        if audio.ndim != 1 or audio.shape[0] == 0:
            raise ValueError("the speech encoder needs mono audio of at least one sample at 24 kHz")
        wave = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None].to(self.device)
        codes = self.encoder(wave)[0]
        return codes[:, :-(-audio.shape[0] // SAMPLES_PER_FRAME)].transpose(0, 1).cpu()

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.encoder.state_dict().values())


# tiny: test widths and depth; the strides (960 then 2: 1920 samples a frame), the codebook
# count and size are the released ones, and the transformer's sliding_window is 4 frames so
# that a short clip reaches past it (the encoder does not apply it; see the module docstring).
ENCODER_FLAVORS: dict[str, EncoderArgs] = {
    "full": EncoderArgs(),
    "tiny": EncoderArgs(hidden_size=32, num_filters=4, codebook_dim=16, vector_quantization_hidden_dimension=16,
                        num_hidden_layers=2, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
                        sliding_window=4, upsample_groups=32),
}
for _name in ("0.6b", "1.7b"):
    ENCODER_FLAVORS[_name] = ENCODER_FLAVORS["full"]
