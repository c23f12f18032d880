"""HTML pages (Jinja2 templates in webui/, assets in static/): studio, library, voices, live.

Handlers only pick what a template shows; the pages fetch everything else from the API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import static
import webui
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from gateway.presets import FAMILY_SETTINGS
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


async def index(request: Request) -> Response:
    state: AppState = request.app.state.voxgate
    return _render(request, "index.html", "studio", max_input_chars=state.settings.max_input_chars)


_LIMITS = (  # residency settings shown on the library page: (setting, label, format)
    ("max_loaded_models", "Models loaded at most", "{:d}"),
    ("idle_unload_s", "Unload when idle for", "{:g} s"),
    ("min_free_memory_mb", "Memory kept free", "{:g} MB"),
    ("busy_timeout_ms", "Longest wait for room", "{:g} ms"),
)


async def library(request: Request) -> Response:
    settings = request.app.state.voxgate.settings
    limits = [(label, "never" if name == "idle_unload_s" and not getattr(settings, name)
               else fmt.format(getattr(settings, name))) for name, label, fmt in _LIMITS]
    return _render(request, "library.html", "library", limits=limits, device=settings.device,
                   families=list(FAMILIES))


async def voices(request: Request) -> Response:
    return _render(request, "voices.html", "voices", sample_sentence=SAMPLE_SENTENCE,
                   family_settings={name: [list(item) for item in items] for name, items in FAMILY_SETTINGS.items()})


async def live(request: Request) -> Response:
    return _render(request, "live.html", "live")


async def projects(request: Request) -> Response:
    return _render(request, "projects.html", "projects")


async def project(request: Request) -> Response:
    """The project editor; the page reads the project from the API (a bad id shows there)."""
    return _render(request, "project.html", "projects", project_id=str(request.path_params["project_id"]))
