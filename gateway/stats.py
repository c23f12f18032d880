"""`GET /v1/stats`: what the live page plots, as JSON (Prometheus has the long view).

  {"time", "device", "devices", "policy", "sessions", "requests",
   "models": {id: {"waiting", "running", "has_backbone", "worker", "prefill_deferrals", "refused",
                   "cut" (speech LMs: requests whose audio ended at their token limit, before the end of speech),
                   "est_codec_ms", "est_step_ms", "est_prefill_ms" (256 tokens; speech LMs),
                   "host_ms_p50" (null before a step),
                   "graphs": {"hit", "miss"} (speech LMs' decode CUDA graphs; {} for a synthesiser),
                   "ttfa_phases_ms": {"prepare", "inbox", "queue", "prefill", "first_chunk": [p50, p90]} | null,
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
`ttfa_phases_ms` splits the engine's part of the time to first audio over the last 256 first
chunks (engine/core.py `PHASES`): `prepare` (submitted -> prepared: the family's prompt, on a
prepare thread), `inbox` (-> its worker took it, between two of its iterations), `queue` (->
admitted: a KV slot and the prefill's turn), `prefill` (-> the first token: the prefill, and the
decode step where the prefill joins it; 0 for a synthesiser), `first_chunk` (-> the chunk
delivered: decode steps and the codec). A model on several replicas pools their first chunks
(each replica's own is in `replicas`); null before a first chunk.
`recent` holds completed utterances, oldest first, from the bounded ring in
gateway/metrics.py; `?since=T` (a previous answer's `time`) returns only newer ones.
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.core import PHASES
from engine.types import InvalidInput
from gateway.state import AppState


def phases(rows: Sequence[Sequence[float]]) -> dict[str, list[float]] | None:
    """p50 and p90 (ms, nearest rank) of each of engine/core.py's PHASES over first chunks `rows`
    (ms each, one row a request); None without rows."""
    columns = [sorted(column) for column in zip(*rows)]
    return {name: [round(nearest_rank(c, 0.5), 1), round(nearest_rank(c, 0.9), 1)]
            for name, c in zip(PHASES, columns)} if rows else None


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile of sorted `ordered` by the nearest-rank method: its ceil(q n)-th value (so p50 of
    two values is the lower, p90 the higher; found by a new-user trial: p50 took the higher and p90
    the lower)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarized(engine: dict[str, Any]) -> dict[str, Any]:
    """Engine stats with each model's (and replica's) raw `first_chunks` as `ttfa_phases_ms`."""
    def one(stats: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in stats.items() if k not in ("first_chunks", "replicas")}
        out["ttfa_phases_ms"] = phases(stats.get("first_chunks", ()))
        return {**out, "replicas": [one(r) for r in stats["replicas"]]} if "replicas" in stats else out
    return {**engine, "models": {model_id: one(stats) for model_id, stats in engine["models"].items()}}


async def stats(request: Request) -> JSONResponse:
    state: AppState = request.app.state.voxgate
    raw = request.query_params.get("since", "0")
    try:
        since = float(raw)
    except ValueError:
        since = math.nan
    if not math.isfinite(since):
        raise InvalidInput("since must be a number (seconds since the epoch)", field="since")
    engine = summarized(state.engine.stats())
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
