"""`GET /v1/stats`: what the live page plots, as JSON (Prometheus has the long view).

  {"time", "device", "sessions", "requests",
   "models": {id: {"waiting", "running", "est_chunk_ms", "est_step_ms",
                   "last_batch": {"backbone", "codec"},   # models attached to the engine
                   "lanes": {lane: batch size}}},          # only the lanes the model has
   "recent": [{"at", "model", "source", "ttfa_ms", "late_ms", "stalls", "audio_ms", "rtf"}]}

`lanes` is the engine's own per-model lane report when it gives one; otherwise it is
`last_batch` without the backbone (LM) lane for a model that has none (Piper), so the
live page never shows a lane a model does not have.
`recent` holds completed utterances, oldest first, from the bounded ring in
gateway/metrics.py; `?since=T` (a previous answer's `time`) returns only newer ones.
"""

from __future__ import annotations

import math
import time

from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.types import InvalidInput
from gateway.state import AppState


async def stats(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    raw = request.query_params.get("since", "0")
    try:
        since = float(raw)
    except ValueError:
        since = math.nan
    if not math.isfinite(since):
        raise InvalidInput("since must be a number (seconds since the epoch)", field="since")
    engine = state.engine.stats()
    for model_id, model in engine["models"].items():
        if "lanes" not in model:
            runner = state.residency.runner(model_id)
            has_backbone = bool(getattr(runner, "has_backbone", True))
            model["lanes"] = {lane: n for lane, n in model.get("last_batch", {}).items()
                              if lane != "backbone" or has_backbone}
    return JSONResponse({
        "time": time.time(),
        "device": state.settings.device,
        "sessions": state.metrics.open_sessions(),
        "requests": engine["requests"],
        "models": engine["models"],
        "recent": [u for u in state.metrics.recent if u["at"] > since],
    })
