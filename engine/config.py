"""Engine settings: one frozen dataclass, checked once (`__post_init__`). A model's concurrency
limit is its runner's `max_running` (KV slots), set in `build_runner`.
"""

from __future__ import annotations

from dataclasses import dataclass

# What `edf` adds to `fifo`, one name each (bench/goodput.py ablates them): deadline order,
# urgent vs batched codec items, early chunks, prefill deferral, codec lanes beside the step.
MECHANISMS = ("order", "urgency", "early", "defer", "lanes")
# Requests one model serves at once, at most: the `max_running` setting's and a model's own option's bound
# (gateway/settings.py, models/model_options.py); past it a value bounds nothing (a speech LM's KV slots).
MAX_RUNNING = 4096


@dataclass(frozen=True, slots=True)
class EngineConfig:
    urgent_slack_ms: float = 150.0  # chunks with less slack than this run at once
    codec_batch: int = 8  # non-urgent codec chunks wait until this many are ready
    max_waiting: int = 64  # queued (not yet admitted) requests per model before Overloaded
    max_prefill_defer_ms: float = 100.0  # longest a prefill waits for running chunks
    max_prefill_tokens: int = 4096  # prompt tokens prefilled in one iteration (at least one request)
    max_predicted_ttfa_ms: float = 2000.0  # refuse a request whose first audio is predicted later (0: never)
    max_unread_ms: float = 10000.0  # a request pauses while this much of its audio waits unread
    policy: str = "edf"  # "edf" (every mechanism), "fifo" (none: the baseline), or "fifo+early+..."

    def __post_init__(self) -> None:
        assert self.urgent_slack_ms >= 0 and self.codec_batch >= 1, "urgent_slack_ms >= 0 and codec_batch >= 1"
        assert self.max_waiting >= 1 and self.max_prefill_tokens >= 1
        assert self.max_prefill_defer_ms >= 0 and self.max_predicted_ttfa_ms >= 0 and self.max_unread_ms > 0
        base, *added = self.policy.split("+")
        assert base in ("edf", "fifo") and set(added) <= set(MECHANISMS) and not (base == "edf" and added), \
            f"policy must be 'edf', 'fifo' or 'fifo+' any of {'+'.join(MECHANISMS)}, got {self.policy!r}"

    def uses(self, mechanism: str) -> bool:
        """Whether the policy uses `mechanism` (one of MECHANISMS)."""
        return self.policy == "edf" or mechanism in self.policy.split("+")[1:]
