"""Engine settings: one frozen dataclass, checked once (STYLE.md §5)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineConfig:
    ttfa_target_ms: float = 200.0  # first chunk's deadline after arrival
    urgent_slack_ms: float = 150.0  # chunks with less slack than this run at once
    codec_batch: int = 8  # non-urgent codec chunks wait until this many are ready
    max_waiting: int = 64  # queued (not yet admitted) requests per model before Overloaded
    max_running: int = 64  # requests admitted at once per model
    max_prefill_defer_ms: float = 100.0  # longest a prefill waits for running chunks
    policy: str = "edf"  # "edf": deadline-aware; "fifo": arrival order, the baseline for bench/

    def __post_init__(self) -> None:
        assert self.ttfa_target_ms > 0, "ttfa_target_ms must be positive"
        assert self.urgent_slack_ms >= 0, "urgent_slack_ms must be >= 0"
        assert self.codec_batch >= 1, "codec_batch must be >= 1"
        assert self.max_waiting >= 1 and self.max_running >= 1
        assert self.max_prefill_defer_ms >= 0
        assert self.policy in ("edf", "fifo"), f"policy must be 'edf' or 'fifo', got {self.policy!r}"
