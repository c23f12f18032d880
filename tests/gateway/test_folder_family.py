"""A folder added as the wrong family (models/folder_family.py): `voxgate models add` and
`POST /v1/library/install {path}` say which family it looks like, naming `family`, where the
family's own check said only which of its files was missing ("config.json is missing")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.cli import main
from gateway.settings import load_settings
from tests.conftest import local_client
from tests.gateway.test_cli_models import _voice

pytest.importorskip("torch")

CASES = [("qwen3_tts", "orpheus", "config.json has model_type qwen3_tts"),
         ("qwen3_tts", "piper", "config.json has model_type qwen3_tts"),
         ("orpheus", "qwen3_tts", "it holds backbone/ and codec/"),
         ("orpheus", "piper", "it holds backbone/ and codec/"),
         ("piper", "orpheus", "it holds bob.onnx and bob.onnx.json"),
         ("piper", "qwen3_tts", "it holds bob.onnx and bob.onnx.json")]


@pytest.fixture
def folders(qwen3_tts_tiny: Path, orpheus_tiny: Path, tmp_path: Path) -> dict[str, Path]:
    roots = tmp_path / "roots"
    roots.mkdir()
    qwen = roots / "qwen"
    shutil.copytree(qwen3_tts_tiny, qwen)
    orpheus = roots / "orph"
    shutil.copytree(orpheus_tiny, orpheus)
    return {"qwen3_tts": qwen, "orpheus": orpheus, "piper": _voice(roots, "bob")}


@pytest.mark.parametrize("kind, asked, why", CASES)
def test_models_add_says_which_family_a_folder_looks_like(
        folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, asked: str,
        why: str) -> None:
    folder = folders[kind]
    assert main(["models", "add", "--family", asked, "--path", str(folder), "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --family {asked}: {folder}: it looks like a {kind} model ({why}), not a")
    assert f"; add it with --family {kind} (its own check said: " in err and err.count("\n") == 1, err
    assert main(["models", "add", "--family", kind, "--path", str(folder), "--data-dir", str(tmp_path / "d")]) == 0


@pytest.mark.parametrize("kind, asked, why", CASES)
def test_a_folder_install_names_family_for_a_folder_of_another_family(
        folders: dict[str, Path], tmp_path: Path, kind: str, asked: str, why: str) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path / "roots")])
    with local_client(create_app(settings)) as client:
        before = [m["id"] for m in client.get("/v1/models").json()["data"]]
        refused = client.post("/v1/library/install", json={"path": str(folders[kind]), "family": asked})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_model_folder" and error["field"] == "family"
        assert f"it looks like a {kind} model ({why})" in error["message"]
        assert f"install it with family {kind!r}" in error["message"]
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == before  # nothing registered


def test_a_broken_folder_of_the_family_asked_keeps_its_own_message(
        folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = folders["qwen3_tts"]
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        (folder / name).unlink(missing_ok=True)
    assert main(["models", "add", "--family", "qwen3_tts", "--path", str(folder),
                 "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "has no text tokenizer" in err and "looks like" not in err


def test_a_folder_outside_the_roots_gets_the_one_error_whatever_it_holds(
        folders: dict[str, Path], tmp_path: Path) -> None:
    """Outside `local_model_roots` nothing is said about a folder (docs/security.md)."""
    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path / "data")])
    with local_client(create_app(settings)) as client:
        refused = client.post("/v1/library/install", json={"path": str(folders["qwen3_tts"]), "family": "orpheus"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "path", refused.text
        assert "looks like" not in refused.json()["error"]["message"]
