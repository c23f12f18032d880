"""A speech LM runner's codec items turned into audio chunks: the windows of equal length
decoded as one batch, each cropped to the frames it emits (engine/chunk_plan.py `Window`).
Shared by models/lm_runner.py (Orpheus, SNAC) and models/qwen3_tts_runner.py.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from engine.lm_spec import LMSpec, window_codes
from engine.plan import CodecItem, Timing
from engine.types import ChunkOut, GenerationFailed

# (frames int64 `[B, F, codes_per_frame]`, the items' indices of its rows) -> float32 `[B, F * samples_per_frame]`
DecodeBatch = Callable[[torch.Tensor, list[int]], np.ndarray]


def decode_windows(items: Sequence[CodecItem], spec: LMSpec, decode: DecodeBatch, samples_per_frame: int,
                   timings: list[Timing], skip: Callable[[int], bool] = lambda i: False) -> list[ChunkOut]:
    """One chunk per item, in order; an item that emits no frame, or that `skip(i)` names (e.g.
    released), gets no samples; one whose tokens are not audio (engine/lm_spec.py `window_codes`)
    gets its GenerationFailed. Appends a "codec" Timing (batch, frames, host ms) per batch."""
    pcm: dict[int, np.ndarray] = {}
    errors: dict[int, GenerationFailed] = {}
    codes: dict[int, list[list[int]]] = {}
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        if item.window.emit_to == item.window.emit_from or skip(i):
            pcm[i] = np.zeros(0, np.float32)
            continue
        try:
            codes[i] = window_codes(spec, item.request, item.window)
        except GenerationFailed as error:
            errors[i] = error
            continue
        groups.setdefault(item.window.num_frames, []).append(i)
    for num_frames, members in groups.items():
        t0 = time.perf_counter()
        frames = torch.tensor([codes[i] for i in members], dtype=torch.int64)
        audio = decode(frames, members)
        for row, i in enumerate(members):
            pcm[i] = np.ascontiguousarray(audio[row, items[i].window.crop(samples_per_frame)])
        timings.append(Timing("codec", len(members), num_frames, 1000.0 * (time.perf_counter() - t0)))
    return [ChunkOut(item.request.request_id, pcm.get(i), is_last=item.window.is_last, error=errors.get(i))
            for i, item in enumerate(items)]
