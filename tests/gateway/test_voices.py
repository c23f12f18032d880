"""Which model and voice a request means: models' voices, presets, OpenAI names."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from engine.types import InvalidInput, UnknownModel, UnknownVoice
from gateway.library import Library
from gateway.voices import resolve
from tests.conftest import LiveServer


def run(tmp_path: Path, check) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        library = await Library.open(tmp_path / "db.sqlite")
        try:
            await library.add_model("joe", "piper", "Joe", None, ["default"])
            await library.add_model("orph", "orpheus", "Orpheus", "/x", ["tara", "leah"])
            await check(library)
        finally:
            await library.close()

    asyncio.run(go())


def choose(library: Library, **kwargs: object):  # type: ignore[no-untyped-def]
    args = {"model": None, "voice": None, "speed": None, **kwargs}
    return resolve(library, default_model="joe", default_voice="default", **args)


def test_a_model_without_a_voice_gets_its_own_default_voice(tmp_path: Path) -> None:
    async def check(library: Library) -> None:
        assert (await choose(library, model="orph")).voice == "tara"
        assert (await choose(library, model="orph", voice="alloy")).voice == "tara"
        assert (await choose(library)).voice == "default"
        with pytest.raises(UnknownVoice):
            await choose(library, model="orph", voice="default")
        with pytest.raises(UnknownModel):
            await choose(library, model="nope")
        with pytest.raises(InvalidInput):
            await choose(library, model=3)

    run(tmp_path, check)


def test_a_models_voice_wins_over_a_preset_of_the_same_name(tmp_path: Path) -> None:
    async def check(library: Library) -> None:
        await library.put_preset("leah", "joe", "default", 2.0, {}, create=True)
        await library.put_preset("alloy", "orph", "leah", 1.5, {}, create=True)
        assert (await choose(library, model="orph", voice="leah")).model_id == "orph"
        leah = await choose(library, voice="leah")  # no model: the default model has no leah
        assert (leah.model_id, leah.speed, leah.preset) == ("joe", 2.0, "leah")
        alloy = await choose(library, model="tts-1", voice="alloy")  # a preset may claim an OpenAI name
        assert (alloy.model_id, alloy.voice) == ("orph", "leah")
        with pytest.raises(InvalidInput) as info:  # a preset of another model than the one named
            await choose(library, model="joe", voice="alloy")
        assert info.value.field == "voice"

    run(tmp_path, check)


def test_a_preset_is_found_in_any_case_and_an_unknown_voice_lists_the_presets(tmp_path: Path) -> None:
    """Preset names are unique regardless of case, but `FastJoe` did not find `fastjoe`, and the
    error listed only the model's voices (found by a new-user trial)."""
    async def check(library: Library) -> None:
        await library.put_preset("fastjoe", "joe", "default", 1.5, {}, create=True)
        await library.put_preset("slow", "orph", "tara", 0.8, {}, create=True)
        found = await choose(library, voice="FastJoe")
        assert (found.model_id, found.speed, found.preset) == ("joe", 1.5, "fastjoe")
        with pytest.raises(UnknownVoice) as info:
            await choose(library, voice="nobody")
        assert str(info.value).endswith("voices: default; presets: fastjoe"), str(info.value)

    run(tmp_path, check)


def test_model_lookup_and_openai_aliases(client: httpx.Client) -> None:
    model = client.get("/v1/models/piper-joe").json()
    assert model["id"] == "piper-joe" and model["object"] == "model"
    assert client.get("/v1/models/tts-1").json()["id"] == "piper-joe"
    for dated in ("tts-1-1106", "tts-1-hd-1106", "gpt-4o-mini-tts-2025-03-20"):  # OpenAI's snapshot ids
        assert client.get(f"/v1/models/{dated}").json()["id"] == "piper-joe", dated
    for other in ("tts-1-11", "tts-2-1106", "piper-joe-1106"):
        assert client.get(f"/v1/models/{other}").json()["error"]["field"] == "model", other
    assert client.get("/v1/models/nope").json()["error"]["field"] == "model"
    assert client.get("/v1/audio/voices", params={"model": "tts-1"}).json()["data"][0]["model"] == "piper-joe"


def test_load_and_unload_follow_the_openai_alias(client: httpx.Client) -> None:
    loaded = client.post("/v1/models/tts-1/load", json={})
    assert loaded.status_code == 200 and loaded.json()["id"] == "piper-joe" and loaded.json()["loaded"] is True
    assert client.get("/v1/models/piper-joe").json()["loaded"] is True
    unloaded = client.post("/v1/models/gpt-4o-mini-tts-2025-12-15/unload", json={})
    assert unloaded.status_code == 200
    assert unloaded.json()["id"] == "piper-joe" and unloaded.json()["unloaded"] is True
    assert client.get("/v1/models/tts-1").json()["loaded"] is False
    for path in ("/v1/models/tts-2/load", "/v1/models/tts-2/unload"):  # not an OpenAI name
        assert client.post(path, json={}).json()["error"]["field"] == "model"
    client.post("/v1/models/piper-joe/load", json={})
    refused = client.post("/v1/models/piper-joe/unload", json={"x": 1})  # unload takes no fields
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "x", refused.text
    assert "takes no fields" in refused.json()["error"]["message"]
    assert client.get("/v1/models/piper-joe").json()["loaded"] is True  # nothing done


@pytest.mark.parametrize("model", [None, 5, ["piper-joe"]])
def test_a_preset_model_that_is_not_a_string_is_a_400(client: httpx.Client, model: object) -> None:
    created = client.post("/v1/presets", json={"name": "typed model", "model": model})
    assert created.status_code == 400 and created.json()["error"]["field"] == "model", created.text
    assert all(p["name"] != "typed model" for p in client.get("/v1/presets").json()["data"])  # nothing written
    client.post("/v1/presets", json={"name": "typed model"})
    try:
        changed = client.patch("/v1/presets/typed%20model", json={"model": model})
        assert changed.status_code == 400 and changed.json()["error"]["field"] == "model", changed.text
    finally:
        client.delete("/v1/presets/typed%20model")


def test_a_preset_cannot_take_a_builtin_voice_name(client: httpx.Client) -> None:
    response = client.post("/v1/presets", json={"name": "default", "model": "piper-joe"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "name"


def test_a_family_without_its_packages_is_a_clear_error(server: LiveServer, client: httpx.Client,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_missing.py").write_text("import voxgate_no_such_package\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules["models"].FAMILIES, "broken", "needs_missing")
    folder = tmp_path / "model"
    folder.mkdir()
    off = client.post("/v1/library/install", json={"path": str(folder), "family": "broken"})
    assert off.status_code == 403 and off.json()["error"]["code"] == "local_install_disabled"  # said first
    from gateway.app import create_app
    from gateway.settings import load_settings
    from tests.conftest import local_client

    settings = load_settings(env={}, data_dir=tmp_path / "data", local_model_roots=[str(tmp_path)])
    with local_client(create_app(settings)) as roots:
        response = roots.post("/v1/library/install", json={"path": str(folder), "family": "broken"})
    assert response.status_code == 501, response.text
    error = response.json()["error"]
    assert error["code"] == "family_unavailable" and "voxgate_no_such_package" in error["message"]


@pytest.mark.parametrize(("settings", "field"), [
    ({"noise_scale": "loud"}, "settings.noise_scale"),
    ({"noise_scale": 3}, "settings.noise_scale"),
    ({"noise_w_scale": True}, "settings.noise_w_scale"),
    ({"loudness": 1}, "settings.loudness"),
])
def test_preset_settings_are_checked_when_saved(server: LiveServer, settings: dict[str, object], field: str) -> None:
    with httpx.Client(base_url=server.url) as client:
        created = client.post("/v1/presets", json={"name": "checked", "settings": settings})
        assert created.status_code == 400, created.text
        assert created.json()["error"]["field"] == field
        assert client.get("/v1/presets/checked").status_code == 404  # nothing stored
        assert client.post("/v1/presets", json={"name": "checked", "settings": {"noise_scale": 0.4}}).status_code == 201
        patched = client.patch("/v1/presets/checked", json={"settings": settings})
        assert patched.status_code == 400 and patched.json()["error"]["field"] == field
        assert client.get("/v1/presets/checked").json()["settings"] == {"noise_scale": 0.4}
        assert client.delete("/v1/presets/checked").status_code == 204


def test_patch_merges_settings_key_by_key(server: LiveServer) -> None:
    """PATCH of one setting once replaced them all (a seed went with it: a new user's trial);
    a null removes a key (JSON Merge Patch), PUT still replaces."""
    with httpx.Client(base_url=server.url) as client:
        assert client.post("/v1/presets", json={"name": "merged", "settings": {"noise_scale": 0.4}}).status_code == 201
        patched = client.patch("/v1/presets/merged", json={"settings": {"noise_w_scale": 0.5}})
        assert patched.status_code == 200, patched.text
        assert patched.json()["settings"] == {"noise_scale": 0.4, "noise_w_scale": 0.5}
        assert client.patch("/v1/presets/merged", json={"speed": 1.1}).json()["settings"] == {
            "noise_scale": 0.4, "noise_w_scale": 0.5}
        patched = client.patch("/v1/presets/merged", json={"settings": {"noise_scale": None, "noise_w_scale": 0.6}})
        assert patched.json()["settings"] == {"noise_w_scale": 0.6}
        refused = client.patch("/v1/presets/merged", json={"settings": [1]})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "settings"
        replaced = client.put("/v1/presets/merged", json={"settings": {"noise_scale": 0.3}})
        assert replaced.json()["settings"] == {"noise_scale": 0.3}
        assert client.delete("/v1/presets/merged").status_code == 204


def test_orpheus_force_tokens_is_a_whole_number_the_model_can_hold(orpheus_tiny: Path, tmp_path: Path) -> None:
    """Fewer tokens than a frame's 7 made a 44-byte WAV, 700.5 was kept as 700 and 100000 was
    cut at the KV slot, all with a 201 (a new user's trial)."""
    from gateway.app import create_app
    from gateway.cli import main
    from gateway.settings import load_settings
    from tests.conftest import local_client

    for model_id, options in (("orph-tiny", []), ("orph-short", ["--option", "max_seq_len=1024"])):
        assert main(["models", "add", "--family", "orpheus", "--path", str(orpheus_tiny), "--id", model_id,
                     *options, "--data-dir", str(tmp_path)]) == 0
    with local_client(create_app(load_settings(env={}, data_dir=tmp_path))) as client:
        def create(name: str, force_tokens: object, model: str = "orph-tiny") -> httpx.Response:
            return client.post("/v1/presets", json={"name": name, "model": model,
                                                    "settings": {"force_tokens": force_tokens}})

        for value in (1, 5, 6, 700.5, "700", 2555, 100000):
            refused = create("o3", value)
            assert refused.status_code == 400, (value, refused.text)
            error = refused.json()["error"]
            assert error["field"] == "settings.force_tokens" and error["message"].startswith(
                "settings.force_tokens must be an integer from 7 (one audio frame of 7 tokens"), error
            assert "to 2554 (the model's max_seq_len, 2560 positions, less the prompt's 6 fixed tokens)" in \
                error["message"]
        assert client.get("/v1/presets/o3").status_code == 404
        short = create("o3", 1100, "orph-short").json()["error"]
        assert short["field"] == "settings.force_tokens"
        assert "to 1018 (the model's max_seq_len, 1024" in short["message"]
        for value, kept in ((7, 7), (700, 700), (700.0, 700), (2554, 2554)):
            created = create(f"ok{value}", value)
            assert created.status_code == 201 and created.json()["settings"] == {"force_tokens": kept}, created.text
        patched = client.patch("/v1/presets/ok7", json={"settings": {"force_tokens": 5}})
        assert patched.status_code == 400 and patched.json()["error"]["field"] == "settings.force_tokens"

    async def saved_before_the_check() -> None:
        library = await Library.open(tmp_path / "voxgate.db")
        try:
            await library.put_preset("old", "orph-tiny", "tara", 1.0, {"force_tokens": 5}, create=True)
        finally:
            await library.close()

    asyncio.run(saved_before_the_check())
    with local_client(create_app(load_settings(env={}, data_dir=tmp_path))) as client:
        old = client.get("/v1/presets/old").json()
        assert old["usable"] is False and old["problem"].startswith("settings.force_tokens must be an integer from 7")
        assert client.get("/v1/presets/ok7").json()["usable"] is True


def test_the_voices_page_offers_what_each_family_accepts() -> None:
    from gateway.presets import FAMILY_SETTINGS
    from models import piper

    assert [name for name, _ in FAMILY_SETTINGS["piper"]] == list(piper.NOISE_OPTIONS)
    for name, _ in FAMILY_SETTINGS["piper"]:
        assert piper.validate_settings({name: 0.5}) == {name: 0.5}
    pytest.importorskip("torch")
    from models import orpheus

    names = [name for name, _ in FAMILY_SETTINGS["orpheus"]]
    valid = {**{name: 1 for name in names}, "force_tokens": 7}
    assert orpheus.validate_settings(valid) == valid
    with pytest.raises(InvalidInput) as error:
        orpheus.validate_settings({"temperature": "hot"})
    assert error.value.field == "settings.temperature"
    with pytest.raises(InvalidInput):
        orpheus.validate_settings({"noise_scale": 0.5})


def test_a_qwen3_tts_model_type_is_read_once_per_change_of_its_config(tmp_path: Path) -> None:
    """gateway/models_api.py: asked on every speech request, read again only when config.json changes."""
    import dataclasses
    import json
    import os

    from gateway.models_api import _model_type_at
    from models.qwen3_tts_args import FLAVORS

    def hf(kind: str) -> str:
        return json.dumps(dataclasses.replace(FLAVORS["tiny"], tts_model_type=kind).to_hf())

    config = tmp_path / "config.json"
    config.write_text(hf("custom_voice"))
    assert _model_type_at(tmp_path) == "custom_voice"
    os.utime(config, ns=(1, 1))  # whatever the clock's resolution: a new mtime
    config.write_text(hf("base"))
    os.utime(config, ns=(2, 2))
    assert _model_type_at(tmp_path) == "base"
    config.write_text("{not json")
    os.utime(config, ns=(3, 3))
    assert _model_type_at(tmp_path) is None
    config.unlink()
    assert _model_type_at(tmp_path) is None


def test_preset_names_that_differ_only_in_case_are_refused(client: httpx.Client) -> None:
    """"Bob", "bob" and "Bob " could all be created and listed side by side (a new user's trial)."""
    assert client.post("/v1/presets", json={"name": "Bob"}).status_code == 201
    try:
        twin = client.post("/v1/presets", json={"name": "bob"})
        assert twin.status_code == 409 and twin.json()["error"]["field"] == "name", twin.text
        assert twin.json()["error"]["message"].startswith("a preset named 'Bob' exists (names differ only in case)")
        trailing = client.post("/v1/presets", json={"name": "Bob "})
        assert trailing.status_code == 400 and "not ending with a space" in trailing.json()["error"]["message"]
        assert [p["name"] for p in client.get("/v1/presets").json()["data"] if p["name"].casefold() == "bob"] == ["Bob"]
        assert client.put("/v1/presets/Bob", json={"speed": 1.1}).status_code == 200  # its own name: no twin
        # Its routes find it in any case, as `voice` does (found by a new-user trial: 404 for "bob")
        assert client.get("/v1/presets/bob").json()["name"] == "Bob"
        patched = client.patch("/v1/presets/BOB", json={"name": "bob", "speed": 1.2})
        assert patched.status_code == 200 and patched.json()["name"] == "Bob" and patched.json()["speed"] == 1.2
        assert client.patch("/v1/presets/bob", json={"name": "Rob"}).json()["error"]["field"] == "name"  # no renames
    finally:
        assert client.delete("/v1/presets/bOb").status_code == 204
    assert client.get("/v1/presets/Bob").status_code == 404
