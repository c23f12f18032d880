"""A count of 0 is refused in one line, not a traceback after the work began (found by an operator
trial: `piper_opening.py --sentences 0` an IndexError, `--block 0` and `first_chunk.py --trials 0` a
ValueError)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("script", "flag"), [("piper_opening.py", "--sentences"), ("piper_opening.py", "--block"),
                                              ("first_chunk.py", "--trials"), ("first_chunk.py", "--frames")])
def test_a_count_of_zero_is_refused_in_one_line(script: str, flag: str) -> None:
    done = subprocess.run([sys.executable, f"bench/{script}", flag, "0", "--out", "/dev/null"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().endswith(f"error: {flag} must be at least 1")
