"""What `voxgate` says at start about settings that would otherwise fail in silence later: a
misspelt `VOXGATE_*` variable (a warning, the start goes on) and a `default_model` that is not
installed (one line, exit 2, where a new-user trial got 404 "unknown model None" for every
request without a model)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.settings import OTHER_VARIABLES, unknown_variables

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`voxgate serve` up to the server's start, which only records that it was reached."""
    from gateway.server import Server

    started: list[str] = []

    def run(self: Server) -> None:
        started.append("run")
        self.started = True

    monkeypatch.setattr(Server, "run", run)
    for key in [k for k in os.environ if k.upper().startswith("VOXGATE_")]:
        monkeypatch.delenv(key)
    return started


def test_a_misspelt_variable_names_the_closest_one() -> None:
    assert unknown_variables({"VOXGATE_DEFUALT_MODEL": "x", "VOXGATE_PORT": "1", "PATH": "/bin"}) == [
        "VOXGATE_DEFUALT_MODEL is not a Voxgate setting and is ignored; did you mean VOXGATE_DEFAULT_MODEL "
        "(the default_model setting)?"]
    assert unknown_variables({"VOXGATE_ZQXWV": "1"}) == ["VOXGATE_ZQXWV is not a Voxgate setting and is ignored"]
    assert unknown_variables({"voxgate_port": "1"}) == [
        "voxgate_port is ignored: the variable is VOXGATE_PORT (upper case)"]
    assert "[[models]] tables in the config file" in unknown_variables({"VOXGATE_MODELS": "a"})[0]
    assert unknown_variables({"VOXGATE_CONFIG": "a.toml", "VOXGATE_SCREENSHOTS": "docs/screenshots"}) == []


def _repository_files() -> list[Path]:
    skip = {".git", "node_modules", "__pycache__"}
    return [path for path in ROOT.rglob("*") if path.is_file() and not any(
        part in skip or part.startswith(".venv") for part in path.relative_to(ROOT).parts)
        and path.suffix in (".py", ".sh", ".md", ".toml", ".js", ".html", ".yml", ".yaml", ".txt", "")
        and path != Path(__file__).resolve()]  # (this file's misspellings are meant)


def test_no_variable_the_project_itself_uses_is_reported() -> None:
    """Every `VOXGATE_*` name in the repository's code, tests, scripts and docs is read by something:
    a setting's, or one of OTHER_VARIABLES (the config file's path, the screenshot folder)."""
    names = set()
    for path in _repository_files():
        try:
            names |= set(re.findall(r"VOXGATE_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="ignore")))
        except OSError:
            continue
    assert {"VOXGATE_PORT", "VOXGATE_SCREENSHOTS"} <= names  # (the walk found the code and the tests)
    assert OTHER_VARIABLES <= names
    names -= {"VOXGATE_MODELS", "VOXGATE_DEFUALT_MODEL"}  # (gateway/settings.py's warning, README's example)
    assert unknown_variables({name: "1" for name in names}) == []


def test_serve_warns_about_a_misspelt_variable_and_starts(tmp_path: Path, no_server: list[str],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VOXGATE_DEFUALT_MODEL", "nope")
    monkeypatch.setenv("VOXGATE_PROT", "9000")
    assert main(["serve", "--data-dir", str(tmp_path / "data"), "--port", "18771"]) == 0
    assert no_server == ["run"]
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: VOXGATE_DEFUALT_MODEL is not a Voxgate setting and is ignored; did you mean "
        "VOXGATE_DEFAULT_MODEL (the default_model setting)?",
        "warning: VOXGATE_PROT is not a Voxgate setting and is ignored; did you mean VOXGATE_PORT "
        "(the port setting)?"]
