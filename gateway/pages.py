"""HTML pages (Jinja2 templates in webui/, assets in static/)."""

from __future__ import annotations

from pathlib import Path

import static
import webui
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

TEMPLATES_DIR = Path(webui.__file__).parent
STATIC_DIR = Path(static.__file__).parent
templates = Jinja2Templates(directory=str(TEMPLATES_DIR))


async def index(request: Request) -> Response:
    state = request.app.state.voxgate
    return templates.TemplateResponse(request, "index.html", {
        "default_model": state.settings.default_model,
        "max_input_chars": state.settings.max_input_chars,
    })
