"""Speaker presets (`/v1/presets`): a name for a model + voice + speed + settings.

A request's `voice` may name a preset. Presets survive restarts (SQLite) and outlive
the model they point at: using one whose model is gone is a clear 404, not a crash.
`settings` are checked when saved by the model family's `validate_settings` (the same
checks a request's options get), so a bad value or an unknown key is refused then, with
the field `settings.<key>`, instead of failing every later request that uses the preset.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.types import InvalidInput, UnknownModel
from gateway.errors import ApiError, read_json
from gateway.state import AppState
from gateway.clone_voices import check_preset_voice, is_base, store
from gateway.references import check_name
from gateway.voices import check_speed, model_alias, unknown_default_model
from models import FamilyUnavailable, family

_FIELDS = {"name", "model", "voice", "speed", "settings"}
# What the Voices page offers per family, with a hint; each family's `validate_settings`
# has the rules (tests/gateway/test_voices.py checks that the names agree).
FAMILY_SETTINGS: dict[str, tuple[tuple[str, str], ...]] = {
    "piper": (("noise_scale", "0–2, VITS sampling noise (default: the voice's)"),
              ("noise_w_scale", "0–2, phoneme duration noise; 0 = the same length every time")),
    "orpheus": (("temperature", "0–5 (default 0.6)"), ("top_p", "0–1 (default 0.8)"),
                ("repetition_penalty", "0–5 (default 1.1; ≥ 1.1 keeps speech stable)"),
                ("max_tokens", "≥ 1 (default 2048, about 25 s)"), ("seed", "an integer: the same take every time"),
                ("force_tokens", "benchmarks on random weights: this many audio tokens, 7 a frame (≥ 7)")),
}


def _public(preset: dict[str, Any]) -> dict[str, Any]:
    return {"name": preset["name"], "model": preset["model_id"], "voice": preset["voice"],
            "speed": preset["speed"], "settings": preset["settings"],
            "created_at": preset["created_at"], "updated_at": preset["updated_at"]}


async def _validated(state: AppState, data: dict[str, Any], existing: bool = False) -> dict[str, Any]:
    """The preset to save. `existing`: an update of a saved preset, whose name is not checked again:
    an older Voxgate took names that the rules now refuse (ending with a space, a voice's name), and
    such a preset can still be edited (the list says what is wrong with it) or deleted."""
    unknown = set(data) - _FIELDS
    if unknown:
        field = sorted(unknown)[0]
        raise InvalidInput(f"unknown field {field!r}; presets have {', '.join(sorted(_FIELDS))}", field=field)
    name = str(data["name"]) if existing else check_name(data.get("name"))
    model_id = data.get("model", state.settings.default_model)
    if not isinstance(model_id, str):
        raise InvalidInput("model must be a string (a model id)", field="model")
    asked, model_id = model_id, model_alias(model_id, state.settings.default_model)  # tts-1: the default model
    record = await state.library.get_model(model_id)
    if record is None:
        if "model" not in data or asked != model_id:
            raise unknown_default_model(model_id, ", ".join(m["id"] for m in await state.library.list_models()),
                                        asked if asked != model_id else None)
        raise UnknownModel(f"unknown model {model_id!r}", field="model")
    voices = await state.library.voices(model_id)
    if name in voices and not existing:
        raise InvalidInput(f"{name!r} is a built-in voice of {model_id!r}; choose another preset name", field="name")
    voice = data.get("voice", voices[0] if voices else None)
    await check_preset_voice(state, model_id, voice, voices)  # a Base model's: a reference voice too
    speed = check_speed(data.get("speed", 1.0))
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise InvalidInput("settings must be an object", field="settings")
    settings = family(record["family"]).validate_settings(settings, record["options"])
    if "instructions" in settings and await is_base(state, model_id):  # the family refuses them at use
        raise InvalidInput("a Base model takes no instructions: it speaks as its reference voice",
                           field="settings.instructions")
    return {"name": name, "model_id": model_id, "voice": voice, "speed": speed, "settings": settings}


async def list_presets(request: Request) -> JSONResponse:
    """Presets whose model was deleted are listed with `usable: false` and the reason."""
    state: AppState = request.app.state.voxgate
    return JSONResponse({"object": "list", "data": await described(state, await state.library.list_presets())})


async def described(state: AppState, presets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`presets` (the library's rows) as GET /v1/presets lists them, each with `usable` and
    `problem` (`_described`); each model's voices and kind asked once for all its presets."""
    models = await _models(state)
    voices: dict[str, list[str]] = {}
    bases: dict[str, bool] = {}
    return [await _described(state, preset, models, voices, bases) for preset in presets]


async def _models(state: AppState) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in await state.library.list_models()}


async def _described(state: AppState, preset: dict[str, Any], models: dict[str, dict[str, Any]],
                     voices: dict[str, list[str]] | None = None,
                     bases: dict[str, bool] | None = None) -> dict[str, Any]:
    """The preset with `usable` and, if not, the `problem`: its model is gone, or a voice of that model
    has its name (saved by an older Voxgate; the voice wins), or its reference voice is gone, or its
    settings no longer pass the family's checks (saved before a check was added, or the model's
    options changed: force_tokens past its max_seq_len). `voices` and `bases`: the models' voices and
    whether each is a Base model (`is_base`: its row, then its config.json in a thread), asked so far,
    by model id (a list of presets asks once per model), filled in here."""
    voices = {} if voices is None else voices
    bases = {} if bases is None else bases
    record = models.get(preset["model_id"])
    problem = None if record is not None else f"model {preset['model_id']!r} is not installed"
    if problem is None:
        if preset["model_id"] not in voices:
            voices[preset["model_id"]] = await state.library.voices(preset["model_id"])
        if preset["name"] in voices[preset["model_id"]]:  # (an older Voxgate's)
            problem = (f"model {preset['model_id']!r} has a voice named {preset['name']!r}, which requests get "
                       "instead of this preset; create it again under another name")
    if problem is None and preset["model_id"] not in bases:
        bases[preset["model_id"]] = await is_base(state, preset["model_id"])
    if problem is None and bases[preset["model_id"]]:  # (a Base model speaks in reference voices only)
        if await store(state).get(preset["voice"]) is None:
            problem = f"reference voice {preset['voice']!r} is gone (/v1/voices/references)"
    elif problem is None and preset["voice"] not in voices[preset["model_id"]]:  # (another model under its id since)
        problem = (f"model {preset['model_id']!r} has no voice {preset['voice']!r} (voices: "
                   f"{', '.join(voices[preset['model_id']])}); edit the preset's voice")
    if problem is None and record is not None:
        try:
            family(record["family"]).validate_settings(preset["settings"], record["options"])
        except InvalidInput as error:
            problem = error.message
        except (FamilyUnavailable, KeyError):  # its packages are missing, or the family: using it says so
            pass
    return {**_public(preset), "usable": problem is None, "problem": problem}


async def create_preset(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    preset = await _validated(state, await read_json(request, state.settings.max_body_bytes))
    hidden = next((r["name"] for r in await store(state).list()  # presets are found in any case, so the
                   if str(r["name"]).casefold() == preset["name"].casefold()), None)  # preset would hide it
    if hidden is not None:
        raise ApiError(409, "name_taken", f"a reference voice is named {hidden!r}; choose another name",
                       field="name")
    twin = next((p["name"] for p in await state.library.list_presets()
                 if p["name"] != preset["name"] and p["name"].casefold() == preset["name"].casefold()), None)
    if twin is not None:  # one name would stand for two in lists and pickers
        raise ApiError(409, "preset_exists", f"a preset named {twin!r} exists (names differ only in case); "
                       "choose another name, or change that one", field="name")
    if not await state.library.put_preset(**preset, create=True):
        raise ApiError(409, "preset_exists", f"a preset named {preset['name']!r} exists", field="name")
    saved = await state.library.get_preset(preset["name"]) or {}
    return JSONResponse(await _described(state, saved, await _models(state)), status_code=201)


async def get_preset(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    preset = await state.library.find_preset(request.path_params["name"])  # in any case, as `voice` finds it
    if preset is None:
        raise ApiError(404, "preset_not_found", f"no preset named {request.path_params['name']!r}", field="name")
    return JSONResponse(await _described(state, preset, await _models(state)))


def _merged(current: dict[str, Any], patch: Any) -> Any:
    """A PATCH's `settings` merged into the preset's as JSON Merge Patch (RFC 7396) merges an
    object: its keys replace those, a null removes one. Anything but an object is returned
    as it is, for `_validated` to refuse."""
    if not isinstance(patch, dict):
        return patch
    merged = {**current, **patch}
    return {key: value for key, value in merged.items() if value is not None}


async def update_preset(request: Request) -> JSONResponse:
    """PUT replaces, PATCH changes only the fields given (`settings` key by key: `_merged`);
    the name in the path wins."""
    state: AppState = request.app.state.voxgate
    current = await state.library.find_preset(request.path_params["name"])  # in any case
    if current is None:
        raise ApiError(404, "preset_not_found", f"no preset named {request.path_params['name']!r}", field="name")
    name = current["name"]  # as it was created
    data = await read_json(request, state.settings.max_body_bytes)
    if "name" in data and str(data["name"]).lower() != name.lower():
        raise InvalidInput("a preset cannot be renamed; create a new one", field="name")
    if request.method == "PATCH":
        data = {"model": current["model_id"], "voice": current["voice"], "speed": current["speed"],
                **data, "settings": _merged(current["settings"], data.get("settings", {}))}
    preset = await _validated(state, {**data, "name": name}, existing=True)
    await state.library.put_preset(**preset, create=False)
    return JSONResponse(await _described(state, await state.library.get_preset(name) or {}, await _models(state)))


async def delete_preset(request: Request) -> Response:
    state: AppState = request.app.state.voxgate
    found = await state.library.find_preset(request.path_params["name"])  # in any case
    if found is None or not await state.library.delete_preset(found["name"]):
        raise ApiError(404, "preset_not_found", f"no preset named {request.path_params['name']!r}", field="name")
    return Response(status_code=204)
