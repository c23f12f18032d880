"""Origins and host names as browsers send them (`Origin`, `Host`), parsed one way for the settings'
checks (gateway/settings.py, `check_browser_names`) and the browser guard (gateway/security.py). Imports
nothing of ours.

Formats: an origin is `scheme "://" host [ ":" port ]` (RFC 6454 §6.1, the serialisation browsers
send); a `Host` header is `uri-host [ ":" port ]` (RFC 9110 §7.2)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit


def split_host(value: str) -> tuple[str, int | None] | None:
    """(lower-case host, port) of a `Host` header or an origin's netloc; None if malformed (empty, a
    path, user info, a space, a port that is no number in 0-65535)."""
    if not value or any(c in value for c in "/?#@ \\"):
        return None
    try:
        parts = urlsplit(f"//{value}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    return (host, port) if host else None


def parse_origin(value: str) -> str | None:
    """`scheme://host[:port]` in lower case (a trailing `/` dropped), or None for `null` and anything
    that is no http(s) origin (a path, query or fragment, no host, a bad port)."""
    parts = urlsplit(value.strip().lower())
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    if split_host(parts.netloc) is None:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def check_browser_names(allowed_origins: Iterable[str], cors_origins: Iterable[str], allowed_hosts: Iterable[str]) -> None:
    """ValueError naming the setting for an `allowed_origins` / `cors_origins` entry that is no origin, or
    an `allowed_hosts` entry that is no host name: it would never match, and the refusal would say to add
    what is already there (found by a new-user trial: `team2.example` for an origin, `http://tts.example`
    for a host, and a JSON list in `VOXGATE_CORS_ORIGINS`, which is comma-separated)."""
    for name, entries in (("allowed_origins", allowed_origins), ("cors_origins", cors_origins)):
        for entry in entries:
            if entry.strip() != "*" and parse_origin(entry) is None:
                raise ValueError(f"{name} entries are origins, scheme://host[:port] (e.g. https://app.example, "
                                 f"http://localhost:3000) or *, got {entry!r} (a list is comma-separated)")
    for entry in allowed_hosts:
        host = entry.strip().lower()
        if host != "*" and not re.fullmatch(r"\[[0-9a-f:.]+\]|[a-z0-9_.-]+", host):
            raise ValueError(f"allowed_hosts entries are host names without scheme, port or path (e.g. "
                             f"tts.example), or *, got {entry!r} (a list is comma-separated)")
