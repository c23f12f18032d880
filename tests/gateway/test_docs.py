"""The client examples in docs/realtime.md and docs/agents.md run against a live server."""

from __future__ import annotations

import re
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from tests.conftest import LiveServer

DOCS = Path(__file__).resolve().parents[2] / "docs"


def run_example(code: str, argument: str, cwd: Path) -> str:
    script = cwd / "client.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script), argument], cwd=cwd, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout


def seconds(path: Path) -> float:
    with wave.open(str(path)) as out:
        return out.getnframes() / out.getframerate()


def test_the_realtime_doc_example_runs(server: LiveServer, tmp_path: Path) -> None:
    code = re.search(r"```python\n(.*?)```", (DOCS / "realtime.md").read_text(), re.S)
    assert code is not None
    stdout = run_example(code.group(1), f"{server.ws_url}/v1/realtime", tmp_path)
    assert "'type': 'utterance.done'" in stdout
    assert seconds(tmp_path / "out.wav") > 2.0


AGENT_EXAMPLES = re.findall(r"```python\n(.*?)```", (DOCS / "agents.md").read_text(), re.S)


@pytest.mark.parametrize(("index", "output"), [(0, "openai.wav"), (1, "pipecat.wav"), (2, "livekit.wav"),
                                               (3, "cartesia.wav")],
                         ids=["openai", "pipecat", "livekit", "cartesia-sdk"])
def test_the_agents_doc_examples_run(server: LiveServer, tmp_path: Path, index: int, output: str) -> None:
    assert len(AGENT_EXAMPLES) == 4
    stdout = run_example(AGENT_EXAMPLES[index], server.url, tmp_path)
    assert f"wrote {output}" in stdout
    assert seconds(tmp_path / output) > 2.0
    if index in (1, 2):  # pipecat and LiveKit print each word with its time
        assert " s  Voxgate," in stdout
