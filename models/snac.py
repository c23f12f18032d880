"""SNAC 24 kHz codec (package `snac`, hubertsiuzdak/snac), decode side, with streaming.

SNAC 24 kHz has a hop of 512 samples (46.875 Hz latent) and three codebooks at strides
4, 2, 1 of it. A *frame* here is one coarse code: 4 latent steps = 2048 samples =
85.33 ms, carrying 1 + 2 + 4 = 7 codes, in canonical order `[c0, c1a, c1b, c2a, c2b,
c2c, c2d]`.

Streaming. The decoder is convolutional; measured on random weights, an output sample
depends on latents within -10..+9 steps of its own (`tests/models/test_orpheus.py`
checks it), i.e. at most `CONTEXT_FRAMES` = 3 frames either side. So a chunk of frames
`[a, b)` decoded from frames `[a - 3, b + 3)` (clipped to what exists) and cropped
equals decoding the whole sequence at once, up to float rounding (1e-4 in float32).
The chunk windows themselves are planned in engine/chunk_plan.py.

Noise. SNAC's decoder adds `randn` noise scaled by a learned projection
(`NoiseBlock`). Fresh noise per call would make chunks disagree with a whole decode,
so each noise block here reads a fixed random table at the absolute sample position
instead (same distribution, deterministic, the same for a chunk and the whole).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

SAMPLE_RATE = 24000
HOP_SAMPLES = 512  # samples per latent step
LATENTS_PER_FRAME = 4  # stride of the coarse codebook
SAMPLES_PER_FRAME = HOP_SAMPLES * LATENTS_PER_FRAME  # 2048 samples = 85.33 ms
FRAME_MS = 1000.0 * SAMPLES_PER_FRAME / SAMPLE_RATE
CODES_PER_FRAME = 7
CONTEXT_FRAMES = 3  # frames of left and right context a chunk is decoded with (see Streaming)
NOISE_TABLE = 1 << 18  # samples per noise table (10.9 s at the output rate)


def snac_class() -> type[nn.Module]:
    """The `snac` package's `SNAC` class, imported without its torch.jit deprecation warnings."""
    with warnings.catch_warnings():  # snac uses torch.jit.script, deprecated in torch 2.10+
        warnings.simplefilter("ignore", DeprecationWarning)
        from snac import SNAC
    return SNAC


class _TableNoise(nn.Module):
    """Replaces snac's NoiseBlock: x + table[abs_position] * linear(x)."""

    def __init__(self, linear: nn.Module, upsample: int, table: torch.Tensor) -> None:
        super().__init__()
        self.linear = linear
        self.upsample = upsample  # output samples of this block per latent step
        self.register_buffer("table", table, persistent=False)
        self.start: torch.Tensor | None = None  # int64 [B], first latent step of each row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.start is not None
        index = self.start[:, None] * self.upsample + torch.arange(x.shape[-1], device=x.device)
        noise = self.table[index % NOISE_TABLE].to(x.dtype)[:, None, :]  # [B, 1, T]
        return x + noise * self.linear(x)


class SnacCodec:
    """SNAC decoder with deterministic noise; weights from a local folder only."""

    sample_rate = SAMPLE_RATE
    samples_per_frame = SAMPLES_PER_FRAME
    codes_per_frame = CODES_PER_FRAME

    def __init__(self, model: nn.Module, device: torch.device | str, dtype: torch.dtype = torch.float32,
                 noise_seed: int = 0) -> None:
        from snac.layers import NoiseBlock

        for module in model.modules():  # inference only: fold weight norm into plain weights
            for name in ("weight",):
                if torch.nn.utils.parametrize.is_parametrized(module, name):
                    torch.nn.utils.parametrize.remove_parametrizations(module, name)
        generator = torch.Generator().manual_seed(noise_seed)
        self._noise: list[_TableNoise] = []
        upsample = 1
        for block in model.decoder.model:
            layers = getattr(block, "block", None)
            if layers is None or not isinstance(layers, nn.Sequential):
                continue
            for i, layer in enumerate(layers):
                if isinstance(layer, nn.ConvTranspose1d):
                    upsample *= layer.stride[0]
                if isinstance(layer, NoiseBlock):
                    table = torch.randn(NOISE_TABLE, generator=generator)
                    layers[i] = _TableNoise(layer.linear, upsample, table)
                    self._noise.append(layers[i])
        self.model = model.to(device=device, dtype=dtype).eval()
        self.device = torch.device(device)
        self.dtype = dtype
        assert int(np.prod(model.decoder_rates)) == HOP_SAMPLES and list(model.vq_strides) == [4, 2, 1], \
            "only the 24 kHz SNAC layout (hop 512, strides 4/2/1) is supported"

    @classmethod
    def from_dir(cls, path: Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> SnacCodec:
        """Load `<path>/config.json` + `pytorch_model.bin` (or `model.safetensors`)."""
        config = json.loads((Path(path) / "config.json").read_text())
        model = snac_class()(**config)
        if (Path(path) / "model.safetensors").is_file():
            from safetensors.torch import load_file
            state = load_file(str(Path(path) / "model.safetensors"))
        else:
            state = torch.load(Path(path) / "pytorch_model.bin", map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        return cls(model, device, dtype)

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor, start_frames: torch.Tensor) -> torch.Tensor:
        """frames: int64 `[B, F, 7]` canonical codes; start_frames: int64 `[B]`, the absolute
        index of each row's first frame (selects the noise). Returns float32 PCM
        `[B, F * 2048]` in [-1, 1] at 24 kHz."""
        frames = frames.to(self.device)
        batch, num_frames, _ = frames.shape
        codes = [frames[..., 0], frames[..., 1:3].reshape(batch, -1), frames[..., 3:7].reshape(batch, -1)]
        start = start_frames.to(self.device) * LATENTS_PER_FRAME
        for noise in self._noise:
            noise.start = start
        z = self.model.quantizer.from_codes(codes).to(self.dtype)
        return self.model.decoder(z)[:, 0].float()

    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())
