"""example.py, the shortest path from text to audio, still runs (it broke once unnoticed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]


def test_example_writes_speech(tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    done = subprocess.run([sys.executable, str(ROOT / "example.py"), "Hello there.", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    audio, rate = sf.read(out)
    assert rate == 22050 and 0.3 < len(audio) / rate < 5 and abs(audio).max() > 0.01
