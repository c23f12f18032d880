"""GPU lanes (README.md, "How it works"): an LM lane (prefill, decode; a green-context partition of
`lm_sms` SMs if given), a background codec lane (`codec_sms` SMs, or a low-priority stream)
and an urgent codec lane (the whole GPU, high priority), each on a stream of its own.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


def _green_stream(num_sms: int, device: int) -> tuple[object, torch.cuda.Stream]:
    """A green context of `num_sms` SMs (beta API) and a stream on it, which it must outlive."""
    from torch.cuda.green_contexts import GreenContext

    context = GreenContext.create(num_sms=num_sms, device_id=device)
    if hasattr(context, "Stream"):
        return context, context.Stream()
    context.set_context()  # older API: a stream created while the green context is current
    try:
        return context, torch.cuda.Stream(device)
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
        self._contexts: list[object] = []  # alive as long as their streams
        if lm_sms and codec_sms:
            assert lm_sms + codec_sms <= self.total_sms, f"{lm_sms} + {codec_sms} SMs > {self.total_sms}"
            try:
                for lane, sms in (("lm", lm_sms), ("background", codec_sms)):
                    context, self.streams[lane] = _green_stream(sms, index)
                    self._contexts.append(context)
                self.sms.update(lm=lm_sms, background=codec_sms)
            except Exception as error:  # a driver or torch without green contexts: plain streams
                log.warning("no SM partition (%s); the lanes share the GPU", error)

    def on(self, lane: str) -> torch.cuda.StreamContext:
        """A context that runs the enclosed work on `lane`'s stream ("lm", "urgent", "background")."""
        return torch.cuda.stream(self.streams[lane])
