"""Server settings, read once: defaults < config file (TOML) < VOXGATE_* env < command line.

The config file is TOML; keys are the field names below, plus `[[models]]` tables
(`id`, `family`, `path`, and any family options) that register model folders at start. A
relative `path` there (and a relative `*_path` option: `backbone_path`, `codec_path`,
`speech_tokenizer_path`) is taken from the config file's directory, as TOML users expect;
entries given otherwise (`load_settings(models=...)`) from the current directory. Either
way the library stores it absolute, like `data_dir`.
Every scalar field also reads from `VOXGATE_<FIELD>` (e.g. `VOXGATE_PORT=9000`).
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from engine.config import MAX_RUNNING, MECHANISMS
from gateway.keys import MAX_CONCURRENT
from gateway.origins import check_browser_names


AUTH_MODES = ("auto", "required", "off")
MB = 1 << 20  # the unit of the *_mb settings (min_free_memory_mb, min_free_disk_mb): 2^20 bytes, a MiB
_TUPLE_FIELDS = ("preload_models", "allowed_hosts", "allowed_origins", "cors_origins", "local_model_roots", "devices")
_DEVICE = re.compile(r"(cpu|cuda)(:\d+)?")
# The number settings' ranges beyond "finite" (every float setting must be one: NaN or inf is
# refused, from the config file (TOML has nan and inf), the environment or the command line).
# What 0 means, where it means something, goes in the message.
_AT_LEAST_0 = {"ttfa_target_ms": "", "urgent_slack_ms": "", "max_predicted_ttfa_ms": " (0: never refuse)",
               "text_buffer_ms": "", "utterance_end_ms": "", "realtime_pace_ms": " (0: off)",
               "idle_unload_s": " (0: never)", "busy_timeout_ms": "", "min_free_memory_mb": "",
               "min_free_disk_mb": "", "memory_trim_idle_s": " (0: never)"}
_ABOVE_0 = ("realtime_messages_per_s", "memory_factor", "send_timeout_s", "header_timeout_s", "body_timeout_s",
            "graceful_shutdown_s")
_AT_LEAST_1 = ("max_input_chars", "max_pending_chars", "max_body_bytes", "max_json_depth")
# The settings that size concurrency or a queue: (least, most, what the least means). Past the most a value
# bounds nothing (a realtime_message_burst of 10**400 from VOXGATE_* failed every WebSocket session: a float
# overflow; cpu_workers 10**400 every request), so it is refused as a typo. key_max_concurrent: a key's own bound.
_COUNTS = {"max_running": (1, MAX_RUNNING, ""), "max_waiting": (1, 1_000_000, ""),
           "key_max_concurrent": (1, MAX_CONCURRENT, ""), "max_loaded_models": (1, 1024, ""),
           "realtime_message_burst": (1, 1_000_000, ""),
           "cpu_workers": (0, 1024, " (0: one per CPU core)")}
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("~/.local/share/voxgate")
    default_model: str = "piper-joe"  # the embedded voice, registered on first start
    default_voice: str = "default"  # what OpenAI voice names (alloy, nova, ...) map to
    max_input_chars: int = 4096
    # WebSockets: text appended and not yet spoken (an LLM's answer comes faster than it is spoken)
    max_pending_chars: int = 65536
    max_body_bytes: int = 65536
    ttfa_target_ms: float = 200.0
    urgent_slack_ms: float = 150.0
    max_running: int = 64  # requests a model serves at once (its KV slots); a model's options may set its own
    max_waiting: int = 64  # queued beyond those before 503 overloaded
    max_predicted_ttfa_ms: float = 2000.0  # refuse (503) a request whose first audio is predicted later (0: never)
    policy: str = "edf"  # scheduler: "edf" (deadline-aware), "fifo" (baseline), "fifo+early" ... (ablations)
    text_buffer_ms: float = 400.0  # realtime: speak a partial sentence after this pause
    first_segment_chars: int = 40  # cut an utterance's first segment to this for TTFA (0: off)
    # Text frontend (gateway/text/): how code and emoji are read unless a request says.
    text_code: str = "inline"  # inline (code spans read, fenced blocks skipped) | speak | skip
    text_emoji: str = "drop"  # drop | name
    # realtime: text arrives over time, so an utterance's first segment is cut shorter (at
    # the last space before this many characters, unless a clause ends sooner).
    realtime_first_chars: int = 24
    utterance_end_ms: float = 1000.0  # realtime: an unflushed utterance ends this long after its audio
    # realtime: the rest of a sentence is spoken before its end (at its last clause mark, else its
    # last whole word) once the listener's buffered audio would last only this margin longer than
    # that text takes to start sounding (gateway/pacing.py); 0: off (each sentence waits for its end).
    realtime_pace_ms: float = 150.0
    realtime_messages_per_s: float = 500.0  # realtime: sustained client messages per session
    realtime_message_burst: int = 1000  # realtime: messages a session may send at once
    device: str = "cpu"
    # Several devices (issue 17): a speech LM gets a replica on each (gateway/residency.py), a request
    # goes to the one with the most slack (engine/replicas.py). Empty: [device]; set, it replaces
    # device. "cpu:N" names another CPU worker (the replica path without GPUs, for tests).
    devices: tuple[str, ...] = ()
    # CPU families (Piper): single-threaded sessions synthesising at once, one per core by
    # default (0); a model's own `workers` option overrides it (models/piper.py `load`).
    cpu_workers: int = 0
    log_level: str = "info"
    models: tuple[Mapping[str, Any], ...] = ()
    # Residency (gateway/residency.py).
    preload_models: tuple[str, ...] = ()  # loaded at start and never idle-unloaded
    max_loaded_models: int = 2
    idle_unload_s: float = 0.0  # 0: never unload for idleness
    busy_timeout_ms: float = 5000.0  # longest a request waits for room before a 503
    min_free_memory_mb: float = 256.0  # GPU memory on CUDA devices, else host (gateway/host_memory.py); MB: `MB` bytes
    memory_factor: float = 1.5  # footprint estimate = size on disk x this, for families without their own (not Piper)
    # Downloads (gateway/downloads.py) and the catalog (models/catalog.json).
    catalog_path: str = ""  # empty: the packaged catalog
    download_base_url: str = "https://huggingface.co/"  # or a mirror, file:///dir, or /dir
    download_token: str = field(default="", repr=False)  # Bearer token for gated models
    min_free_disk_mb: float = 256.0  # after a download or a take (MB: `MB` bytes)
    # Security and limits (README "Security"; gateway/security.py, auth.py, keys.py).
    allowed_hosts: tuple[str, ...] = ()  # Host names besides loopback ones and IP addresses; "*": any
    allowed_origins: tuple[str, ...] = ()  # browser origins besides the server's own (WebSocket, writes)
    cors_origins: tuple[str, ...] = ()  # origins sent CORS headers; empty: CORS off
    auth: str = "auto"  # auto: keys required off loopback; required; off (explicit opt-out)
    key_rate_limit: str = "600/minute"  # per API key, unless the key has its own
    key_max_concurrent: int = 16  # requests and sessions in flight per API key, unless its own
    local_model_roots: tuple[str, ...] = ()  # folders POST /v1/library/install {"path"} may register from
    max_json_depth: int = 32  # nesting of arrays/objects in a JSON body or WebSocket message
    send_timeout_s: float = 10.0  # longest a write to a client (REST body, WebSocket frame) may wait
    header_timeout_s: float = 30.0  # longest a request's line and headers may take to come (gateway/http_protocol.py)
    body_timeout_s: float = 30.0  # longest between two reads of a request's body (gateway/http_protocol.py)
    graceful_shutdown_s: float = 5.0  # shutdown: running requests get this long, then are cancelled
    memory_trim_idle_s: float = 1.0  # freed heap memory goes back to the OS after the engine idles this long (0: never)

    def __post_init__(self) -> None:
        if not str(self.data_dir).strip():  # (Path("") is the current directory)
            raise ValueError("data_dir must be a folder's path, got an empty one")
        # Absolute (from the current directory at start): the library stores paths under it, which
        # a command or server started from another directory must find.
        object.__setattr__(self, "data_dir", Path(os.path.abspath(Path(self.data_dir).expanduser())))
        object.__setattr__(self, "models", tuple(_absolute_paths(entry, Path.cwd()) for entry in self.models))
        existing = next(p for p in (self.data_dir, *self.data_dir.parents) if p.exists())
        if not existing.is_dir():  # (creating the folder would fail with FileExistsError / NotADirectoryError)
            raise ValueError(f"data_dir must be a folder, and {str(existing)!r} is a file: {str(self.data_dir)!r}")
        for spec in dataclasses.fields(self):  # first: the checks below compare numbers, which NaN defeats
            value = getattr(self, spec.name)
            if spec.type == "float" and isinstance(value, (int, float)) and not _finite(value):
                shown = str(value) if len(str(value)) <= 24 else str(value)[:24] + "…"  # (a 400-digit int)
                raise ValueError(f"{spec.name} must be a finite number, got {shown}")
        for name, zero in _AT_LEAST_0.items():
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0{zero}, got {getattr(self, name)}")
        for name in _ABOVE_0:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not isinstance(self.host, str) or not self.host.strip():  # "" would bind every interface (0.0.0.0 and ::)
            raise ValueError(f"host must be an address or host name (e.g. 127.0.0.1, or 0.0.0.0 for every "
                             f"interface), got {self.host!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be 1..65535, got {self.port}")
        base, *added = self.policy.split("+")
        if base not in ("edf", "fifo") or not set(added) <= set(MECHANISMS) or (base == "edf" and added):
            raise ValueError(f"policy must be 'edf', 'fifo' or 'fifo+' any of {'+'.join(MECHANISMS)} "
                             f"(an ablation), got {self.policy!r}")
        for name in _AT_LEAST_1:  # each alone: the message names the one setting, load_settings where it was set
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name, (least, most, zero) in _COUNTS.items():
            value = getattr(self, name)
            if value < least or value > most:
                shown = str(value) if len(str(value)) <= 24 else str(value)[:24] + "…"
                raise ValueError(f"{name} must be >= {least}{zero}, got {value}" if value < least else
                                 f"{name} must be <= {most} (more bounds nothing), got {shown}")
        for name in _TUPLE_FIELDS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check_browser_names(self.allowed_origins, self.cors_origins, self.allowed_hosts)
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device must be cpu, cpu:N, cuda or cuda:N, got {self.device!r}")
        for device in self.devices:
            if not isinstance(device, str) or not _DEVICE.fullmatch(device):
                raise ValueError(f"devices must name cpu, cpu:N, cuda or cuda:N (e.g. cuda:0,cuda:1), got {device!r}")
        named = [device if ":" in device else f"{device}:0" for device in self.devices]  # cuda is cuda:0
        if len(set(named)) < len(named):
            raise ValueError(f"devices names a device twice: {', '.join(self.devices)}")
        object.__setattr__(self, "devices", self.devices or (self.device,))
        object.__setattr__(self, "device", self.devices[0])
        if self.text_code not in ("inline", "speak", "skip"):
            raise ValueError(f"text_code must be inline, speak or skip, got {self.text_code!r}")
        if self.text_emoji not in ("drop", "name"):
            raise ValueError(f"text_emoji must be drop or name, got {self.text_emoji!r}")
        if self.realtime_first_chars < 0:
            raise ValueError(f"realtime_first_chars must be >= 0, got {self.realtime_first_chars}")
        if self.first_segment_chars < 0:
            raise ValueError(f"first_segment_chars must be >= 0 (0: off), got {self.first_segment_chars}")
        if len(set(self.preload_models)) > self.max_loaded_models:  # (each one loaded evicted the one before)
            raise ValueError(f"preload_models names {len(set(self.preload_models))} models, more than max_loaded_models "
                             f"({self.max_loaded_models}) keeps loaded; name fewer, or raise max_loaded_models")
        if self.auth not in AUTH_MODES:
            raise ValueError(f"auth must be one of {', '.join(AUTH_MODES)}, got {self.auth!r}")
        from gateway.limits import parse_rate  # (limits imports nothing of ours at module level)

        try:
            parse_rate(self.key_rate_limit)
        except ValueError as error:
            raise ValueError(f"key_rate_limit: {error}") from None
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        self._check_download_base_url()
        from gateway.library import model_id_problem  # (it imports nothing of ours)

        for entry in self.models:
            if not isinstance(entry, Mapping):
                raise ValueError(f"models must be [[models]] tables (id, family, path), got {entry!r}")
            missing = {"id", "family", "path"} - set(entry)
            if missing:
                raise ValueError(f"[[models]] entry {dict(entry)} lacks {', '.join(sorted(missing))}")
            problem = model_id_problem(entry["id"])
            if problem:  # the rule every model's id keeps (gateway/library.py)
                raise ValueError(f"[[models]] entry {entry['id']!r}: {problem}")
            if [other["id"] for other in self.models if isinstance(other, Mapping)].count(entry["id"]) > 1:
                raise ValueError(f"[[models]] entry {entry['id']!r} is in the config file more than once; "
                                 "give each entry its own id")  # (the last one was registered, in silence)
            for key, value in entry.items():
                if _is_path_key(key) and not (isinstance(value, str) and value):
                    raise ValueError(f"[[models]] entry {entry['id']!r}: {key} must be a non-empty string "
                                     f"(a folder), got {value!r}")

    def _check_download_base_url(self) -> None:
        from gateway.catalog import CatalogError, local_base

        shown = self.download_base_url
        try:
            folder = local_base(shown)
        except CatalogError as error:
            raise ValueError(f"download_base_url: {error}") from None
        if folder is not None and not folder.is_absolute():  # e.g. "127.0.0.1:8765/", a mirror without http://
            raise ValueError(f"download_base_url must be an http(s) URL, a file:// URL or an absolute folder, "
                             f"got {shown!r}")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "voxgate.db"

    @property
    def keys_required(self) -> bool:
        """Whether every API request needs a key (`auth`; auto: when not bound to loopback)."""
        if self.auth == "auto":
            return not is_loopback(self.host)
        return self.auth == "required"


def _is_path_key(key: str) -> bool:
    """The keys of a `[[models]]` entry that name a file or folder: `path`, and the families'
    path options (models/model_options.py `PATH`: backbone_path, codec_path, speech_tokenizer_path)."""
    return key == "path" or key.endswith("_path")


def _absolute_paths(entry: Mapping[str, Any], base: Path) -> Mapping[str, Any]:
    """`entry` with its relative paths (after `~`) taken from `base`; a `path` that is not a
    non-empty string is left for the entry's checks to name."""
    if not isinstance(entry, Mapping):
        return entry
    out = dict(entry)
    for key, value in entry.items():
        if _is_path_key(key) and isinstance(value, str) and value:
            out[key] = os.path.abspath(base / Path(value).expanduser())
    return out


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float (TOML and Python ints have no bound)
        return False


def format_mb(num_bytes: float) -> str:
    """`num_bytes` in the unit of the *_mb settings, the way a setting gives it: `256 MB`,
    `0.5 MB`, `100000000 MB` (no exponent, and a setting's value is not rounded to whole MB)."""
    return f"{num_bytes / MB:.3f}".rstrip("0").rstrip(".") + " MB"


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1); False for 0.0.0.0 and names."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


# VOXGATE_* variables read outside the settings: the config file's path (load_settings) and the
# browser tests' screenshot folder (tests/webui/conftest.py). tests/gateway/test_start_checks.py checks
# that every VOXGATE_ name in the repository is a setting's or one of these.
OTHER_VARIABLES = frozenset({"VOXGATE_CONFIG", "VOXGATE_SCREENSHOTS"})


def unknown_variables(env: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each `VOXGATE_*` variable in `env` (default: the environment) that nothing
    reads, naming the closest variable that is read: a misspelt setting would otherwise be
    ignored in silence, and the server start on its default."""
    env = os.environ if env is None else env
    known = {f"VOXGATE_{name.upper()}" for name in _FIELDS if name != "models"} | OTHER_VARIABLES
    by_suffix = {var[len("VOXGATE_"):].lower(): var for var in known}
    warnings = []
    for key in sorted(env):
        if not key.upper().startswith("VOXGATE_") or key in known:
            continue
        if key.upper() in known:
            warnings.append(f"{key} is ignored: the variable is {key.upper()} (upper case)")
        elif key.upper() == "VOXGATE_MODELS":
            warnings.append(f"{key} is ignored: models are [[models]] tables in the config file "
                            "(or `voxgate models add`)")
        else:
            close = difflib.get_close_matches(key[len("VOXGATE_"):].lower(), sorted(by_suffix), n=1)
            setting = f" (the {close[0]} setting)" if close and close[0] in _FIELDS else ""
            hint = f"; did you mean {by_suffix[close[0]]}{setting}?" if close else ""
            warnings.append(f"{key} is not a Voxgate setting and is ignored{hint}")
    return warnings


def _coerce(name: str, value: Any, source: str) -> Any:
    """`value` as the type of setting `name`; ValueError naming the setting and where it came from."""
    kind = _FIELDS[name].type
    if name == "models":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{source} must be [[models]] tables (id, family, path), got {value!r}")
        return tuple(value)
    if name in _TUPLE_FIELDS:  # comma-separated in the environment
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{source} must be a list of strings (or one comma-separated string), got {value!r}")
        return tuple(value)
    expected = {"int": (int,), "float": (int, float), "str": (str,), "Path": (str, Path)}.get(str(kind))
    if isinstance(value, str) and kind in ("int", "float"):
        try:
            return int(value) if kind == "int" else float(value)
        except ValueError:
            raise ValueError(f"{source} must be {'an integer' if kind == 'int' else 'a number'}, "
                             f"got {value!r}") from None
    if expected is not None and (isinstance(value, bool) or not isinstance(value, expected)):
        wanted = "a string" if str in expected else "an integer" if kind == "int" else "a number"
        raise ValueError(f"{source} must be {wanted}, got {value!r}")
    return value


def load_settings(config_file: str | Path | None = None, env: Mapping[str, str] | None = None,
                  sources: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Merge the layers; `overrides` (the command line) win. None values are ignored.

    Raises ValueError naming the bad key or value and where it was set (the config
    file, a `VOXGATE_*` variable or the command line). `sources`, if given, is filled with
    where each setting that is not at its default was set (e.g. `VOXGATE_DEFAULT_MODEL`), for
    checks made later that name it.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources = {} if sources is None else sources
    from_env = config_file is None and bool(env.get("VOXGATE_CONFIG"))
    config_file = config_file or env.get("VOXGATE_CONFIG")
    if config_file:
        where = "VOXGATE_CONFIG" if from_env else "--config"
        try:
            with open(config_file, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ValueError(f"the config file {str(config_file)!r} ({where}) does not exist") from None
        except OSError as error:
            raise ValueError(f"cannot read the config file {str(config_file)!r} ({where}): {error.strerror}") from None
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"the config file {str(config_file)!r} ({where}) is not valid TOML: {error}") from None
        except UnicodeDecodeError:  # (a ValueError, which main() printed alone: "'utf-8' codec can't decode ...")
            raise ValueError(f"the config file {str(config_file)!r} ({where}) is not UTF-8 text, as TOML must be "
                             "(saved as UTF-16?)") from None
        unknown = set(data) - set(_FIELDS)
        if unknown:
            hints = []
            for key in sorted(unknown):
                close = difflib.get_close_matches(key, sorted(_FIELDS), n=1)
                if isinstance(data[key], dict):  # a [table]: settings are top-level keys
                    hints.append(f"[{key}] (settings are top-level keys, with no [table] around them; "
                                 "[[models]] is the one table)")
                else:
                    hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
            raise ValueError(f"unknown setting(s) in {config_file}: {', '.join(hints)}")
        if isinstance(data.get("models"), list):  # its relative paths: from the config file's directory
            base = Path(os.path.abspath(Path(config_file).expanduser())).parent
            data["models"] = [_absolute_paths(entry, base) for entry in data["models"]]
        values.update(data)
        sources.update({k: f"{k} in {config_file}" for k in data})
    for name in _FIELDS:
        key = f"VOXGATE_{name.upper()}"
        if name != "models" and key in env:
            values[name] = env[key]
            sources[name] = key
    given = {k: v for k, v in overrides.items() if v is not None}
    values.update(given)
    sources.update({k: f"--{k.replace('_', '-')}" for k in given})
    coerced = {k: _coerce(k, v, sources.get(k, k)) for k, v in values.items()}
    try:
        return Settings(**coerced)
    except (TypeError, ValueError) as error:
        # Checks in Settings name their setting first ("policy must be ..."): say where it was set.
        name = str(error).split(" ", 1)[0].rstrip(":")
        where = f" (from {sources[name]})" if name in sources else ""
        raise ValueError(f"invalid settings: {error}{where}") from error
