"""The client example in docs/realtime.md runs against a live server."""

from __future__ import annotations

import re
import subprocess
import sys
import wave
from pathlib import Path

from tests.conftest import LiveServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "realtime.md"


def test_the_realtime_doc_example_runs(server: LiveServer, tmp_path: Path) -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    script = tmp_path / "client.py"
    script.write_text(code.group(1))
    result = subprocess.run([sys.executable, str(script), f"{server.ws_url}/v1/realtime"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "'type': 'utterance.done'" in result.stdout
    with wave.open(str(tmp_path / "out.wav")) as out:
        assert out.getnframes() / out.getframerate() > 2.0
