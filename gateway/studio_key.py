"""The studio's sign-in (`/v1/studio/key`): a browser page cannot put a key in a header of every
request it makes (an `<audio src>`, a WebSocket), so the studio hands the key to the server once
and gets it back as a cookie, which the browser then sends with each of its own requests.

- `POST /v1/studio/key` `{"key": "vxg_..."}`: 200 `{"name", "prefix", "scopes"}` with `Set-Cookie:
  voxgate_key=<key>; HttpOnly; SameSite=Strict; Path=/; Max-Age=30 days` (plus `Secure` over HTTPS),
  and a `voxgate_signed_in=<admin|speech>` cookie the page's script can read (to offer "Sign out", and
  to say what a speech key cannot do); 401 `invalid_api_key` (field `key`) for a key that is unknown
  or revoked, 400 for a body without a string `key`.
- `DELETE /v1/studio/key`: 204, both cookies cleared.

`gateway/auth.py` reads the cookie as a key on every route, after `Authorization` and the route's
own credentials. `HttpOnly` keeps it from the page's scripts; `SameSite=Strict` keeps browsers
from sending it with a request another site starts (a form, a link, an `<img>`), and the Origin
check (gateway/security.py) refuses the requests of other origins of the same site.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.types import InvalidInput
from gateway.errors import ApiError, read_json
from gateway.state import AppState

COOKIE = "voxgate_key"
SIGNED_IN = "voxgate_signed_in"  # readable by the page: whether to offer "Sign out"
MAX_AGE_S = 30 * 24 * 3600


async def sign_in(request: Request) -> Response:
    state: AppState = request.app.state.voxgate
    data = await read_json(request, state.settings.max_body_bytes)
    unknown = sorted(set(data) - {"key"})
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r}; the body is {{\"key\": \"vxg_...\"}}", field=unknown[0])
    secret = data.get("key")
    if not isinstance(secret, str) or not secret.strip():
        raise InvalidInput("key is required: an API key (`voxgate keys create NAME`)", field="key")
    key = await state.keys.lookup(secret.strip()) if state.keys is not None else None
    if key is None:
        raise ApiError(401, "invalid_api_key", "the API key is unknown or revoked", "key")
    response = JSONResponse({"name": key.name, "prefix": key.prefix, "scopes": sorted(key.scopes)})
    secure = request.url.scheme in ("https", "wss")
    response.set_cookie(COOKIE, secret.strip(), max_age=MAX_AGE_S, path="/", secure=secure, httponly=True,
                        samesite="strict")
    scope = "admin" if "admin" in key.scopes else "speech" if "speech" in key.scopes else "read"
    response.set_cookie(SIGNED_IN, scope, max_age=MAX_AGE_S, path="/", secure=secure, samesite="strict")
    return response


async def sign_out(request: Request) -> Response:
    response = Response(status_code=204)
    for name in (COOKIE, SIGNED_IN):
        response.delete_cookie(name, path="/", samesite="strict")
    return response
