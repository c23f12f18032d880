"""`voxgate models install` and `remove` of catalog models (gateway/cli_models.py): what they download,
delete and say, beside a running server and another command (the new-user trials' findings)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gateway import server_lock
from gateway.app import create_app
from gateway.cli import main, parser, settings_from_args
from gateway.settings import load_settings
from tests.conftest import free_port, local_client
from tests.gateway.test_cli_models import CONFIG, ONNX, _add, _listed, _voice


def _amy(tmp_path: Path) -> list[str]:
    """A config whose catalog has "amy" (from a local mirror), and the data dir: the arguments."""
    mirror = tmp_path / "mirror"
    _voice(mirror, "voices")  # voices/voices.onnx(.json)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"version": 1, "models": [
        {"id": "amy", "family": "piper", "name": "Amy", "files": [
            {"url": "voices/voices.onnx", "dest": "amy.onnx", "size_bytes": ONNX.stat().st_size},
            {"url": "voices/voices.onnx.json", "dest": "amy.onnx.json", "size_bytes": CONFIG.stat().st_size}]}]}))
    config = tmp_path / "voxgate.toml"
    config.write_text(f'catalog_path = "{catalog}"\ndownload_base_url = "{mirror}"\nmin_free_disk_mb = 0\n'
                      'min_free_memory_mb = 0\n')
    return ["--data-dir", str(tmp_path / "data"), "--config", str(config)]


def test_remove_deletes_a_downloaded_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _amy(tmp_path)
    assert main(["models", "install", "amy", *args]) == 0
    installed = tmp_path / "data" / "models" / "amy"
    assert (installed / "amy.onnx").is_file()
    capsys.readouterr()
    assert main(["models", "remove", "amy", *args]) == 0
    assert capsys.readouterr().out == f"removed amy; deleted its folder {installed}\n"
    assert not installed.exists() and not list((tmp_path / "data" / "models").iterdir())


def test_catalog_marks_installed_models_and_codecs_and_install_refuses_a_codec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`models install` of a codec downloaded it, then failed on a KeyError ('snac'), where the REST
    install refuses it at once; `models catalog` marked neither codecs nor installed models (found by a
    new-user trial)."""
    args = _amy(tmp_path)
    catalog = tmp_path / "catalog.json"
    entries = json.loads(catalog.read_text())
    entries["models"].append({"id": "snac_24khz", "family": "snac", "kind": "codec", "name": "SNAC", "files": [
        {"url": "voices/voices.onnx", "dest": "x.bin", "size_bytes": ONNX.stat().st_size}]})
    catalog.write_text(json.dumps(entries))
    assert main(["models", "install", "amy", *args]) == 0
    capsys.readouterr()
    assert main(["models", "catalog", *args]) == 0
    lines = dict(line.split("\t", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["amy"].endswith("(installed)") and "installed with the models that use it" in lines["snac_24khz"]
    assert main(["models", "install", "snac_24khz", *args]) == 2
    assert capsys.readouterr().err == "error: 'snac_24khz' is a codec, installed with the models that use it\n"
    assert not (tmp_path / "data" / "downloads" / "snac_24khz").exists()


def test_a_downloaded_folder_another_model_uses_stays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`models add` on a downloaded model's folder, then removing the downloaded one, deleted the
    folder under the other (its speech then failed, found by a new-user trial): it stays now."""
    args = _amy(tmp_path)
    assert main(["models", "install", "amy", *args]) == 0
    installed = tmp_path / "data" / "models" / "amy"
    assert _add(tmp_path / "data", installed, "--id", "myalias") == 0
    capsys.readouterr()
    assert main(["models", "remove", "amy", *args]) == 0
    assert capsys.readouterr().out == f"removed amy; its folder {installed} stays: myalias uses it\n"
    assert (installed / "amy.onnx").is_file()
    settings = load_settings(tmp_path / "voxgate.toml", env={}, data_dir=tmp_path / "data")
    with local_client(create_app(settings)) as client:
        speech = client.post("/v1/audio/speech", json={"input": "Hi.", "model": "myalias", "voice": "default"})
        assert speech.status_code == 200, speech.text
    assert main(["models", "remove", "myalias", *args]) == 0  # it said "Voxgate did not download it"
    assert capsys.readouterr().out == (f"removed myalias; its folder {installed} stays (it is in "
                                       f"{tmp_path / 'data' / 'models'} but was not this model's download; delete it "
                                       "by hand if unused)\n")


def test_install_refuses_beside_a_live_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second download manager on the server's folders (the trial's finding): the install goes
    through the server instead, which the message says how."""
    args, data = _amy(tmp_path), tmp_path / "data"
    with local_client(create_app(settings_from_args(parser().parse_args(["serve", *args])))) as client:
        assert main(["models", "install", "amy", *args]) == 1
        err = capsys.readouterr().err
        assert err == (f"error: a Voxgate server is running on {data}: install amy through it, with POST "
                       '/v1/library/install {"id": "amy"} or its studio\'s Library page (/library), which show the '
                       "download's progress; or stop the server first\n")
        assert not (data / "downloads" / "amy").exists() and not (data / "models" / "amy").exists()
        assert client.post("/v1/library/install", json={"id": "amy", "wait": True}).status_code == 201
    assert main(["models", "install", "amy", *args]) == 1  # no server now: the library says it has it
    assert "model 'amy' is already installed" in capsys.readouterr().err


def test_no_server_starts_during_an_install_or_removal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """What `models install` holds for its whole download (`alone`), held here: a second
    command says another one runs, `voxgate serve` refuses at once, and a lifespan after its
    wait, both with the same message."""
    args, data = _amy(tmp_path), tmp_path / "data"
    monkeypatch.setattr(server_lock, "SERVE_WAIT_S", 0.2)
    with server_lock.alone(data) as holder:
        assert holder is None
        for command in (["install", "amy"], ["remove", "amy"]):
            assert main(["models", *command, *args]) == 1
            assert capsys.readouterr().err == (f"error: another `voxgate models install` or `remove` is running on "
                                               f"{data}; run this one once it has ended\n")
        busy = (f"a `voxgate models install` or `voxgate models remove` is running on {data}; start the server "
                "once it has ended (Ctrl-C on an install keeps what it downloaded, and the server resumes it)")
        assert main(["serve", "--port", str(free_port()), *args]) == 2
        assert capsys.readouterr().err == f"error: {busy}\n"
        with pytest.raises(server_lock.DataDirBusy, match=re.escape(busy)):
            with local_client(create_app(load_settings(env={}, data_dir=data))):
                pass
    assert main(["models", "install", "amy", *args]) == 0  # once it has ended


_LINE = re.compile(r"(?P<state>\w+)(?: (?P<file>\S+) \((?P<nth>\d+) of (?P<of>\d+)\))?: (?P<done>[\d.]+) of "
                   r"(?P<about>about )?(?P<total>[\d.]+) MB \((?P<percent>\d+)%(?P<eta>, \d+ s left)?\)")


def test_install_progress_goes_forward_file_by_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The progress lines flipped: `downloading`, `verifying`, `downloading` again for the next file, with the
    same numbers and no file named, and `0 s left` while verifying. Each line now names its file and its
    place, and (file, step) only goes forward; a total with a catalog size marked approximate says `about`
    until the source has reported it."""
    args = _amy(tmp_path)
    catalog = tmp_path / "catalog.json"
    data = json.loads(catalog.read_text())
    data["models"][0]["files"][1].update(size_bytes=5000, size_is_approximate=True)  # the config's: ~5 kB
    catalog.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["models", "install", "amy", *args]) == 0
    lines = capsys.readouterr().err.splitlines()
    parsed = [_LINE.fullmatch(line) for line in lines]
    assert all(parsed), lines
    steps = [m for m in parsed if m and m["file"]]
    assert [(m["state"], m["file"], m["nth"], m["of"]) for m in steps if m["state"] == "verifying"] == \
        [("verifying", "amy.onnx", "1", "2"), ("verifying", "amy.onnx.json", "2", "2")], lines
    order = [(int(m["nth"]), m["state"] == "verifying") for m in steps]
    assert order == sorted(order), lines  # never back to an earlier file or step
    assert [m["state"] for m in parsed if m and not m["file"]] == ["queued", "installing", "done"], lines
    assert all(m["eta"] is None for m in parsed if m and m["state"] != "downloading"), lines
    assert all(a != b for a, b in zip(lines, lines[1:])), lines  # no line twice in a row
    assert parsed[0] and parsed[0]["about"]  # the config's size is the catalog's guess until its file starts
    last = parsed[-1]
    assert last and not last["about"] and last["percent"] == "100" and last["done"] == last["total"]
    assert float(last["total"]) == pytest.approx((ONNX.stat().st_size + CONFIG.stat().st_size) / 1e6, abs=0.06)


def test_a_relative_data_dir_stores_absolute_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`--data-dir data` stored `data/models/amy` (the trial's finding), which breaks the model
    for a command or server started from another directory."""
    args = _amy(tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = ["--data-dir", "data", *args[2:]]
    assert main(["models", "install", "amy", *relative]) == 0
    installed = tmp_path / "data" / "models" / "amy"
    assert capsys.readouterr().out == f"installed amy in {installed}\n"
    monkeypatch.chdir(tmp_path / "mirror")
    assert _listed(tmp_path / "data", capsys)["amy"][2] == str(installed)
    settings = settings_from_args(parser().parse_args(["serve", *args]))
    with local_client(create_app(settings)) as client:
        assert client.post("/v1/models/amy/load", json={}).json()["loaded"] is True
    assert settings_from_args(parser().parse_args(["serve", "--data-dir", "../d/./e"])).data_dir == tmp_path / "d" / "e"
