"""Who may call what: API keys per route, per-key limits, and JSON-or-key writes.

`RULES` is the table, first match wins: a path pattern, the methods it covers, the scope
it needs and where, besides `Authorization: Bearer` and the studio's cookie (gateway/studio_key.py),
its clients put the key. A
vendor-compatible protocol plugs in as one more row (its clients' header or query
parameter), and its routes are then checked like ours.

Scopes: `public` (pages, assets, health, the API schema), `read` (any valid key),
`speech`, `admin` (gateway/keys.py). With `auth` required (the default off loopback)
every non-public request needs a key; on loopback a key is optional, but once the server
has an active key, a key that is sent must be valid (a server without any ignores a key it
never issued: agent clients always send something; one it revoked is refused even then).
A secret in a query parameter (`api_key`, and `SECRET_PARAMS`) is replaced by `redacted` in
the scope before anything else runs (RedactQuerySecrets), so no log line shows it, refused or not.

A POST without a key must not have a body type a web page can send cross-site without
a CORS preflight (a form, `text/plain`, or none): 415. That is what keeps `/unload`
and friends out of reach of other sites' forms (PUT, PATCH and DELETE are always
preflighted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import studio_key
from gateway.access_log import note
from gateway.keys import ApiKey
from gateway.limits import Refused
from gateway.revocation import admit
from gateway.security import deny
from gateway.state import AppState

PUBLIC, READ = "public", "read"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Content types a page may POST cross-site without a preflight (the Fetch standard's
# CORS-safelisted request headers), and no content type at all.
SIMPLE_CONTENT_TYPES = frozenset({"", "application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
# Uploads that are multipart by nature (a file and its fields): without a key they rely on
# the Origin check alone (gateway/security.py refuses a foreign or `null` Origin, which
# browsers send with every cross-site form POST).
MULTIPART_UPLOADS = re.compile(r"^/v1/(voices/references|audio/clone)$")


@dataclass(frozen=True, slots=True)
class Credential:
    """Where a client puts its key: `bearer` (Authorization: Bearer), `header`, or `query`."""

    kind: str
    name: str = ""


BEARER = Credential("bearer", "authorization")


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str]
    scope: str
    methods: frozenset[str] | None = None  # None: every method (and WebSockets)
    credentials: tuple[Credential, ...] = ()  # accepted besides BEARER


def rule(pattern: str, scope: str, methods: frozenset[str] | None = None, *credentials: Credential) -> Rule:
    return Rule(re.compile(pattern), scope, methods, credentials)


RULES: tuple[Rule, ...] = (
    rule(r"^/(library|voices|live|projects|projects/[^/]+|docs|health|openapi\.json)?$", PUBLIC),  # pages
    rule(r"^/static/", PUBLIC),
    rule(r"^/v1/studio/key$", PUBLIC),  # the studio's sign-in checks the key it is given (gateway/studio_key.py)
    rule(r"^/v1/audio/(speech|design|clone)$", "speech"),
    rule(r"^/v1/realtime$", "speech", None, Credential("query", "api_key")),  # browsers cannot set headers
    # Vendor-compatible routes (docs/agents.md): the header or parameter their SDKs send.
    rule(r"^/v1/text-to-speech/", "speech", None, Credential("header", "xi-api-key")),  # ElevenLabs
    rule(r"^/tts/", "speech", None, Credential("header", "x-api-key"), Credential("query", "api_key")),  # Cartesia
    rule(r"^/v1/models/[^/]+/(load|unload)$", "admin"),
    rule(r"^/v1/(library|presets|takes|projects|voices/references)(/|$)", "admin", WRITES),
    rule(r"", READ),  # the rest of the API: any valid key
)


def match(path: str, method: str | None) -> Rule:
    for entry in RULES:
        if entry.pattern.search(path) and (entry.methods is None or method in entry.methods):
            return entry
    raise AssertionError("RULES ends with a catch-all")


# Query parameters that carry a secret in some client (ours and the vendors'; ElevenLabs' browser
# clients, OAuth-style `access_token`): replaced by `redacted` before anything sees the URL.
SECRET_PARAMS = frozenset({"api_key", "xi_api_key", "access_token", "token"})
SECRETS = "voxgate.query_secrets"  # the scope key under which their values are kept


class RedactQuerySecrets:
    """ASGI middleware, outermost: every SECRET_PARAMS value in the query string is kept in
    `scope[SECRETS]` and replaced by `redacted`, so no log line, error or refusal (a foreign Origin,
    a bad Host, a route that takes no query key) shows it; `presented_key` reads it from there."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw: bytes = scope.get("query_string", b"") if scope["type"] in ("http", "websocket") else b""
        # (`%`: a name may come percent-encoded, `api%5Fkey`, which parses as `api_key`)
        if raw and (b"%" in raw or any(name.encode() in raw for name in SECRET_PARAMS)):
            query = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
            secrets: dict[str, str] = {}
            for k, v in query:
                if k in SECRET_PARAMS:
                    secrets.setdefault(k, v)
            if secrets:
                scope[SECRETS] = secrets
                scope["query_string"] = urlencode(
                    [(k, "redacted" if k in SECRET_PARAMS else v) for k, v in query]).encode("latin-1")
        await self.app(scope, receive, send)


def presented_key(scope: Scope, entry: Rule) -> tuple[str, str] | None:
    """(the key the request carries, by the rule's credentials; where it came: `Authorization`, the
    header's or the query parameter's name, for an error's `field`); a query key comes from what
    RedactQuerySecrets kept."""
    headers = Headers(scope=scope)
    authorization = headers.get("authorization", "")
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip(), "Authorization"
    for credential in entry.credentials:
        if credential.kind == "header" and headers.get(credential.name):
            return str(headers[credential.name]).strip(), credential.name
        if credential.kind == "query" and credential.name in scope.get(SECRETS, {}):
            return str(scope[SECRETS][credential.name]).strip(), credential.name
    cookie = cookie_parser(headers.get("cookie", "")).get(studio_key.COOKIE)
    if cookie:  # the studio's sign-in, on every route (a page cannot set headers on <audio src> or a WebSocket)
        return cookie.strip(), "Cookie"
    return None


def key_wanted(scope: Scope, entry: Rule) -> str:
    """A missing key's message: where this route reads one (found by a new-user trial: an ElevenLabs
    client was told only of `Authorization`, and a `?api_key=` where none is read went unexplained)."""
    where = ["`Authorization: Bearer <key>`"]
    where += [f"`{c.name}: <key>`" if c.kind == "header" else f"`?{c.name}=<key>`" for c in entry.credentials]
    message = f"this server needs an API key: send {' or '.join(where)} (create one with `voxgate keys create NAME`)"
    taken = {c.name for c in entry.credentials if c.kind == "query"}
    ignored = sorted(set(scope.get(SECRETS, {})) - taken)
    if ignored:
        message += (f"; `?{ignored[0]}=` is not read here: a query key is for /v1/realtime and the Cartesia "
                    "routes, which browsers and Cartesia's clients call")
    return message


class KeyCheck:
    """ASGI middleware applying RULES; AppState.keys and .limits come from the lifespan."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    @staticmethod
    async def _refused(state: AppState, secret: str, field: str) -> bool:
        """Whether a presented key that is no active key is refused: keys are required, or some key
        is active, or it is a key this server revoked, but not in the studio's sign-in cookie
        (`field` "Cookie"): a browser still signed in with the last key, revoked, would be asked
        for a key where none exists, when the server serves the page without one.

        Agent clients always send a key (pipecat and LiveKit want one), so a server that
        has none and needs none ignores one it never issued and serves them as it serves any other
        client; but a revoked key is refused even then (found by a new-user trial: revoking the last
        key on loopback made the server serve it again).
        """
        if state.settings.keys_required:
            return True
        keys = state.keys
        if keys is None or await keys.count_active() > 0:
            return keys is not None
        return field != "Cookie" and await keys.is_revoked(secret)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state: AppState = scope["app"].state.voxgate
        method = scope.get("method")
        entry = match(scope["path"], method)
        key: ApiKey | None = None
        field = "Authorization"  # where the key came (or would come): an error's field
        if entry.scope != PUBLIC:
            presented = presented_key(scope, entry)
            if presented is not None:
                secret, field = presented
                key = await state.keys.lookup(secret) if state.keys is not None else None
                if key is not None:
                    note(key=key.key_id)  # (its id, never the secret: the access line)
                if key is None:
                    if await self._refused(state, secret, field):
                        await deny(scope, receive, send, 401, "invalid_api_key", "the API key is unknown or revoked",
                                   field, {"WWW-Authenticate": "Bearer"})
                        return
                elif not key.allows(entry.scope):
                    await deny(scope, receive, send, 403, "insufficient_scope",
                               f"key {key.prefix} lacks the {entry.scope!r} scope this route needs "
                               f"(it has: {', '.join(sorted(key.scopes))})", field)
                    return
            elif state.settings.keys_required:
                await deny(scope, receive, send, 401, "api_key_required", key_wanted(scope, entry), "Authorization",
                           {"WWW-Authenticate": "Bearer"})
                return
        if key is None and method == "POST":
            content_type = Headers(scope=scope).get("content-type", "").split(";")[0].strip().lower()
            upload = content_type == "multipart/form-data" and MULTIPART_UPLOADS.match(scope["path"]) is not None
            if content_type in SIMPLE_CONTENT_TYPES and not upload:
                what = f"Content-Type {content_type!r} on a POST" if content_type else "A POST with no Content-Type"
                await deny(scope, receive, send, 415, "unsupported_media_type",
                           f"{what} is refused without an API key: any web "
                           "page may send it cross-site (text/plain, application/x-www-form-urlencoded, and "
                           "multipart/form-data but on upload routes); send the route's own type, e.g. "
                           "application/json",
                           "Content-Type")
                return
        if key is None:
            await self.app(scope, receive, send)
            return
        assert state.limits is not None
        admit(scope, key, field)  # a session is closed if its key is revoked (gateway/revocation.py)
        try:
            state.limits.enter(key)
        except Refused as refused:
            await deny(scope, receive, send, 429, refused.code, refused.message, field,
                       {"Retry-After": str(refused.retry_after_s)})
            return
        try:
            await self.app(scope, receive, send)
        finally:
            state.limits.leave(key)
