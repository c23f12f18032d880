"""`voxgate models ...`: the model library from the command line (gateway/cli.py parses the
command line and passes each command its arguments and settings).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.catalog import CatalogModel
    from gateway.server_lock import Holder


def _error(message: str, status: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return status


def _busy(holder: Holder | None, settings: Settings, through_server: str) -> int | None:
    """The refusal (exit 1) when `holder` has the data dir: a server (`through_server` says how to do it
    there, and that the server can be stopped) or another install/remove; None when nothing holds it."""
    from gateway.server_lock import SERVER

    if holder is None:
        return None
    if holder.role == SERVER:
        return _error(f"a Voxgate server is running on {settings.data_dir}: {through_server}", 1)
    return _error(f"another `voxgate models install` or `remove` is running on {settings.data_dir}; run this one "
                  "once it has ended", 1)


def _voices(names: list[str], kind: str) -> str:
    """What `voices:` says, as the API lists them (gateway/clone_voices.py `model_voices`)."""
    if kind == "reference":  # a Qwen3-TTS Base model speaks only in cloned voices
        return ", ".join(names) if names else "none until a reference voice is uploaded (POST /v1/voices/references)"
    return ", ".join(names)


async def add(args: argparse.Namespace, settings: Settings) -> int:
    """Register a folder after its family validated it (files read, not loaded), under an id
    that can name it later: the library's id rule, no catalog model's id, not taken."""
    from gateway.app import EMBEDDED_MODEL
    from gateway.catalog import load_catalog
    from gateway.clone_voices import library_voices
    from gateway.library import Library, ModelExists, default_model_id, model_id_problem
    from gateway.library_api import MAX_MODEL_NAME_CHARS, model_name_ok
    from models import FAMILIES, FamilyUnavailable, InvalidModel, family
    from models.folder_family import other_family
    from models.model_options import is_path

    if args.id is not None and (problem := model_id_problem(args.id)):
        return _error(f"--id: {problem}")
    if args.name is not None and not model_name_ok(args.name):  # (as POST /v1/library/install refuses it)
        return _error(f"--name must be 1-{MAX_MODEL_NAME_CHARS} characters, none a control character (or left out: "
                      "the id)")
    path = Path(args.path).expanduser().resolve()
    try:
        module = family(args.family)
    except KeyError:
        return _error(f"unknown family {args.family!r}; known families: {', '.join(FAMILIES)}")
    except FamilyUnavailable as error:
        return _error(error.message)
    options = {}
    for item in args.option:  # KEY=VALUE, VALUE as JSON (true, 8, [1, 2]) or else a string
        key, equals, raw = item.partition("=")
        if not key or not equals:
            return _error(f"--option {item!r} is not KEY=VALUE")
        if key in options:  # (the last one won, in silence: a typo'd value may be the one kept)
            return _error(f"--option {key} is given twice; give each option once")
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw
        if is_path(getattr(module, "OPTIONS", {}), key) and isinstance(options[key], str) and options[key]:
            # stored absolute, as --path: a server started elsewhere must find it
            options[key] = str(Path(options[key]).expanduser().resolve())
    model_id = args.id if args.id is not None else default_model_id(path)
    if args.id is None and (problem := model_id_problem(model_id)):
        return _error(f"the folder's name {path.name!r} is no model id ({problem}); pass --id")
    how = "pick another --id" if args.id is not None else "pass --id to register this folder under another id"
    if load_catalog(settings.catalog_path or None).get(model_id) is not None:
        return _error(f"{model_id!r} is the id of a catalog model (`voxgate models catalog`); {how}")
    if model_id == EMBEDDED_MODEL["id"]:  # (free before a server's first start, which then registers no voice)
        return _error(f"{model_id!r} is the id of the embedded voice; {how}")
    try:
        info = module.validate(path, options)
    except InvalidModel as error:
        if (other := other_family(path, args.family)) is not None:  # (its own check names only a missing file)
            return _error(f"--family {args.family}: {path}: {other[1]}; add it with --family {other[0]} "
                          f"(its own check said: {error.message})")
        return _error(error.message)
    except (OSError, ValueError) as error:
        return _error(f"{path}: {error}")
    taken = (f"a model with id {model_id!r} is installed (`voxgate models list`); {how}, or remove "
             f"that one first: voxgate models remove {model_id}")
    library = await Library.open(settings.db_path)
    try:
        if await library.get_model(model_id) is not None:
            return _error(taken)
        try:  # a server or another `models add` may register the id since the check
            await library.add_model(model_id, args.family, (args.name or model_id).strip(), str(path), info["voices"],
                                    options, size_bytes=info.get("size_bytes", 0), source="local",
                                    model_type=info.get("model_type"))
        except ModelExists:
            return _error(taken)
        record = {"id": model_id, "family": args.family, "path": str(path), "model_type": info.get("model_type")}
        voices = _voices(*await library_voices(library, settings.data_dir, record))
    finally:
        await library.close()
    print(f"added {model_id} ({args.family}, voices: {voices})")
    return 0


async def remove(args: argparse.Namespace, settings: Settings) -> int:
    """What DELETE /v1/library/models/{id} does, with no server running on the data dir: the
    model leaves the library, its folder is deleted only if Voxgate downloaded it, the presets
    that used it are named (they stay, unusable). The built-in voice is refused. Beside a live
    server it refuses (gateway/server_lock.py): only the server knows whether the model is
    serving, and it would keep a loaded model in memory. Any id the library holds goes,
    including one from before the id rule (`a/b`), which no API path can name."""
    from gateway.app import EMBEDDED_MODEL
    from gateway.library import Library
    from gateway.library_removal import delete_downloaded_folder, folder_users, presets_using, protected_message
    from gateway.server_lock import alone

    with alone(settings.data_dir) as holder:
        refused = _busy(holder, settings, f"remove the model through it (DELETE /v1/library/models/{args.id}, "
                        "which unloads it first and refuses while it serves requests), or stop the server first")
        if refused is not None:
            return refused
        library = await Library.open(settings.db_path)
        try:
            record = await library.get_model(args.id)
            if record is None and args.id == EMBEDDED_MODEL["id"]:  # (listed before a server's first start)
                return _error(protected_message(args.id) or "", 1)
            if record is None:
                return _error(f"no model {args.id!r} is installed (`voxgate models list`)", 1)
            read_config = args.config or os.environ.get("VOXGATE_CONFIG")  # (else: which entries are there is unknown)
            protected = protected_message(args.id, record["source"], settings.default_model,
                                          [str(entry["id"]) for entry in settings.models] if read_config else None)
            if protected is not None and record["source"] == "config" and not read_config:
                protected += "; if it has left the config file, name that file with --config (or VOXGATE_CONFIG)"
            if protected is not None:
                return _error(protected, 1)
            presets = await presets_using(library, args.id)
            users = await folder_users(library, record)
            await library.remove_model(args.id)
        finally:
            await library.close()
        files_removed = await delete_downloaded_folder(settings.data_dir, record, users)
    where = f"; deleted its folder {record['path']}" if files_removed else \
        f"; its folder {record['path']} stays: {', '.join(users)} use{'s' if len(users) == 1 else ''} it" if users \
        else f"; its folder {record['path']} stays ({_why_kept(record, settings)})" if record["path"] else ""
    if record["source"] == "config":  # (its entry has left the config file this command read)
        where += f"; it came from a [[models]] entry that {read_config} no longer has"
    print(f"removed {args.id}{where}")
    if presets:
        print(f"presets now unusable (edit or delete them): {', '.join(presets)}")
    return 0


def _why_kept(record: dict[str, Any], settings: Settings) -> str:
    """Why a removed model's folder stays: registered from elsewhere, or (a model added with `models
    add` inside a downloaded one's folder, left when that one went) in the data dir but not its own
    download (found by a new-user trial: it said "Voxgate did not download it")."""
    if Path(record["path"]).resolve().is_relative_to((settings.data_dir / "models").resolve()):
        return f"it is in {settings.data_dir / 'models'} but was not this model's download; delete it by hand if unused"
    return "Voxgate did not download it"


def _embedded_voices() -> list[str] | None:
    """The embedded voice's voices, as a server registers them at its first start (gateway/app.py
    `register_models`); None where its package is not installed (a server then serves without it)."""
    from gateway.app import embedded_model_info

    try:
        return list(embedded_model_info()["voices"])
    except ImportError:
        return None


async def list_models(args: argparse.Namespace, settings: Settings) -> int:
    """A line a model, tab-separated: id, family, folder (or `(embedded)`), voices. Before a
    server's first start on the data dir, the embedded voice it would register is listed too
    (first, where that start puts it), so a fresh data dir lists what a server there serves."""
    from gateway.app import EMBEDDED_MODEL
    from gateway.clone_voices import library_voices
    from gateway.library import Library

    library = await Library.open(settings.db_path)
    try:
        records = await library.list_models()
        lines = []
        if all(record["id"] != EMBEDDED_MODEL["id"] for record in records) and (voices := _embedded_voices()):
            lines.append(f"{EMBEDDED_MODEL['id']}\t{EMBEDDED_MODEL['family']}\t(embedded)\t{', '.join(voices)}")
        for record in records:
            voices_text = _voices(*await library_voices(library, settings.data_dir, record))
            lines.append(f"{record['id']}\t{record['family']}\t{record['path'] or '(embedded)'}\t{voices_text}")
    finally:
        await library.close()
    for line in lines:
        print(line)
    if not lines:  # (stderr: a script reading the lines finds none)
        print("no models installed: add a folder with `voxgate models add --family FAMILY --path DIR`, or download "
              "one with `voxgate models install ID` (`voxgate models catalog` lists them)", file=sys.stderr)
    return 0


async def catalog(args: argparse.Namespace, settings: Settings) -> int:
    """A line a catalog entry, tab-separated: id, family, size, languages, name, then what to know:
    installed, gated, or a codec (installed with the models that use it)."""
    from gateway.catalog import load_catalog
    from gateway.library import Library

    library = await Library.open(settings.db_path)
    try:
        installed = {record["id"] for record in await library.list_models()}
    finally:
        await library.close()
    for model in load_catalog(settings.catalog_path or None).models:
        size = f"{'~' if model.size_is_approximate else ''}{model.size_bytes / 1e6:.0f} MB"
        notes = [note for note, applies in (
            ("installed", model.id in installed), ("gated: needs download_token", model.gated),
            (f"a {model.kind}: installed with the models that use it", model.kind != "model")) if applies]
        notes_text = f"  ({'; '.join(notes)})" if notes else ""
        print(f"{model.id}\t{model.family}\t{size}\t{', '.join(model.languages)}\t{model.name}{notes_text}")
    return 0


async def install(args: argparse.Namespace, settings: Settings) -> int:
    """Download a catalog model into the library; Ctrl-C keeps the partial files for a resume.
    Beside a live server it refuses (gateway/server_lock.py): the server's own download manager
    works on the same folders, so the install goes through it (POST /v1/library/install, the
    studio's Library page); and no server starts on the data dir until this one has ended."""
    from gateway.catalog import load_catalog
    from gateway.server_lock import alone

    model = load_catalog(settings.catalog_path or None).get(args.id)
    if model is None:
        print(f"error: {args.id!r} is not in the catalog (see `voxgate models catalog`)", file=sys.stderr)
        return 2
    if model.kind != "model":  # (as POST /v1/library/install refuses it)
        return _error(f"{args.id!r} is a {model.kind}, installed with the models that use it")
    _ctrl_c_once()
    try:
        with alone(settings.data_dir) as holder:
            refused = _busy(holder, settings, f"install {args.id} through it, with POST /v1/library/install "
                            f"{{\"id\": \"{args.id}\"}} or its studio's Library page (/library), which show the "
                            "download's progress; or stop the server first")
            if refused is not None:
                return refused
            return await _download(model, settings)
    except asyncio.CancelledError:  # Ctrl-C before the download began (_download says what it kept after)
        print("interrupted", file=sys.stderr)
        return 130


def _ctrl_c_once() -> None:
    """Ctrl-C cancels the running task (the install, which then stops its download, keeping the
    bytes, and returns 130); presses after it are ignored until the process ends. asyncio's own
    handler raised KeyboardInterrupt at a second press, out of that stop or of asyncio.run's teardown
    after it: a traceback and exit status -2 (found by a new-user trial)."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()

    def cancel_once() -> None:
        loop.remove_signal_handler(signal.SIGINT)  # (which would put Python's handler back)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if task is not None and not task.done():
            task.cancel()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # Windows, not the main thread:
        loop.add_signal_handler(signal.SIGINT, cancel_once)  # asyncio's handler stays


def progress_line(event: dict[str, Any], files: list[str]) -> str:
    """`models install`'s line for a download event (gateway/download.py `as_json`), `files` the model's
    dests in download order. A file's lines name it and its place (`downloading a.onnx (1 of 2): ...`, then
    `verifying a.onnx (1 of 2)`, then the next file's), so the states that alternate file by file read
    as steps; the percent is rounded down (100% only once every byte is there), the time left is shown
    only while downloading, and a total that still counts a catalog size marked approximate says
    `about` (it changes, and the percent with it, once the source reports that file's size)."""
    about = "about " if event.get("total_is_approximate") else ""
    amount = (f"{event['bytes_done'] / 1e6:.1f} of {about}{event['bytes_total'] / 1e6:.1f} MB "
              f"({int(event['percent'])}%")
    if event["state"] == "downloading" and event["eta_s"] is not None:
        amount += f", {event['eta_s']:.0f} s left"
    current = event["current_file"]
    if event["state"] in ("downloading", "verifying") and current in files:
        return f"{event['state']} {current} ({files.index(current) + 1} of {len(files)}): {amount})"
    return f"{event['state']}: {amount})"


async def _download(model: CatalogModel, settings: Settings) -> int:
    from gateway.download import DownloadError
    from gateway.downloads import DownloadManager
    from gateway.library import Library
    from gateway.library_api import catalog_registrar

    if not logging.getLogger().handlers:  # the failure is said once, on the `error:` line below: without this,
        # Python's last-resort handler printed the manager's warning too (a traceback for an unexpected error)
        logging.getLogger("gateway.downloads").addHandler(logging.NullHandler())
    library = await Library.open(settings.db_path)

    async def is_registered(model_id: str) -> bool:
        return await library.get_model(model_id) is not None

    manager = DownloadManager(settings.data_dir, catalog_registrar(library), is_registered=is_registered,
                              base_url=settings.download_base_url, token=settings.download_token or None,
                              min_free_disk_bytes=int(settings.min_free_disk_mb * (1 << 20)),
                              progress_interval_s=1.0)
    try:
        with manager.subscribe() as events:
            download = await manager.install(model)
            files, last = [f.dest for f in model.files], ""
            async for event in events:
                line = progress_line(event, files)
                if line != last:  # (an event that changes nothing shown: no line)
                    print(line, file=sys.stderr)
                    last = line
                if event["state"] in ("done", "failed", "cancelled"):
                    break
            await download.wait()
    except DownloadError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels this task; one line, no traceback
        await manager.aclose()  # stops the download, keeping its partial files
        kept = sum(d["bytes_done"] for d in manager.downloads())
        print(f"interrupted; the {kept} bytes received are kept: run the same command to resume" if kept
              else "interrupted", file=sys.stderr)
        return 130
    finally:
        await manager.aclose()
        await library.close()
    print(f"installed {model.id} in {download.path}")
    return 0
