"""The Base model's speaker encoder: reference audio -> an x-vector, the speaker row of a clone prompt.

An ECAPA-TDNN (Desplanques et al., "ECAPA-TDNN: Emphasized Channel Attention, Propagation
and Aggregation in TDNN Based Speaker Verification", Interspeech 2020) over a log-mel
spectrogram, as Qwen3-TTS's Base checkpoints hold it under `speaker_encoder.*` with the
shapes of `config.json`'s `speaker_encoder_config`. Attribute names follow the checkpoint keys.
The front end is qwen-tts's `mel_spectrogram` as `extract_speaker_embedding` calls it (read for
the format, checked by tests/models/test_qwen3_tts_encoders.py): 24 kHz mono float32, reflect
padding of (n_fft - hop) / 2 each side, a Hann-windowed STFT without centring, magnitudes
sqrt(re^2 + im^2 + 1e-9), Slaney mel filters (librosa's, the library the reference uses for
them, so the filter bank is the same numbers), then log(max(mel, 1e-5)).

Every convolution pads "same" by reflection (the checkpoint's convolutions were trained so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.qwen3_tts_args import from_hf_config, hf_fields

SAMPLE_RATE = 24000
N_FFT, HOP, WINDOW, NUM_MELS, F_MAX = 1024, 256, 1024, 128, 12000  # extract_speaker_embedding's
MIN_SAMPLES = N_FFT  # the reflect padding needs more samples than it pads; 43 ms


@dataclass(frozen=True, slots=True)
class SpeakerArgs:
    """`speaker_encoder_config` of a Base model's `config.json` (qwen-tts's defaults)."""

    mel_dim: int = NUM_MELS
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = SAMPLE_RATE
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert len(self.enc_channels) == len(self.enc_kernel_sizes) == len(self.enc_dilations) >= 3

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> SpeakerArgs:
        return from_hf_config(cls, config)

    def to_hf(self) -> dict[str, Any]:
        return {**self.extra, **hf_fields(self)}


def _conv(cin: int, cout: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TimeDelay(nn.Module):
    """Conv1d + ReLU (a TDNN layer): `[B, C_in, T]` -> `[B, C_out, T]`."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2Net(nn.Module):
    """Channels split into `scale` groups; group i > 0 goes through its own TDNN after adding
    group i - 1's output (i > 1), group 0 passes through (Gao et al., Res2Net, 2019)."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList([TimeDelay(width, width, kernel, dilation) for _ in range(scale - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        previous = parts[0]
        outs = [previous]
        for i, block in enumerate(self.blocks):
            previous = block(parts[i + 1] if i == 0 else parts[i + 1] + previous)
            outs.append(previous)
        return torch.cat(outs, dim=1)


class SqueezeExcitation(nn.Module):
    """Channel gates from the time-averaged input (Hu et al., 2018)."""

    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = _conv(channels, squeezed), _conv(squeezed, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    """TDNN 1x1 -> Res2Net -> TDNN 1x1 -> squeeze-excitation, plus the input."""

    def __init__(self, channels: int, scale: int, squeezed: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TimeDelay(channels, channels, 1, 1)
        self.res2net_block = Res2Net(channels, scale, kernel, dilation)
        self.tdnn2 = TimeDelay(channels, channels, 1, 1)
        self.se_block = SqueezeExcitation(channels, squeezed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


def _mean_std(x: torch.Tensor, weights: torch.Tensor, eps: float = 1e-12) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean and standard deviation over time: x, weights `[B, C, T]` -> `[B, C]` each."""
    mean = (weights * x).sum(dim=2)
    std = torch.sqrt((weights * (x - mean[..., None]).pow(2)).sum(dim=2).clamp(min=eps))
    return mean, std


class AttentivePooling(nn.Module):
    """Attentive statistics pooling (Okabe et al., 2018) with ECAPA's global context: attention
    weights per channel and frame from [x, mean, std]; returns `[B, 2C, 1]` (weighted mean, std)."""

    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TimeDelay(3 * channels, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[-1]
        mean, std = _mean_std(x, torch.full_like(x, 1.0 / frames))
        context = torch.cat([x, mean[..., None].expand_as(x), std[..., None].expand_as(x)], dim=1)
        attention = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = _mean_std(x, attention)
        return torch.cat([mean, std], dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    """Log-mel frames `[B, T, mel_dim]` -> speaker embeddings `[B, enc_dim]` (float32 or the weights' dtype)."""

    def __init__(self, args: SpeakerArgs) -> None:
        super().__init__()
        self.args = args
        ch, ks, ds = args.enc_channels, args.enc_kernel_sizes, args.enc_dilations
        blocks: list[nn.Module] = [TimeDelay(args.mel_dim, ch[0], ks[0], ds[0])]
        for i in range(1, len(ch) - 1):
            assert ch[i - 1] == ch[i], "an SE-Res2Net block adds its input: equal widths"
            blocks.append(SERes2NetBlock(ch[i], args.enc_res2net_scale, args.enc_se_channels, ks[i], ds[i]))
        self.blocks = nn.ModuleList(blocks)
        self.mfa = TimeDelay(sum(ch[1:-1]), ch[-1], ks[-1], ds[-1])  # multi-layer feature aggregation
        self.asp = AttentivePooling(ch[-1], args.enc_attention_channels)
        self.fc = _conv(2 * ch[-1], args.enc_dim)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(x))[..., 0]


_MEL_BASIS: dict[tuple[int, int, int, int, int], np.ndarray] = {}


def mel_basis(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, num_mels: int = NUM_MELS, f_min: int = 0,
              f_max: int = F_MAX) -> np.ndarray:
    """Slaney-scale, Slaney-normalised mel filters float32 `[num_mels, n_fft // 2 + 1]` (librosa's)."""
    key = (sample_rate, n_fft, num_mels, f_min, f_max)
    if key not in _MEL_BASIS:
        from librosa.filters import mel

        _MEL_BASIS[key] = mel(sr=sample_rate, n_fft=n_fft, n_mels=num_mels, fmin=f_min, fmax=f_max).astype(np.float32)
    return _MEL_BASIS[key]


def log_mel(audio: torch.Tensor) -> torch.Tensor:
    """float32 audio `[B, N]` at 24 kHz (N >= MIN_SAMPLES) -> log-mel frames `[B, frames, 128]`,
    frames = (N + 2 * 384 - 1024) // 256 + 1 (see the module docstring)."""
    pad = (N_FFT - HOP) // 2
    padded = F.pad(audio[:, None], (pad, pad), mode="reflect")[:, 0]
    window = torch.hann_window(WINDOW, device=audio.device)
    spec = torch.stft(padded, N_FFT, hop_length=HOP, win_length=WINDOW, window=window, center=False,
                      normalized=False, onesided=True, return_complex=True)
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mels = torch.from_numpy(mel_basis()).to(audio.device) @ magnitude
    return torch.log(mels.clamp(min=1e-5)).transpose(1, 2)


@torch.inference_mode()
def speaker_embedding(encoder: SpeakerEncoder, audio: np.ndarray) -> torch.Tensor:
    """float32 mono audio `[N]` at 24 kHz -> its x-vector float32 `[enc_dim]` (on the encoder's
    device). Raises ValueError for fewer than MIN_SAMPLES samples."""
    if audio.ndim != 1 or audio.shape[0] < MIN_SAMPLES:
        raise ValueError(f"the speaker encoder needs mono audio of at least {MIN_SAMPLES} samples at 24 kHz")
    weight = encoder.fc.weight
    mels = log_mel(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None].to(weight.device))
    return encoder(mels.to(weight.dtype))[0].float()


# Sizes for random checkpoints (models/qwen3_tts_checkpoint.py); `enc_dim` is set to the talker's width.
SPEAKER_FLAVORS: dict[str, SpeakerArgs] = {
    "full": SpeakerArgs(),
    "tiny": SpeakerArgs(enc_channels=(16, 16, 16, 16, 48), enc_attention_channels=8, enc_res2net_scale=4,
                        enc_se_channels=8),
}
for _name in ("0.6b", "1.7b"):
    SPEAKER_FLAVORS[_name] = SPEAKER_FLAVORS["full"]
