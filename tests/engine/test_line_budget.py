"""engine/ stays readable in an afternoon (issue 8): at most 2,000 lines in all, 400 a file.

engine/ holds the torch-free policy (scheduler, clock, cost model, core loop) and the `Runner`
protocol; the torch runners that implement it live beside their models (models/lm_runner.py,
models/qwen3_tts_runner.py)."""

from __future__ import annotations

from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def test_engine_is_within_its_line_budget() -> None:
    lines = {path.name: len(path.read_text().splitlines()) for path in sorted(ENGINE.glob("*.py"))}
    assert sum(lines.values()) <= 2000, f"engine/ has {sum(lines.values())} lines: {lines}"
    assert all(n <= 400 for n in lines.values()), {name: n for name, n in lines.items() if n > 400}
    assert "scheduler.py" in lines and "runner.py" in lines  # the folder it counts is the engine's
