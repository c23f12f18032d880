"""Models of the config file's `[[models]]` entries in the library once the entry is gone
(gateway/library_api.py `protected_message`, gateway/cli_models.py `remove`)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.cli import main
from gateway.settings import load_settings
from tests.conftest import local_client
from tests.gateway.test_cli_models import _models, _voice, refused_at_start


def test_a_model_whose_config_entry_is_gone_can_be_removed(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A [[models]] entry taken out of the config file left its model in the library, and both
    DELETE /v1/library/models/{id} and `voxgate models remove` refused it for good (409
    `model_protected`: "remove the entry there", which was gone; found by a new-user trial).
    Only a model the config file in force still lists is protected; the folder stays (Voxgate
    did not download it)."""
    folder = _voice(tmp_path, "cfg")
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "cfgmodel"\nfamily = "piper"\npath = "{folder}"\n'
                      f'[[models]]\nid = "other"\nfamily = "piper"\npath = "{folder}"\n')
    data = tmp_path / "data"
    with local_client(create_app(load_settings(config, env={}, data_dir=data, min_free_memory_mb=0))):
        pass  # registers both entries
    config.write_text(f'[[models]]\nid = "other"\nfamily = "piper"\npath = "{folder}"\n')  # cfgmodel's is gone
    with local_client(create_app(load_settings(config, env={}, data_dir=data, min_free_memory_mb=0))) as client:
        assert client.delete("/v1/library/models/other").json()["error"]["code"] == "model_protected"
        removed = client.delete("/v1/library/models/cfgmodel")
        assert removed.status_code == 200, removed.text
        assert removed.json()["files_removed"] is False
    assert "cfgmodel" not in asyncio.run(_models(data)) and folder.is_dir()

    config.write_text("")  # `other`'s entry goes too: the CLI removes it given that config file; without
    capsys.readouterr()    # one, it cannot tell whether the entry is still there, and says how
    assert main(["models", "remove", "other", "--data-dir", str(data)]) == 1
    assert "if it has left the config file, name that file with --config" in capsys.readouterr().err
    assert main(["models", "remove", "other", "--data-dir", str(data), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("removed other;") and f"[[models]] entry that {config} no longer has" in out, out
    assert "other" not in asyncio.run(_models(data)) and folder.is_dir()



def test_no_model_takes_the_embedded_voices_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A [[models]] entry with id `piper-joe` replaced the embedded voice's row (source `config`) for
    good: with the entry gone it stayed, and the embedded voice never came back; `voxgate models add
    --id piper-joe` on a fresh data dir took the id before the server's first start, which then
    registered no embedded voice (found by a new-user trial). Both are refused, as a catalog id is."""
    folder = _voice(tmp_path, "mine")
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "piper-joe"\nfamily = "piper"\npath = "{folder}"\n')
    problem = ("[[models]] 'piper-joe' in the config file: 'piper-joe' is the id of the embedded voice; give the "
               "entry another id")
    data = tmp_path / "data"
    refused_at_start(config, data, problem, capsys)
    assert main(["models", "add", "--family", "piper", "--path", str(folder), "--id", "piper-joe", "--data-dir",
                 str(data)]) == 2
    assert capsys.readouterr().err == ("error: 'piper-joe' is the id of the embedded voice; pick another --id\n")
    assert asyncio.run(_models(data)) == []


def test_a_config_entry_does_not_replace_a_model_added_otherwise(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A [[models]] entry with the id of a model `voxgate models add` (or the HTTP install) had
    registered replaced that model at the next start, in silence: its family, folder and options
    went, and so did the presets' voices of it (found by a new-user trial). The start is refused,
    naming the entry and the model, and the library keeps the model as it was. An id given to two
    entries (the last one was registered) is refused too."""
    mine, other = _voice(tmp_path, "mine"), _voice(tmp_path, "other")
    data = tmp_path / "data"
    assert main(["models", "add", "--family", "piper", "--path", str(mine), "--option", "workers=1",
                 "--data-dir", str(data)]) == 0
    config = tmp_path / "voxgate.toml"
    config.write_text(f'[[models]]\nid = "mine"\nfamily = "piper"\npath = "{other}"\n')
    problem = (f"[[models]] 'mine' in the config file: a model of that id is installed, not from the config file "
               f"(piper, {mine}); give the entry another id, or remove that model first: voxgate models remove mine")
    with pytest.raises(ValueError, match=re.escape(problem)):  # (an app's start first: without the check, the
        with local_client(create_app(load_settings(config, env={}, data_dir=data))):  # CLI would serve on)
            pass
    refused_at_start(config, data, problem, capsys)

    async def held() -> dict[str, object]:
        from gateway.library import Library
        library = await Library.open(data / "voxgate.db")
        try:
            record = await library.get_model("mine")
            assert record is not None
            return record
        finally:
            await library.close()
    record = asyncio.run(held())
    assert (record["path"], record["options"], record["source"]) == (str(mine), {"workers": 1}, "local")

    config.write_text(f'[[models]]\nid = "twice"\nfamily = "piper"\npath = "{mine}"\n'
                      f'[[models]]\nid = "twice"\nfamily = "piper"\npath = "{other}"\n')
    with pytest.raises(ValueError, match="'twice' is in the config file more than once"):
        load_settings(config, env={}, data_dir=data)
    capsys.readouterr()
    assert main(["serve", "--config", str(config), "--data-dir", str(data)]) == 2
    assert capsys.readouterr().err == ("error: invalid settings: [[models]] entry 'twice' is in the config file more "
                                       "than once; give each entry its own id\n")
    assert "twice" not in asyncio.run(_models(data))
