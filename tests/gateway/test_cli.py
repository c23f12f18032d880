"""The `voxgate` command's own help (its models commands: test_cli_models.py)."""

from __future__ import annotations

import pytest

from gateway.cli import main


def test_checkpoint_help_says_the_default_size_and_each_familys_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["checkpoint", "random", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "tiny (the default)" in text
    assert "orpheus takes tiny and full; qwen3_tts also 0.6b and 1.7b (= full)" in text
