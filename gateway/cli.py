"""The `voxgate` command.

  voxgate --version
  voxgate serve [--host H] [--port P] [--policy edf|fifo|fifo+MECHANISMS] [--devices cuda:0,cuda:1]
                [--data-dir D] [--config FILE]
  voxgate models list [--data-dir D] [--config FILE]
  voxgate models add --family F --path DIR [--id ID] [--name NAME] [--option KEY=VALUE ...] [--data-dir D]
                    [--config FILE]
  voxgate models catalog [--data-dir D] [--config FILE]
  voxgate models install ID [--data-dir D] [--config FILE]
  voxgate models remove ID [--data-dir D] [--config FILE]
  voxgate checkpoint random --family orpheus|qwen3_tts [--size tiny|full|0.6b|1.7b] [--type TYPE] [--force] DIR
  voxgate keys create NAME [--scope speech|admin ...] [--rate-limit 600/minute] [--max-concurrent N]
  voxgate keys list | voxgate keys revoke ID|PREFIX|NAME     [--data-dir D] [--config FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from engine.config import MECHANISMS
from models import FAMILIES
from gateway import cli_models
from gateway.cli_checkpoint import checkpoint
from gateway.settings import Settings, is_loopback, load_settings, unknown_variables


def settings_from_args(args: argparse.Namespace, sources: dict[str, str] | None = None) -> Settings:
    """The settings a parsed command line (`parser().parse_args`) means: its flags over
    the environment and the config file; ValueError naming a bad value and its source, or a data
    dir that cannot be made (`data_dir_problem`). A
    `VOXGATE_*` variable that nothing reads (misspelt) is a warning on stderr, not a refusal.
    `sources`: filled with where each setting was set (`load_settings`)."""
    for warning in unknown_variables():
        print(f"warning: {warning}", file=sys.stderr)
    sources = {} if sources is None else sources
    settings = load_settings(getattr(args, "config", None), sources=sources, host=getattr(args, "host", None),
                             port=getattr(args, "port", None), data_dir=getattr(args, "data_dir", None),
                             policy=getattr(args, "policy", None), devices=getattr(args, "devices", None))
    problem = data_dir_problem(settings.data_dir)  # every command uses it: one line here, not a traceback in each
    if problem is not None:
        where = f" (from {sources['data_dir']})" if "data_dir" in sources else ""
        raise ValueError(f"cannot make the data dir {settings.data_dir}{where}: {problem}; set data_dir "
                         "(--data-dir or VOXGATE_DATA_DIR) to a folder this user can write")
    return settings


def data_dir_problem(path: Path) -> str | None:
    """Why the data dir `path` cannot be made or written (the OS's words), or None. A probe: the folders it
    makes to find out are removed again, so a command that then stops (a bad config) leaves nothing behind."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            return os.strerror(errno.EACCES)
        return None
    except OSError as error:
        return error.strerror or str(error)
    finally:
        for folder in missing:  # (deepest first)
            with contextlib.suppress(OSError):
                folder.rmdir()


def config_models_problem(settings: Settings) -> str | None:
    """What is wrong with the first bad `[[models]]` entry of the config file (a catalog model's
    id, its family, folder or options), in one line naming the entry and the file; None when all
    are good."""
    from gateway.catalog import config_entry_problem, load_catalog
    from models import FAMILIES, FamilyUnavailable, InvalidModel, family

    catalog = load_catalog(settings.catalog_path or None)  # (CatalogError, a ValueError: main() says it)
    for entry in settings.models:
        if problem := config_entry_problem(catalog, str(entry["id"])):
            return problem
        where = f"[[models]] {entry.get('id')!r} in the config file"
        options = {k: v for k, v in entry.items() if k not in ("id", "family", "path", "name")}
        try:
            family(str(entry["family"])).validate(Path(str(entry["path"])).expanduser(), options)
        except KeyError:
            return f"{where}: unknown family {entry['family']!r}; known families: {', '.join(FAMILIES)}"
        except (FamilyUnavailable, InvalidModel) as error:
            return f"{where}: {error.message}"
        except (OSError, ValueError) as error:
            return f"{where}: {error}"
    return None


def available_models(settings: Settings, installed: list[str]) -> set[str]:
    """The models a server on `settings` will have: `installed` (the library's), the `[[models]]`
    entries and the embedded voice (registered at start when its package is installed, gateway/app.py)."""
    available = set(installed) | {str(entry["id"]) for entry in settings.models}
    try:
        from gateway.app import EMBEDDED_MODEL
        from models.piper import embedded_model_path

        embedded_model_path()
        available.add(EMBEDDED_MODEL["id"])
    except ImportError:
        pass
    return available


def preload_problem(settings: Settings, installed: list[str], source: str | None) -> str | None:
    """Why `preload_models` cannot be loaded at start (a model that is not there), in one line naming
    the setting and where it was set; None when every one is there."""
    available = available_models(settings, installed)
    missing = [model_id for model_id in settings.preload_models if model_id not in available]
    if not missing:
        return None
    return (f"preload_models names {', '.join(map(repr, missing))} (from {source or 'preload_models'}), not installed; "
            f"installed models: {', '.join(sorted(available)) or 'none'}")


def default_model_problem(settings: Settings, installed: list[str], source: str | None) -> str | None:
    """Why `default_model` cannot serve the requests that name no model (or an OpenAI model name):
    it is neither installed nor registered at start (a `[[models]]` entry, the embedded voice), in
    one line naming the setting, where it was set (`source`; None: its default) and the models
    there are; None when it can."""
    available = available_models(settings, installed)
    if settings.default_model in available:
        return None
    where = f"from {source}" if source else "its default"
    return (f"default_model {settings.default_model!r} ({where}) is not installed; installed models: "
            f"{', '.join(sorted(available)) or 'none'}; set default_model to one of them (VOXGATE_DEFAULT_MODEL, "
            "or default_model in the config file), or install it (voxgate models add/install)")


def devices_problem(devices: tuple[str, ...]) -> str | None:
    """Why the CUDA devices named cannot be used here (no torch, no GPU, an index past the GPUs
    there are), or None; checked before the server starts, as the first model load would fail."""
    named = [d for d in devices if d.startswith("cuda")]
    if not named:
        return None
    try:
        import torch
    except ImportError:
        return f"device {named[0]} needs PyTorch with CUDA (pip install '.[lm]'); it is not installed"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for device in named:
        index = int(device.partition(":")[2] or 0)
        if index >= count:
            return (f"device {device} is not here: this machine has {count} CUDA GPU(s) visible to PyTorch"
                    " (devices / --devices / VOXGATE_DEVICES)")
    return None


def serve(args: argparse.Namespace) -> int:
    from gateway.app import config_clash, create_app
    from gateway.keys import no_key_message
    from gateway.server import Server
    from gateway.server_lock import serve_problem

    sources: dict[str, str] = {}
    settings = settings_from_args(args, sources)
    if settings.keys_required and not asyncio.run(_count_keys(settings)):
        print(f"error: {no_key_message(settings)}", file=sys.stderr)
        return 2
    problem = config_models_problem(settings) or devices_problem(settings.devices)
    if problem is None:  # another server, or a `models` command, on the data dir (the lifespan would refuse too)
        problem = serve_problem(settings.data_dir)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if settings.auth == "off" and not is_loopback(settings.host):
        print(f"warning: auth is off and Voxgate listens on {settings.host}: anyone who reaches port "
              f"{settings.port} can use and change this server", file=sys.stderr)
    try:  # fail before start-up work touches the data dir (uvicorn binds after the lifespan)
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((settings.host, settings.port))
    except OSError as error:  # (socket.gaierror for a host name that does not resolve)
        fix = "pass --port or set VOXGATE_PORT" if error.errno in (errno.EADDRINUSE, errno.EACCES) else \
            "pass --host or set VOXGATE_HOST"
        print(f"error: cannot listen on {settings.host}:{settings.port}: {error.strerror}; {fix}", file=sys.stderr)
        return 2
    # A library that cannot be opened (LibraryUnavailable) stops the start here in one line, not in the lifespan's
    # traceback; and so does a default_model set to a model that is not there (every request without a model would
    # be a 404); left at its default (the embedded voice, not installed on this machine) it is a warning.
    models = asyncio.run(_models(settings))
    installed = [str(record["id"]) for record in models]
    problem = config_clash(settings.models, models) or preload_problem(settings, installed, sources.get("preload_models"))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    problem = default_model_problem(settings, installed, sources.get("default_model"))
    if problem and "default_model" in sources:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if problem:
        print(f"warning: {problem}; requests without a model will be refused until then", file=sys.stderr)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = f"[{settings.host}]" if ":" in settings.host else settings.host  # an IPv6 address (RFC 3986 host)
    print(f"Voxgate on http://{host}:{settings.port}  (data: {settings.data_dir})", flush=True)
    server = Server(create_app(settings), settings)
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down cleanly, then re-raises the signal
        return 130
    return 0 if server.started else 3  # the start-up failed (logged), e.g. a server took the data dir meanwhile


async def _count_keys(settings: Settings) -> int:
    from gateway.keys import KeyStore
    from gateway.library import Library

    library = await Library.open(settings.db_path)
    try:
        return await KeyStore(library).count_active()
    finally:
        await library.close()


async def _models(settings: Settings) -> list[dict[str, Any]]:
    from gateway.library import Library

    library = await Library.open(settings.db_path)
    try:
        return await library.list_models()
    finally:
        await library.close()


async def _keys(args: argparse.Namespace) -> int:
    from gateway.keys import KeyStore
    from gateway.library import Library
    from gateway.limits import parse_rate

    settings = settings_from_args(args)
    library = await Library.open(settings.db_path)
    store = KeyStore(library)
    try:
        if args.action == "create":
            if args.rate_limit is not None:
                parse_rate(args.rate_limit)  # ValueError: main() prints it
            key, secret = await store.create(args.name, tuple(args.scope or ["speech"]), args.rate_limit,
                                             args.max_concurrent)
            print(secret)
            print(f"created {key.key_id} ({key.name}; scopes: {', '.join(sorted(key.scopes))}). The key is shown "
                  "only now: send it as `Authorization: Bearer <key>`.", file=sys.stderr)
        elif args.action == "list":
            listed = await store.list_keys()
            if not listed:  # (stderr: a script reading the lines finds none)
                print("no API keys yet: create one with `voxgate keys create NAME [--scope admin]` (a server needs "
                      "one to listen beyond loopback, or with auth = \"required\")", file=sys.stderr)
            for key in listed:
                state = "revoked" if key.revoked_at else "active"
                used = time.strftime("%Y-%m-%d %H:%M", time.localtime(key.last_used_at)) if key.last_used_at \
                    else "never"
                limits = f"{key.rate_limit or settings.key_rate_limit}, " \
                         f"{key.max_concurrent or settings.key_max_concurrent} at once"
                print(f"{key.key_id}\t{key.prefix}\t{key.name}\t{','.join(sorted(key.scopes))}\t{state}\t"
                      f"used {used}\t{limits}")
        else:
            found = await store.revoke(args.key)
            if not found:
                print(f"error: no active key {args.key!r} (see `voxgate keys list`)", file=sys.stderr)
                return 1
            if len(found) > 1:
                print(f"error: {len(found)} active keys match {args.key!r}: {', '.join(k.key_id for k in found)}; "
                      "none was revoked: revoke one by its id", file=sys.stderr)
                return 2
            from gateway.revocation import REVOCATION_CHECK_S

            said = (f"revoked {found[0].key_id} ({found[0].name}); a running server refuses it at once and closes "
                    f"the WebSocket sessions opened with it within {REVOCATION_CHECK_S:g} s")
            if not await store.count_active():  # (keys optional on loopback: no key at all is then served)
                said += ("; no active key remains: a server where keys are optional (on loopback, auth \"auto\"; "
                         "or auth \"off\") now serves requests without a key, one that requires keys refuses "
                         "every request until you create one")
            print(said)
    finally:
        await library.close()
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("voxgate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="voxgate", description="Realtime text-to-speech gateway")
    p.add_argument("--version", action="version", version=f"voxgate {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--data-dir", help="where the library database and models live")
        q.add_argument("--config", help="TOML config file (also VOXGATE_CONFIG)")

    s = sub.add_parser("serve", help="start the server")
    s.add_argument("--host", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default 8000)")
    s.add_argument("--policy", help="scheduler policy: edf (default), fifo, or fifo+ mechanisms for ablations "
                                    f"({'+'.join(MECHANISMS)})")
    s.add_argument("--devices", help="devices to place speech LMs on, comma-separated, a replica each "
                                     "(default: the device setting), e.g. cuda:0,cuda:1")
    common(s)
    s.set_defaults(func=serve)

    m = sub.add_parser("models", help="manage the model library").add_subparsers(dest="action", required=True)
    a = m.add_parser("add", help="register a model folder (validated first: its files are read, not loaded)")
    a.add_argument("--family", required=True, help=f"the model's family: {', '.join(FAMILIES)}")
    a.add_argument("--path", required=True, help="the model's folder on this machine (stored absolute): a Piper "
                                                 "voice's .onnx + .onnx.json, or a speech LM's folder (README)")
    a.add_argument("--id", help="the model's id (default: the folder's name): letters, digits, _ . -, a letter or "
                                "digit first, at most 128 characters; no catalog model's id")
    a.add_argument("--name", help="a display name, 1-200 characters (default: the id)")
    a.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a model option, repeatable for other options, each once (README: Model options), e.g. --option max_running=8")
    common(a)
    a.set_defaults(func=lambda args: asyncio.run(cli_models.add(args, settings_from_args(args))))
    rm = m.add_parser("remove", help="remove a model, as DELETE /v1/library/models/{id} does (with no server "
                                     "running on the data dir): deletes its folder only if Voxgate downloaded it")
    rm.add_argument("id")
    common(rm)
    rm.set_defaults(func=lambda args: asyncio.run(cli_models.remove(args, settings_from_args(args))))
    ls = m.add_parser("list", help="list installed models")
    common(ls)
    ls.set_defaults(func=lambda args: asyncio.run(cli_models.list_models(args, settings_from_args(args))))
    cat = m.add_parser("catalog", help="list installable models")
    common(cat)
    cat.set_defaults(func=lambda args: asyncio.run(cli_models.catalog(args, settings_from_args(args))))
    ins = m.add_parser("install", help="download a catalog model (resumes an interrupted one)")
    ins.add_argument("id")
    common(ins)
    ins.set_defaults(func=lambda args: asyncio.run(cli_models.install(args, settings_from_args(args))))

    k = sub.add_parser("keys", help="API keys").add_subparsers(dest="action", required=True)
    kc = k.add_parser("create", help="create a key (printed once)")
    kc.add_argument("name", help="who or what uses it")
    kc.add_argument("--scope", action="append", choices=["speech", "admin"],
                    help="speech (default): speech and realtime; admin: also library, presets, takes, load/unload")
    kc.add_argument("--rate-limit", help="this key's rate, e.g. 600/minute (default: the key_rate_limit setting)")
    kc.add_argument("--max-concurrent", type=int, help="requests and sessions at once (default: key_max_concurrent)")
    kl = k.add_parser("list", help="list keys (never their secrets)")
    kr = k.add_parser("revoke", help="revoke a key by id, prefix or name")
    kr.add_argument("key")
    for q in (kc, kl, kr):
        common(q)
        q.set_defaults(func=lambda args: asyncio.run(_keys(args)))

    c = sub.add_parser("checkpoint", help="write checkpoints").add_subparsers(dest="action", required=True)
    r = c.add_parser("random", help="a random checkpoint in the family's on-disk format")
    r.add_argument("--family", required=True, choices=["orpheus", "qwen3_tts"])
    r.add_argument("--size", choices=["tiny", "full", "0.6b", "1.7b"], default="tiny",
                   help="tiny (the default): 2 narrow layers, fast on a CPU, for tests; full: the released "
                        "shapes (orpheus: Llama-3.2-3B, ~6.6 GB in bf16; qwen3_tts: 1.7B), for GPU benchmarks. "
                        "orpheus takes tiny and full; qwen3_tts also 0.6b and 1.7b (= full), its two released sizes")
    r.add_argument("--seed", type=int, default=0, help="the random weights' seed, 0 to 2**63 - 1 (default 0)")
    r.add_argument("--type", choices=["custom_voice", "voice_design", "base"], default=None,
                   help="qwen3_tts: the model type (default custom_voice: named speakers; voice_design: "
                        "voices from a description, for /v1/audio/design; base: cloning)")
    r.add_argument("--force", action="store_true", help="write into a folder that is not empty")
    r.add_argument("dir")
    r.set_defaults(func=checkpoint)
    return p


def main(argv: list[str] | None = None) -> int:
    from gateway.library import LibraryUnavailable

    args = parser().parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # (here, where a reader that left is caught)
        return status
    except BrokenPipeError:  # the reader left, e.g. `voxgate models catalog | head -3`: no traceback, and
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # none from the flush at exit
        return 141  # (128 + SIGPIPE, as a shell reports a command that pipe closed)
    except (ValueError, LibraryUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C in a command without its own handling (serve, checkpoint and
        print("interrupted", file=sys.stderr)  # models install say more): one line, no traceback
        return 130


if __name__ == "__main__":
    sys.exit(main())
