"""HTML pages (Jinja2 templates in webui/, assets in static/): studio, library, voices, live.

Handlers only pick what a template shows; the pages fetch everything else from the API.
A page of something that does not exist (`/projects/<unknown id>`, or any unknown path
asked for by a browser) is a 404: the site's error page when the request's `Accept`
ranks `text/html` above `application/json` (a browser navigating), else the API's JSON
error (`fetch()`, curl and API clients send `*/*` or ask for JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import static
import webui
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from gateway import references
from gateway.errors import ApiError, error_body
from gateway.presets import FAMILY_SETTINGS
from gateway.projects_api import context, existing_project
from gateway.settings import MB, format_mb
from gateway.speech import FAMILIES_WITH_SPEED
from gateway.state import AppState
from models import FAMILIES

TEMPLATES_DIR = Path(webui.__file__).parent
STATIC_DIR = Path(static.__file__).parent
templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
SAMPLE_SENTENCE = "Hello! This is how I sound. Shall we record something together?"


def _render(request: Request, template: str, page: str, **context: Any) -> Response:
    state: AppState = request.app.state.voxgate
    return templates.TemplateResponse(request, template, {
        "page": page, "default_model": state.settings.default_model, **context})


def _quality(ranges: list[tuple[str, float]], media: str) -> float:
    """The q-value `Accept` gives `media` (RFC 9110 §12.5.1: the most specific range wins)."""
    kind = media.split("/", 1)[0]
    best, quality = -1, 0.0
    for name, q in ranges:
        specificity = 2 if name == media else 1 if name == f"{kind}/*" else 0 if name == "*/*" else -1
        if specificity > best:
            best, quality = specificity, q
    return quality


def prefers_html(accept: str) -> bool:
    """Whether an `Accept` header ranks text/html above application/json (a browser's
    navigation does: `text/html,...,*/*;q=0.8`; `*/*`, no header and JSON do not)."""
    ranges: list[tuple[str, float]] = []
    for item in accept.lower().split(","):
        name, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        if name:
            ranges.append((name, q))
    return _quality(ranges, "text/html") > _quality(ranges, "application/json")


def error_page(request: Request, error: ApiError) -> Response:
    """`error` as the site's error page (webui/error.html) for a browser, else as JSON."""
    if not prefers_html(request.headers.get("accept", "")):
        return JSONResponse(error_body(error.code, error.message, error.field, error.status), error.status)
    title = {404: "Not found", 405: "Method not allowed"}.get(error.status, "Something went wrong")
    back = ("/projects", "All projects") if request.url.path.startswith("/projects/") else ("/", "Back to the studio")
    return templates.TemplateResponse(request, "error.html", {
        "page": "", "title": title, "message": error.message, "status": error.status, "code": error.code,
        "back_href": back[0], "back_label": back[1]}, status_code=error.status)


async def index(request: Request) -> Response:
    state: AppState = request.app.state.voxgate
    return _render(request, "index.html", "studio", max_input_chars=state.settings.max_input_chars,
                   speed_families=sorted(FAMILIES_WITH_SPEED))  # the others speak at their own pace


_LIMITS = (  # residency settings shown on the library page: (setting, label, format)
    ("max_loaded_models", "Models loaded at most", "{:d}"),
    ("idle_unload_s", "Unload when idle for", "{:g} s"),
    ("min_free_memory_mb", "Memory kept free", "mb"),  # as given (format_mb): 1e8 is no "1e+08 MB"
    ("busy_timeout_ms", "Longest wait for room", "{:g} ms"),
)


async def library(request: Request) -> Response:
    settings = request.app.state.voxgate.settings
    limits = [(label, "never" if name == "idle_unload_s" and not getattr(settings, name)
               else format_mb(getattr(settings, name) * MB) if fmt == "mb" else fmt.format(getattr(settings, name)))
              for name, label, fmt in _LIMITS]
    return _render(request, "library.html", "library", limits=limits, device=", ".join(settings.devices),
                   families=list(FAMILIES), local_roots=bool(settings.local_model_roots))


async def voices(request: Request) -> Response:
    # The reference-voice limits the server enforces (gateway/references.py), shown by the
    # upload form and the recorder, which stops at the longest length.
    limits = {"min_s": references.MIN_SECONDS, "max_s": references.MAX_SECONDS,
              "max_bytes": references.MAX_UPLOAD_BYTES, "max_transcript": references.MAX_TRANSCRIPT_CHARS}
    return _render(request, "voices.html", "voices", sample_sentence=SAMPLE_SENTENCE, reference_limits=limits,
                   family_settings={name: [list(item) for item in items] for name, items in FAMILY_SETTINGS.items()})


async def live(request: Request) -> Response:
    return _render(request, "live.html", "live")


async def projects(request: Request) -> Response:
    return _render(request, "projects.html", "projects")


async def project(request: Request) -> Response:
    """The project editor (the page reads the project from the API); 404 for an unknown id."""
    try:
        record = await existing_project(request, context(request)[1])
    except ApiError as error:
        return error_page(request, error)
    return _render(request, "project.html", "projects", project_id=str(record["id"]))
