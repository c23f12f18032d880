"""`voxgate models ...`: the model library from the command line (gateway/cli.py parses the
command line and passes each command its arguments and settings).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gateway.settings import Settings


def _error(message: str, status: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return status


async def add(args: argparse.Namespace, settings: Settings) -> int:
    """Register a folder after its family validated it, under an id that can name it later:
    the library's id rule, no catalog model's id, not taken."""
    from gateway.catalog import load_catalog
    from gateway.library import Library, default_model_id, model_id_problem
    from models import FAMILIES, FamilyUnavailable, InvalidModel, family

    if args.id is not None and (problem := model_id_problem(args.id)):
        return _error(f"--id: {problem}")
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
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw
    model_id = args.id if args.id is not None else default_model_id(path)
    if args.id is None and (problem := model_id_problem(model_id)):
        return _error(f"the folder's name {path.name!r} is no model id ({problem}); pass --id")
    how = "pick another --id" if args.id is not None else "pass --id to register this folder under another id"
    if load_catalog(settings.catalog_path or None).get(model_id) is not None:
        return _error(f"{model_id!r} is the id of a catalog model (`voxgate models catalog`); {how}")
    try:
        info = module.validate(path, options)
    except InvalidModel as error:
        return _error(error.message)
    except (OSError, ValueError) as error:
        return _error(f"{path}: {error}")
    library = await Library.open(settings.db_path)
    try:
        if await library.get_model(model_id) is not None:
            return _error(f"a model with id {model_id!r} is installed (`voxgate models list`); {how}")
        await library.add_model(model_id, args.family, args.name or model_id, str(path), info["voices"], options,
                                size_bytes=info.get("size_bytes", 0), source="local")
    finally:
        await library.close()
    print(f"added {model_id} ({args.family}, voices: {', '.join(info['voices'])})")
    return 0


async def list_models(args: argparse.Namespace, settings: Settings) -> int:
    from gateway.library import Library

    library = await Library.open(settings.db_path)
    try:
        for record in await library.list_models():
            voices = await library.voices(record["id"])
            print(f"{record['id']}\t{record['family']}\t{record['path'] or '(embedded)'}\t{', '.join(voices)}")
    finally:
        await library.close()
    return 0


async def catalog(args: argparse.Namespace, settings: Settings) -> int:
    from gateway.catalog import load_catalog

    for model in load_catalog(settings.catalog_path or None).models:
        size = f"{'~' if model.size_is_approximate else ''}{model.size_bytes / 1e6:.0f} MB"
        gated = "  (gated: needs download_token)" if model.gated else ""
        print(f"{model.id}\t{model.family}\t{size}\t{', '.join(model.languages)}\t{model.name}{gated}")
    return 0


async def install(args: argparse.Namespace, settings: Settings) -> int:
    """Download a catalog model into the library; Ctrl-C keeps the partial files for a resume."""
    from gateway.catalog import load_catalog
    from gateway.download import DownloadError
    from gateway.downloads import DownloadManager
    from gateway.library import Library
    from gateway.library_api import catalog_registrar

    model = load_catalog(settings.catalog_path or None).get(args.id)
    if model is None:
        print(f"error: {args.id!r} is not in the catalog (see `voxgate models catalog`)", file=sys.stderr)
        return 2
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
            async for event in events:
                eta = f", {event['eta_s']:.0f} s left" if event["eta_s"] is not None else ""
                print(f"{event['state']}: {event['bytes_done'] / 1e6:.1f} of {event['bytes_total'] / 1e6:.1f} MB "
                      f"({event['percent']:.0f}%{eta})", file=sys.stderr)
                if event["state"] in ("done", "failed", "cancelled"):
                    break
            await download.wait()
    except DownloadError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    finally:
        await manager.aclose()
        await library.close()
    print(f"installed {model.id} in {download.path}")
    return 0
