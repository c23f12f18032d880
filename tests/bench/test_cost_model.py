"""bench/cost_model.py on a tiny random Orpheus on the CPU: every kind of cost is measured
and lands in the table the simulator reads (it once called a `Table.set` that no longer
existed, and its four-prompt prefill used slots past a small runner's `max_running`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from bench import cost_model  # noqa: E402
from engine.cost import CostModel  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from models import orpheus  # noqa: E402


@pytest.mark.parametrize("max_running", [2, 8])
def test_measure_fills_each_table_and_saves_what_it_measured(orpheus_tiny: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, max_running: int) -> None:
    monkeypatch.setattr(cost_model, "BATCHES", (1, 2))
    monkeypatch.setattr(cost_model, "PROMPT_TOKENS", (16, 64))
    monkeypatch.setattr(cost_model, "CODEC_BATCHES", (1, 2))
    parts = orpheus.load("tiny", orpheus_tiny, {"max_seq_len": 256, "max_codec_batch": 2}, "cpu")
    runner = build_runner("tiny", parts, "cpu", max_running)
    try:
        cost = cost_model.measure(runner, iters=1)
    finally:
        runner.close()
    assert {b for b, _, _ in cost.step_ms.to_json()} == {1, 2}
    assert {t for t, _, _ in cost.prefill_ms.to_json()} == {16, 64}
    assert {b for b, _, _ in cost.codec_ms.to_json()} == {1, 2}
    assert all(ms > 0 for table in (cost.step_ms, cost.prefill_ms, cost.codec_ms) for _, _, ms in table.to_json())
    out = tmp_path / "cost.json"
    cost_model.save(cost, str(out), "cpu", "pytest")
    again = CostModel.from_json(json.loads(out.read_text()))
    assert again.step_ms(1, 256) == pytest.approx(cost.step_ms(1, 256), abs=1e-3)  # saved to 4 decimals
