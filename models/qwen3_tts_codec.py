"""Qwen3-TTS 12 Hz tokenizer, decoder side: 16 codes per 80 ms frame -> 24 kHz audio, streaming.

Module and attribute names equal the speech tokenizer checkpoint's keys under `decoder.`
(qwen-tts's `Qwen3TTSTokenizerV2Decoder`, read for the format). The path of a frame:
split residual VQ (codebook 0 and codebooks 1..15 each summed and projected by a 1x1 conv)
-> causal conv (k3) -> a causal transformer with sliding-window attention and layer scale
-> 2 x (transposed conv x2, ConvNeXt block) -> causal conv (k7) -> 4 blocks of (SnakeBeta,
causal transposed conv x8/x5/x4/x3, three dilated residual units) -> SnakeBeta -> causal conv
-> clamp to [-1, 1]. 1920 samples per frame.

Streaming. Every stage is causal, so the decoder runs chunk by chunk with a *cache* that
carries exactly what the next chunk needs from the past: each causal conv's last `(k - 1) *
dilation` input samples, each transposed conv's last input sample (a kernel of twice its
stride reaches one input back), and each transformer layer's last `sliding_window - 1` keys
and values plus the stream's position. A fresh cache is all zeros, which is what the
whole-sequence decoder pads with, so decoding in chunks of any size equals one whole decode
(up to float rounding; tests/models/test_qwen3_tts_codec.py checks both). The cache is a dict
of batched tensors, `[B, ...]` per entry: `CodecState` keeps one request's (batch 1), and the
runner keeps the same entries in device slots (models/qwen3_tts_codec_graphs.py). engine/chunk_plan.py plans
the chunks (models/qwen3_tts_spec.py `CHUNK_SHAPE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from models.qwen3_tts_args import CodecArgs
from models.qwen3_tts_codec_transformer import Cache, CodecTransformer
from models.qwen3_tts_stream import SAMPLE_RATE


class CausalConv(nn.Module):
    """Conv1d padded on the left only; streams with its last `(k - 1) * dilation` inputs."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.context = (kernel - 1) * dilation
        self.key = ""  # set by Decoder: this module's name, its entry in the cache

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        if not self.context:
            return self.conv(x)
        x = torch.cat([cache[self.key], x], dim=-1)
        cache[self.key] = x[..., -self.context:]
        return self.conv(x)


class CausalTransConv(nn.Module):
    """ConvTranspose1d cropped to `stride` outputs per input; a kernel longer than the stride
    also reaches `ceil(k / stride) - 1` inputs back, kept in the cache."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride = stride
        self.context = -(-kernel // stride) - 1
        self.key = ""

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        length = x.shape[-1]
        if self.context:
            x = torch.cat([cache[self.key], x], dim=-1)
            cache[self.key] = x[..., -self.context:]
        start = self.context * self.stride
        return self.conv(x)[..., start:start + length * self.stride]


class SnakeBeta(nn.Module):
    """x + sin(x * e^alpha)^2 / (e^beta + 1e-9), per channel (log-scale parameters)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, cache: Cache | None = None) -> torch.Tensor:
        alpha, beta = self.alpha.exp()[None, :, None], self.beta.exp()[None, :, None]
        return x + torch.sin(x * alpha).pow(2) / (beta + 1e-9)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        h = self.norm(self.dwconv(x, cache).transpose(1, 2))
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(h)))
        return x + h.transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x), cache)), cache)


class DecoderBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(c_in), CausalTransConv(c_in, c_out, 2 * rate, rate),
                                    *(ResidualUnit(c_out, d) for d in (1, 3, 9))])

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, cache)
        return x


class _Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        """`[size, dim]`: the running sum over the usage count (EMA codebook, eps 1e-5)."""
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class _VQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = _Codebook(size, dim)


class _Layers(nn.Module):
    def __init__(self, count: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_VQ(size, dim) for _ in range(count))


class _RVQ(nn.Module):
    """Residual VQ: codes of its codebooks -> sum of entries -> 1x1 conv. `input_proj` is the
    encoder side, kept so that the checkpoint loads strictly."""

    def __init__(self, count: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.vq = _Layers(count, size, dim)
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes int64 `[B, T, count]` -> `[B, io_dim, T]`."""
        total = sum(layer._codebook.table()[codes[..., i]] for i, layer in enumerate(self.vq.layers))
        return self.output_proj(torch.as_tensor(total).transpose(1, 2))


class SplitRVQ(nn.Module):
    def __init__(self, args: CodecArgs) -> None:
        super().__init__()
        dim = args.codebook_dim // 2
        self.rvq_first = _RVQ(1, args.codebook_size, dim, args.codebook_dim)
        self.rvq_rest = _RVQ(args.num_quantizers - 1, args.codebook_size, dim, args.codebook_dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes int64 `[B, T, 16]` -> `[B, codebook_dim, T]`."""
        return self.rvq_first.decode(codes[..., :1]) + self.rvq_rest.decode(codes[..., 1:])


class Decoder(nn.Module):
    """`decoder.*` of the speech tokenizer. `forward(codes, cache)` decodes the next frames."""

    def __init__(self, args: CodecArgs) -> None:
        super().__init__()
        self.args = args
        self.pre_transformer = CodecTransformer(args)
        self.quantizer = SplitRVQ(args)
        self.pre_conv = CausalConv(args.codebook_dim, args.latent_dim, 3)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalTransConv(args.latent_dim, args.latent_dim, f, f), ConvNeXtBlock(args.latent_dim)])
            for f in args.upsampling_ratios)
        dims = [args.decoder_dim // 2 ** i for i in range(len(args.upsample_rates) + 1)]
        self.decoder = nn.ModuleList([
            CausalConv(args.latent_dim, args.decoder_dim, 7),
            *(DecoderBlock(dims[i], dims[i + 1], rate) for i, rate in enumerate(args.upsample_rates)),
            SnakeBeta(dims[-1]), CausalConv(dims[-1], 1, 7)])
        for name, module in self.named_modules():
            if hasattr(module, "key"):
                module.key = name

    def new_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> Cache:
        """All-zero streaming state for `batch` new streams (see the module docstring)."""
        cache: Cache = {"positions": torch.zeros(batch, dtype=torch.int64, device=device)}
        for module in self.modules():
            if isinstance(module, (CausalConv, CausalTransConv)) and module.context:
                cache[module.key] = torch.zeros(batch, module.conv.in_channels, module.context,
                                                device=device, dtype=dtype)
        cache.update(self.pre_transformer.new_cache(batch, device, dtype))
        return cache

    def forward(self, codes: torch.Tensor, cache: Cache) -> torch.Tensor:
        """codes int64 `[B, n, 16]`: the next n frames of B streams; `cache` (updated in
        place) holds each stream's state. Returns float32 PCM `[B, n * 1920]` in [-1, 1]."""
        x = self.pre_conv(self.quantizer.decode(codes).to(self.pre_conv.conv.weight.dtype), cache)
        x = self.pre_transformer(x.transpose(1, 2), cache).transpose(1, 2)
        for blocks in self.upsample:
            for block in blocks:
                x = block(x, cache)
        for layer in self.decoder:
            x = layer(x, cache)
        return x[:, 0].clamp(-1, 1).float()


@dataclass(slots=True)
class CodecState:
    """One request's decoder state (batch-1 cache entries) and how many frames it has seen."""

    cache: Cache
    num_frames: int = 0


class Qwen3TTSCodec:
    """The 12 Hz decoder on a device; weights from a local speech-tokenizer folder only."""

    sample_rate = SAMPLE_RATE

    def __init__(self, decoder: Decoder, device: torch.device | str, dtype: torch.dtype = torch.float32) -> None:
        self.decoder = decoder.to(device=device, dtype=dtype).requires_grad_(False).eval()
        self.device, self.dtype = torch.device(device), dtype
        self.samples_per_frame = decoder.args.samples_per_frame

    @classmethod
    def from_dir(cls, path: Path, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> Qwen3TTSCodec:
        """`<path>/config.json` (`decoder_config`) + `model.safetensors` (`decoder.*` keys used)."""
        from safetensors.torch import load_file

        args = CodecArgs.from_hf(json.loads((Path(path) / "config.json").read_text())["decoder_config"])
        with torch.device("meta"):
            decoder = Decoder(args)
        state = {k.removeprefix("decoder."): v for k, v in load_file(str(Path(path) / "model.safetensors")).items()
                 if k.startswith("decoder.")}
        decoder.load_state_dict(state, strict=True, assign=True)
        return cls(decoder, device, dtype)

    def new_state(self) -> CodecState:
        return CodecState(self.decoder.new_cache(1, self.device, self.dtype))

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor, states: list[CodecState]) -> torch.Tensor:
        """frames: int64 `[B, n, 16]`, the next n frames of each of B streams, whose states
        advance by n. Returns float32 PCM `[B, n * 1920]` at 24 kHz."""
        assert frames.shape[0] == len(states)
        cache = {k: torch.cat([s.cache[k] for s in states]) for k in states[0].cache}
        pcm = self.decoder(frames.to(self.device), cache)
        for i, state in enumerate(states):
            state.cache = {k: v[i:i + 1] for k, v in cache.items()}
            state.num_frames += frames.shape[1]
        return pcm

    @torch.inference_mode()
    def decode_whole(self, frames: torch.Tensor) -> torch.Tensor:
        """frames int64 `[B, T, 16]` from the start of each stream -> float32 `[B, T * 1920]`."""
        return self.decoder(frames.to(self.device), self.decoder.new_cache(frames.shape[0], self.device, self.dtype))

    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.decoder.parameters())
