"""JSON from clients, parsed with bounds: nesting depth, numbers, strings.

`json.loads` alone lets a client reach failures deep in a handler:
- 30,000 `[` raise RecursionError (an HTTP 500, a dead WebSocket session);
- a 400-digit integer parses, then `float()` or `math.isfinite()` of it raises OverflowError;
- `NaN`/`Infinity` are accepted although they are not JSON (RFC 8259 §6);
- `"\\ud800"` (a lone surrogate) parses, then fails when encoded as UTF-8 for SQLite or a log.

`parse_json` refuses all of these with an `ApiError` (400, code `invalid_json` or
`json_too_deep`), so a handler only ever sees plain, encodable data. Integers beyond
what a float can hold become ±inf, as in JavaScript (the studio's own language), so
every range check that rejects non-finite numbers also rejects them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from engine.types import InvalidInput
from gateway.errors import ApiError

DEFAULT_MAX_DEPTH = 32
_MAX_EXACT_DIGITS = 308  # below 1e308 every integer converts to a finite float


def _parse_int(text: str) -> int | float:
    digits = len(text) - (text[0] == "-")
    return int(text) if digits <= _MAX_EXACT_DIGITS else float(text)  # float() gives ±inf here


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json(data: str | bytes | bytearray, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse `data` (UTF-8 if bytes); raises ApiError 400 naming what is wrong.

    `max_depth` counts nested arrays and objects: `{"a": [1]}` has depth 2.
    """
    try:
        value = json.loads(data, parse_int=_parse_int, parse_constant=_no_constants)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, "invalid_json", f"not valid JSON: {error}") from None
    _check(value, max_depth)
    return value


def _too_deep(max_depth: int) -> ApiError:
    return ApiError(400, "json_too_deep", f"JSON is nested more than {max_depth} levels deep")


def _check(value: Any, max_depth: int) -> None:
    """Depth and string checks, iteratively (a recursive walk would hit the limit it checks)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, (list, dict)):
            if depth + 1 > max_depth:
                raise _too_deep(max_depth)
            if isinstance(item, dict):
                for key, child in item.items():
                    _check_text(key)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)


def _check_text(text: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "invalid_json", "a JSON string holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                       "which is not text") from None


def finite_number(value: Any) -> float | None:
    """`value` as a finite float, or None when it is not a number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def check_fields(data: dict[str, Any], allowed: frozenset[str], route: str) -> None:
    """Raises InvalidInput (400) naming the first (by name) field of the object `data` not in
    `allowed`: a misspelt option is refused, not ignored. `route` names the endpoint in the message."""
    unknown = set(data) - allowed
    if unknown:
        field = min(unknown)
        takes = ", ".join(sorted(allowed)) or "no fields"
        raise InvalidInput(f"unknown field {field[:80]!r}; {route} takes {takes}", field=field)
