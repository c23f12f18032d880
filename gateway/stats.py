"""`GET /v1/stats`: what the live page plots, as JSON (Prometheus has the long view).

  {"time", "device", "devices", "policy", "sessions", "requests",
   "models": {id: {"waiting", "running", "has_backbone", "worker", "prefill_deferrals", "refused",
                   "est_codec_ms", "est_step_ms" (speech LMs), "host_ms_p50" (null before a step),
                   "graphs": {"hit", "miss"} (speech LMs' decode CUDA graphs; {} for a synthesiser),
                   "last_batch": {"prefill", "decode", "urgent", "background"},
                   "lanes": {lane: batch size},  # attached models; only the lanes a model has
                   "replicas": [{the same, for one device}]}},  # several devices: counts summed above
   "recent": [{"at", "model", "source", "ttfa_ms", "late_ms", "stalls", "audio_ms", "rtf"}]}

`policy` is the scheduler policy in force (`edf`, `fifo` or `fifo+<mechanisms>`: the
`policy` setting or `voxgate serve --policy`; engine/config.py).
`lanes` has only the lanes a model has (a synthesiser such as Piper: `synth`), so the live
page never shows an LM lane for Piper.
`devices` are where speech LMs are placed (the `devices` setting, docs/scaling.md); a model
on several has a replica on each: `worker` joins their names, `refused` counts requests that
no replica took.
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
    return JSONResponse({
        "time": time.time(),
        "device": state.settings.device,
        "devices": list(state.settings.devices),
        "policy": engine["policy"],
        "sessions": state.metrics.open_sessions(),
        "requests": engine["requests"],
        "models": engine["models"],
        "recent": [u for u in state.metrics.recent if u["at"] > since],
    })
