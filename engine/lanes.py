"""GPU lanes (DESIGN.md §3): where a speech LM's work runs on the device.

- LM lane: prefill and decode steps, launched by the device worker's thread, on a stream of
  its own, inside a green-context SM partition of `lm_sms` SMs when given;
- background codec lane: batched, non-urgent chunks, on the remaining SMs (a second green
  context of `codec_sms`) or, without partitions, a low-priority stream;
- urgent codec lane: first chunks and chunks near their deadline, on the whole GPU at high
  stream priority.
Each codec lane has its own launching thread (engine/core.py) and its own CUDA graphs
(engine/model_runner.py). Green contexts are created once, here; kernels that size their
grid from the SM count (models/decode_attention.py) get their lane's count.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import torch

log = logging.getLogger(__name__)


def _green_stream(num_sms: int, device: int) -> torch.cuda.Stream:
    """A stream whose kernels run on `num_sms` SMs (torch.cuda.green_contexts, beta API)."""
    from torch.cuda.green_contexts import GreenContext

    context = GreenContext.create(num_sms=num_sms, device_id=device)
    if hasattr(context, "Stream"):
        return context.Stream()
    context.set_context()  # older API: a stream created while the green context is current
    try:
        return torch.cuda.Stream(device)
    finally:
        context.pop_context()


class GpuLanes:
    def __init__(self, device: torch.device, lm_sms: int = 0, codec_sms: int = 0) -> None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.total_sms = torch.cuda.get_device_properties(index).multi_processor_count
        low, high = torch.cuda.Stream.priority_range()  # (lowest = 0, highest = negative)
        self.streams = {"lm": torch.cuda.Stream(index), "urgent": torch.cuda.Stream(index, priority=high),
                        "background": torch.cuda.Stream(index, priority=low)}
        self.sms = {"lm": self.total_sms, "urgent": self.total_sms, "background": self.total_sms}
        if lm_sms and codec_sms:
            assert lm_sms + codec_sms <= self.total_sms, f"{lm_sms} + {codec_sms} SMs > {self.total_sms}"
            try:
                self.streams["lm"] = _green_stream(lm_sms, index)
                self.streams["background"] = _green_stream(codec_sms, index)
                self.sms.update(lm=lm_sms, background=codec_sms)
            except Exception as error:  # a driver or torch without green contexts: plain streams
                log.warning("no SM partition (%s); the lanes share the GPU", error)

    @contextlib.contextmanager
    def on(self, lane: str) -> Iterator[None]:
        """Run the enclosed work on `lane`'s stream ("lm", "urgent", "background")."""
        with torch.cuda.stream(self.streams[lane]):
            yield
