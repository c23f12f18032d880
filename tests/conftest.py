"""Shared fixtures: one tiny random Orpheus checkpoint per test session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def orpheus_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from models.checkpoint import write_random

    return write_random("orpheus", "tiny", tmp_path_factory.mktemp("orpheus-tiny"), seed=0)
