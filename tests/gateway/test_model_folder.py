"""A catalog download never replaces, registers or deletes a `models/<id>/` folder it did not make
(gateway/model_folder.py): a folder made by hand is kept and the install refused (409
`folder_in_the_way`); one a killed install left (marked) is still registered or replaced."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.download import DownloadError
from gateway.model_folder import MARKER, move_into_place, write_marker
from tests.gateway.file_server import FILES, FileServer, Registry, new_manager, serve, tiny_model


def _hand_made(folder: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("files", [
    {"notes.txt": b"my own work", "voice.onnx": b"a model I copied by hand"},  # not the catalog's files
    FILES,  # the catalog's files at their sizes, copied by hand: registered in place before, and removed
])          # with the folder when that registration failed
def test_a_hand_made_folder_is_kept_and_the_install_refused(tmp_path: Path, files: dict[str, bytes]) -> None:
    model = tiny_model(FILES)
    folder = tmp_path / "data" / "models" / "tiny"
    mine = _hand_made(folder, files)
    registry = Registry()

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url)
        with pytest.raises(DownloadError) as refused:
            await manager.install(model)
        assert refused.value.status == 409 and refused.value.code == "folder_in_the_way"
        assert "'tiny'" in refused.value.message and "a folder is in the way" in refused.value.message
        assert str(folder) in refused.value.message
        assert manager.downloads() == []
        await manager.aclose()

    with serve(model, FILES) as server:
        asyncio.run(main(server))
        assert server.gets(model.files[0].url) == []  # nothing fetched
    assert _contents(folder) == mine and registry.models == {}


def test_a_folder_made_during_the_download_is_kept_and_the_download_resumable(tmp_path: Path) -> None:
    """The last check, just before the rename: a folder that appeared while the files came is left alone,
    and the verified files stay where the next install resumes from."""
    model = tiny_model(FILES)
    work = tmp_path / "downloads" / "tiny"
    work.mkdir(parents=True)
    for name, data in FILES.items():
        (work / f"{name}.part").write_bytes(data)
    models = tmp_path / "models"
    mine = _hand_made(models / "tiny", {"notes.txt": b"mine"})
    with pytest.raises(DownloadError) as refused:
        move_into_place(model, work, models)
    assert refused.value.status == 409 and refused.value.code == "folder_in_the_way"
    assert _contents(models / "tiny") == mine
    assert _contents(work) == {f"{name}.part": data for name, data in FILES.items()}
    assert sorted(p.name for p in models.iterdir()) == ["tiny"]  # no staging folder left


def test_a_folder_a_killed_install_left_is_registered_without_downloading(tmp_path: Path) -> None:
    model = tiny_model(FILES)
    folder = tmp_path / "data" / "models" / "tiny"
    _hand_made(folder, FILES)
    write_marker(folder, "tiny")  # what a kill between the rename and the registration leaves
    (tmp_path / "data" / "downloads" / "tiny").mkdir(parents=True)
    (tmp_path / "data" / "downloads" / "tiny" / ".in-progress").touch()
    registry = Registry()

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url)
        assert manager.pending_model_ids() == ["tiny"]
        await (await manager.install(model)).wait()
        await manager.aclose()

    with serve(model, FILES) as server:
        asyncio.run(main(server))
        assert server.gets(model.files[0].url) == []
    assert registry.models == {"tiny": folder}
    assert {k: v for k, v in _contents(folder).items() if k != MARKER} == FILES


def test_an_incomplete_folder_a_download_made_is_replaced(tmp_path: Path) -> None:
    model = tiny_model(FILES)
    folder = tmp_path / "data" / "models" / "tiny"
    _hand_made(folder, {"voice.onnx": b"an older, shorter file"})
    write_marker(folder, "tiny")
    registry = Registry()

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url)
        await (await manager.install(model)).wait()
        await manager.aclose()

    with serve(model, FILES) as server:
        asyncio.run(main(server))
    assert registry.models == {"tiny": folder}
    assert {k: v for k, v in _contents(folder).items() if k != MARKER} == FILES
    assert sorted(p.name for p in folder.parent.iterdir()) == ["tiny"]  # no staging or trash left


def test_a_marker_for_another_model_does_not_make_a_folder_ours(tmp_path: Path) -> None:
    model = tiny_model(FILES)
    work = tmp_path / "downloads" / "tiny"
    work.mkdir(parents=True)
    for name, data in FILES.items():
        (work / f"{name}.part").write_bytes(data)
    folder = tmp_path / "models" / "tiny"
    _hand_made(folder, {"voice.onnx": b"x"})
    write_marker(folder, "other")  # copied from another model's folder
    with pytest.raises(DownloadError):
        move_into_place(model, work, tmp_path / "models")
    assert _contents(folder)["voice.onnx"] == b"x"


def test_models_install_says_which_folder_is_in_the_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main
    from tests.gateway.test_cli_install import _amy

    args = _amy(tmp_path)
    folder = tmp_path / "data" / "models" / "amy"
    mine = _hand_made(folder, {"amy.onnx": b"my own voice"})
    capsys.readouterr()
    assert main(["models", "install", "amy", *args]) == 1
    err = capsys.readouterr().err
    assert f"error: cannot install 'amy': a folder is in the way: {folder} exists" in err
    assert _contents(folder) == mine
