"""Engine settings: one frozen dataclass, checked once (STYLE.md §5).

A model's concurrency limit is not here: it is the runner's `max_running` (its KV slots
for a speech LM), set once when the runner is built (engine/runner.py `build_runner`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineConfig:
    urgent_slack_ms: float = 150.0  # chunks with less slack than this run at once
    codec_batch: int = 8  # non-urgent codec chunks wait until this many are ready
    max_waiting: int = 64  # queued (not yet admitted) requests per model before Overloaded
    max_prefill_defer_ms: float = 100.0  # longest a prefill waits for running chunks
    max_prefill_tokens: int = 4096  # prompt tokens prefilled in one iteration (at least one request)
    max_predicted_ttfa_ms: float = 2000.0  # refuse a request whose first audio is predicted later (0: never)
    max_unread_ms: float = 10000.0  # a request pauses while this much of its audio waits unread
    policy: str = "edf"  # "edf": deadline-aware; "fifo": arrival order, the baseline for bench/

    def __post_init__(self) -> None:
        assert self.urgent_slack_ms >= 0, "urgent_slack_ms must be >= 0"
        assert self.codec_batch >= 1, "codec_batch must be >= 1"
        assert self.max_waiting >= 1 and self.max_prefill_tokens >= 1
        assert self.max_prefill_defer_ms >= 0 and self.max_predicted_ttfa_ms >= 0 and self.max_unread_ms > 0
        assert self.policy in ("edf", "fifo"), f"policy must be 'edf' or 'fifo', got {self.policy!r}"
