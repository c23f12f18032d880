"""Driving the real EngineCore step by step in the runner tests (tests/models/test_*_runner.py)."""

from __future__ import annotations

from typing import Any

from engine.core import EngineCore
from engine.request import Request
from engine.types import SpeechRequest


def add(core: EngineCore, spec: SpeechRequest) -> Request:
    """Prepare `spec` with the runner's model spec and add it to the core."""
    return core.add(spec, core.runner.spec.prepare(spec))


def run_until_done(core: EngineCore, specs: list[SpeechRequest], join_at: dict[str, int] | None = None,
                   max_steps: int = 2000) -> tuple[dict[str, Request], dict[str, list[Any]]]:
    """Step until every request ended (`join_at[id]`: added at that step, the others at once), at
    most `max_steps` steps. Returns each request and what the core sent for it, in order."""
    join_at = join_at or {}
    requests = {s.request_id: add(core, s) for s in specs if s.request_id not in join_at}
    sent: dict[str, list[Any]] = {s.request_id: [] for s in specs}
    for step in range(max_steps):
        for s in specs:
            if join_at.get(s.request_id) == step:
                requests[s.request_id] = add(core, s)
        for rid, item in core.step():
            sent.setdefault(rid, []).append(item)
        if not core.has_work and step > max(join_at.values(), default=0):
            break
    return requests, sent
