"""A model's `options` (fixed when it is added): each family names the ones it knows, with
their types and ranges, so a bad one is refused when the model is added (a 4xx naming
`options.<name>`, or one line from the CLI) instead of failing at its first load.

`Option(kind, check, what)`: `kind` is the JSON type ("bool", "int", "number", "str",
"path": a string or a Path, "ints": a list of integers); `check` an extra condition on the value; `what` says what is
accepted, for the message.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from engine.config import MAX_RUNNING
from models import InvalidModel

def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


_KINDS: dict[str, Callable[[Any], bool]] = {
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    # (finite: `--option X=NaN` is JSON to Python's json, and TOML has nan and inf)
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v),
    "str": lambda v: isinstance(v, str) and bool(v),
    "path": lambda v: (isinstance(v, str) and bool(v)) or isinstance(v, os.PathLike),
    "ints": lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1
                                                               for x in v),
}


@dataclass(frozen=True)
class Option:
    kind: str
    check: Callable[[Any], bool] | None = None
    what: str = ""


def at_least(n: int) -> Option:
    return Option("int", lambda v: v >= n, f"an integer >= {n}")


def between(low: int, high: int) -> Option:
    return Option("int", lambda v: low <= v <= high, f"an integer from {low} to {high}")


def one_of(*values: str) -> Option:
    return Option("str", lambda v: v in values, "one of " + ", ".join(values))


FLAG = Option("bool", None, "true or false")
PATH = Option("path", None, "a folder path")
# Options of every family, read outside the family module (gateway/model_spec.py, engine/runner.py).
COMMON: dict[str, Option] = {"max_running": between(1, MAX_RUNNING), "busy_timeout_ms": Option("number", lambda v: v > 0,
                                                                                  "a number of ms > 0")}


def is_path(known: Mapping[str, Option], key: str) -> bool:
    """Whether option `key` of a family's `known` options names a folder (`PATH`: backbone_path,
    codec_path, speech_tokenizer_path), which is stored resolved and held to `local_model_roots`."""
    option = known.get(key)
    return option is not None and option.kind == "path"


def check_options(options: Mapping[str, Any] | None, known: Mapping[str, Option], family: str) -> None:
    """Raise InvalidModel (field `options.<name>`) for an option `family` does not know, or one
    of the wrong type or range."""
    table = {**COMMON, **known}
    for name, value in (options or {}).items():
        option = table.get(name)
        if option is None:
            raise InvalidModel(f"options.{name} is not an option of {family} models (they take: "
                               f"{', '.join(sorted(table))})", field=f"options.{name}")
        if not _KINDS[option.kind](value) or (option.check is not None and not option.check(value)):
            what = option.what or {"bool": "true or false", "ints": "a list of integers >= 1"}.get(option.kind, option.kind)
            raise InvalidModel(f"options.{name} must be {what}, got {value!r}", field=f"options.{name}")
