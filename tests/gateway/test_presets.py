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
