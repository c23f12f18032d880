"""The catalog of installable models (`models/catalog.json`), loaded and checked once.

A catalog entry names the files of one model as paths relative to a base URL, so the
same file serves Hugging Face, a mirror with the same layout, or a local folder
(`file:///srv/mirror/` or a plain path) for machines without internet access.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

from gateway.library import MODEL_ID

CATALOG_VERSION = 1
DEFAULT_CATALOG_PATH = Path(__file__).resolve().parent.parent / "models" / "catalog.json"
DEFAULT_BASE_URL = "https://huggingface.co/"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the entry and the field."""


@dataclass(frozen=True, slots=True)
class CatalogFile:
    url: str  # relative to the base URL, "/"-separated, no leading "/"
    dest: str  # relative path inside the model folder
    size_bytes: int
    size_is_approximate: bool = False
    sha256: str | None = None  # lower-case hex; None when no hash was published

    def as_json(self) -> dict[str, Any]:
        return {"url": self.url, "dest": self.dest, "size_bytes": self.size_bytes,
                "size_is_approximate": self.size_is_approximate, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class CatalogModel:
    id: str
    family: str
    name: str
    files: tuple[CatalogFile, ...]
    languages: tuple[str, ...] = ()
    licence: str | None = None
    gated: bool = False
    kind: str = "model"
    homepage: str | None = None
    voices: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    notes: str | None = None

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def size_is_approximate(self) -> bool:
        return any(f.size_is_approximate for f in self.files)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "family": self.family, "kind": self.kind, "name": self.name,
            "languages": list(self.languages), "licence": self.licence, "gated": self.gated,
            "homepage": self.homepage, "voices": list(self.voices), "options": dict(self.options),
            "notes": self.notes, "size_bytes": self.size_bytes,
            "size_is_approximate": self.size_is_approximate,
            "files": [f.as_json() for f in self.files],
        }


@dataclass(frozen=True, slots=True)
class Catalog:
    version: int
    models: tuple[CatalogModel, ...]
    default_base_url: str = DEFAULT_BASE_URL

    def get(self, model_id: str) -> CatalogModel | None:
        for model in self.models:
            if model.id == model_id:
                return model
        return None

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version, "models": [m.as_json() for m in self.models]}


def config_entry_problem(catalog: Catalog, model_id: str) -> str | None:
    """Why a `[[models]]` entry cannot have `model_id`, a catalog model's id (the catalog would
    show that model installed, and its install would find the id taken; the HTTP install and
    `voxgate models add` refuse it too) or the embedded voice's (its row would be replaced for good),
    or None."""
    from gateway.app import EMBEDDED_MODEL

    if model_id == EMBEDDED_MODEL["id"]:
        return f"[[models]] {model_id!r} in the config file: {model_id!r} is the id of the embedded voice; give the " \
               "entry another id"
    if catalog.get(model_id) is None:
        return None
    return (f"[[models]] {model_id!r} in the config file: {model_id!r} is the id of a catalog model "
            "(`voxgate models catalog`); give the entry another id")


def _relative_path(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise CatalogError(f"{where} must be a non-empty string")
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or "\\" in value or value.endswith("/"):
        raise CatalogError(f"{where} must be a relative path without '..', got {value!r}")
    return value


def _parse_file(data: Any, where: str) -> CatalogFile:
    if not isinstance(data, dict):
        raise CatalogError(f"{where} must be an object")
    url = _relative_path(data.get("url"), f"{where}.url")
    if urlsplit(url).scheme:
        raise CatalogError(f"{where}.url must be relative to the base URL, got {url!r}")
    dest = _relative_path(data.get("dest", PurePosixPath(url).name), f"{where}.dest")
    size = data.get("size_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise CatalogError(f"{where}.size_bytes must be a non-negative integer")
    sha256 = data.get("sha256")
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.match(sha256)):
        raise CatalogError(f"{where}.sha256 must be 64 lower-case hex digits or null")
    return CatalogFile(url, dest, size, bool(data.get("size_is_approximate", False)), sha256)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogError(f"{where} must be a list of strings")
    return tuple(value)


def _parse_model(data: Any, index: int) -> CatalogModel:
    if not isinstance(data, dict):
        raise CatalogError(f"models[{index}] must be an object")
    model_id = data.get("id")
    if not isinstance(model_id, str) or not MODEL_ID.fullmatch(model_id):  # the library's rule
        raise CatalogError(f"models[{index}].id must match {MODEL_ID.pattern}, got {model_id!r}")
    where = f"model {model_id!r}"
    for key in ("family", "name"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise CatalogError(f"{where}: {key} must be a non-empty string")
    files = data.get("files")
    if not isinstance(files, list) or not files:
        raise CatalogError(f"{where}: files must be a non-empty list")
    parsed = tuple(_parse_file(f, f"{where} files[{i}]") for i, f in enumerate(files))
    dests = [f.dest for f in parsed]
    if len(set(dests)) != len(dests):
        raise CatalogError(f"{where}: two files share one dest")
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise CatalogError(f"{where}: options must be an object")
    return CatalogModel(
        id=model_id, family=data["family"], name=data["name"], files=parsed,
        languages=_strings(data.get("languages"), f"{where}: languages"),
        licence=data.get("licence"), gated=bool(data.get("gated", False)),
        kind=str(data.get("kind", "model")), homepage=data.get("homepage"),
        voices=_strings(data.get("voices"), f"{where}: voices"), options=options,
        notes=data.get("notes"),
    )


def parse_catalog(data: Any) -> Catalog:
    """Check a decoded catalog; raises CatalogError naming the first problem."""
    if not isinstance(data, dict):
        raise CatalogError("the catalog must be a JSON object")
    if data.get("version") != CATALOG_VERSION:
        raise CatalogError(f"catalog version {data.get('version')!r} is not supported (expected {CATALOG_VERSION})")
    models = data.get("models")
    if not isinstance(models, list):
        raise CatalogError("catalog.models must be a list")
    parsed = tuple(_parse_model(m, i) for i, m in enumerate(models))
    ids = [m.id for m in parsed]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CatalogError(f"duplicate model id(s): {', '.join(duplicates)}")
    return Catalog(CATALOG_VERSION, parsed, str(data.get("default_base_url") or DEFAULT_BASE_URL))


def load_catalog(path: str | Path | None = None) -> Catalog:
    path = Path(path) if path is not None else DEFAULT_CATALOG_PATH
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CatalogError(f"cannot read catalog {path}: {error}") from error
    return parse_catalog(data)


def local_base(base_url: str) -> Path | None:
    """The folder a `file://` URL or plain path names; None for http(s) base URLs."""
    parts = urlsplit(base_url)
    if parts.scheme in ("http", "https"):
        return None
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise CatalogError(f"file URLs must name a local path, got {base_url!r}")
        return Path(unquote(parts.path))
    if parts.scheme and len(parts.scheme) > 1:  # "c:" is a Windows drive, not a scheme
        raise CatalogError(f"base URL scheme {parts.scheme!r} is not supported (http, https, file)")
    return Path(base_url).expanduser()


def resolve(base_url: str, file: CatalogFile) -> str | Path:
    """Where to fetch `file` from: an http(s) URL string or a local Path."""
    folder = local_base(base_url)
    if folder is not None:
        return folder.joinpath(*PurePosixPath(file.url).parts)
    base = base_url if base_url.endswith("/") else base_url + "/"
    return urljoin(base, quote(file.url, safe="/-_.~"))
