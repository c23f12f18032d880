"""Presets an older Voxgate saved under names today's rules refuse (gateway/presets.py): up to the
studio's first releases a name could end with a space and could be a voice of its own model.
After an upgrade such a preset is listed with what is wrong with it, and stays editable."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.library import Library
from tests.conftest import run_server


def _saved_by_an_older_version(data_dir: Path) -> None:
    """The rows as the older server's POST /v1/presets wrote them (Library.put_preset checks no name)."""
    async def go() -> None:
        library = await Library.open(data_dir / "voxgate.db")
        await library.put_preset("Bob ", "piper-joe", "default", 1.2, {}, create=True)
        await library.put_preset("default", "piper-joe", "default", 1.3, {"noise_scale": 0.4}, create=True)
        await library.close()

    asyncio.run(go())


def test_a_preset_saved_under_a_name_now_refused_is_listed_and_stays_editable(tmp_path: Path) -> None:
    _saved_by_an_older_version(tmp_path)
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            listed = {p["name"]: p for p in client.get("/v1/presets").json()["data"]}
            assert listed["Bob "]["usable"] is True
            # Requests for voice "default" get piper-joe's own voice: the list says so.
            assert listed["default"]["usable"] is False
            assert listed["default"]["problem"] == ("model 'piper-joe' has a voice named 'default', which requests "
                                                    "get instead of this preset; create it again under another name")
            for name, speed in (("Bob ", 0.8), ("default", 0.7)):
                patched = client.patch(f"/v1/presets/{name}", json={"speed": speed})
                assert patched.status_code == 200, patched.text
                assert patched.json()["speed"] == speed and patched.json()["name"] == name
            put = client.put("/v1/presets/Bob ", json={"voice": "default", "speed": 1.0})
            assert put.status_code == 200, put.text
            assert client.get("/v1/presets/default").json()["settings"] == {"noise_scale": 0.4}
            # A new preset is still held to the rules, and the old ones can go.
            assert client.post("/v1/presets", json={"name": "Ann ", "voice": "default"}).status_code == 400
            assert client.post("/v1/presets", json={"name": "default", "voice": "default"}).status_code in (400, 409)
            assert client.delete("/v1/presets/Bob ").status_code == 204
            assert client.delete("/v1/presets/default").status_code == 204


def test_the_list_asks_for_each_models_voices_and_kind_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /v1/presets asked for its model's voices once a preset, and whether it is a Base model
    (`is_base`: the model's row, then its config.json in a thread) once a usable preset; now each once
    a model, and lists the presets as GET /v1/presets/{name} describes each alone (a hidden one, usable
    ones, one whose model is gone)."""
    import gateway.presets as presets

    _saved_by_an_older_version(tmp_path)

    async def more() -> None:
        library = await Library.open(tmp_path / "voxgate.db")
        for name in ("Cid", "Dee"):
            await library.put_preset(name, "piper-joe", "default", 1.0, {}, create=True)
        await library.put_preset("Eve", "gone", "default", 1.0, {}, create=True)
        await library.close()

    asyncio.run(more())
    asked: list[str] = []
    voices = Library.voices

    async def counted(self: Library, model_id: str) -> list[str]:
        asked.append(model_id)
        return await voices(self, model_id)

    kinds: list[str] = []
    is_base = presets.is_base

    async def counted_kind(state: Any, model_id: str) -> bool:
        kinds.append(model_id)
        return await is_base(state, model_id)

    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            alone = [client.get(f"/v1/presets/{name}").json() for name in ("Bob ", "Cid", "Dee", "Eve", "default")]
            monkeypatch.setattr(Library, "voices", counted)
            monkeypatch.setattr(presets, "is_base", counted_kind)
            listed = client.get("/v1/presets")
            monkeypatch.undo()
    assert listed.status_code == 200, listed.text
    assert listed.json()["data"] == alone
    assert [p["usable"] for p in alone] == [True, True, True, False, False]
    assert asked == ["piper-joe"] and kinds == ["piper-joe"], (asked, kinds)


def test_the_voices_list_says_of_each_preset_what_the_presets_list_says(tmp_path: Path) -> None:
    """GET /v1/audio/voices listed presets with no `usable` or `problem`: one hidden by a voice of its
    model (which requests get instead) looked as usable as any, while GET /v1/presets and the Voices
    page flagged it. Reference voices there carried both already."""
    _saved_by_an_older_version(tmp_path)
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            presets = {p["name"]: p for p in client.get("/v1/presets").json()["data"]}
            for query in ({}, {"model": "piper-joe"}):
                listed = [v for v in client.get("/v1/audio/voices", params=query).json()["data"]
                          if v["kind"] == "preset"]
                assert {v["name"] for v in listed} == {"Bob ", "default"}, listed
                for voice in listed:
                    preset = presets[voice["name"]]
                    assert (voice["usable"], voice["problem"]) == (preset["usable"], preset["problem"]), voice
                assert [v["usable"] for v in sorted(listed, key=lambda v: v["name"])] == [True, False]


def test_a_preset_whose_voice_its_model_no_longer_has_is_not_usable(tmp_path: Path, orpheus_tiny: Path) -> None:
    """A trial's finding: a model deleted and another added under its id (another family) left its
    presets listed `usable: true` with no `problem`, while every request with one was a 404
    (`model 'mine' has no voice 'default'`). The preset is listed as not usable, saying why."""
    from gateway.cli import main
    from tests.gateway.test_cli_models import _voice

    folder = _voice(tmp_path / "voices", "mine")
    assert main(["models", "add", "--family", "piper", "--path", str(folder), "--data-dir", str(tmp_path)]) == 0
    for server in run_server(tmp_path):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            created = client.post("/v1/presets", json={"name": "calm", "model": "mine", "voice": "default"})
            assert created.json()["usable"] is True, created.text
            assert client.delete("/v1/library/models/mine").status_code == 200
            assert main(["models", "add", "--family", "orpheus", "--path", str(orpheus_tiny), "--id", "mine",
                         "--data-dir", str(tmp_path)]) == 0
            preset = client.get("/v1/presets/calm").json()
            assert preset["usable"] is False and preset["problem"].startswith(
                "model 'mine' has no voice 'default' (voices: tara, "), preset
            listed = [v for v in client.get("/v1/audio/voices", params={"model": "mine"}).json()["data"]
                      if v["kind"] == "preset"]
            assert [(v["usable"], v["problem"]) for v in listed] == [(False, preset["problem"])]
            refused = client.post("/v1/audio/speech", json={"voice": "calm", "input": "Hi."})
            assert refused.status_code == 404 and refused.json()["error"]["param"] == "voice"
