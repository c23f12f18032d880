"""Origins and host names as browsers send them (`Origin`, `Host`), parsed one way for the settings'
checks (gateway/settings.py) and the browser guard (gateway/security.py). Imports nothing of ours.

Formats: an origin is `scheme "://" host [ ":" port ]` (RFC 6454 §6.1, the serialisation browsers
send); a `Host` header is `uri-host [ ":" port ]` (RFC 9110 §7.2)."""
from __future__ import annotations

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
