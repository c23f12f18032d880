"""Everything a request handler needs, built by the lifespan in gateway/app.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.engine import Engine
from gateway.catalog import Catalog
from gateway.downloads import DownloadManager
from gateway.keys import KeyStore
from gateway.library import Library
from gateway.limits import KeyLimits
from gateway.memory import IdleTrim
from gateway.metrics import Metrics
from gateway.pacing import FirstAudio
from gateway.residency import Residency
from gateway.settings import Settings
from gateway.timings import SpeechRate
from gateway.writes import WriteGuard

if TYPE_CHECKING:  # projects_jobs and connection import this module
    from gateway.connection import Connection
    from gateway.projects_jobs import Generator


@dataclass(slots=True)
class AppState:
    settings: Settings
    engine: Engine
    library: Library
    residency: Residency
    metrics: Metrics
    draining: bool = False
    catalog: Catalog | None = None
    downloads: DownloadManager | None = None
    projects: Generator | None = None  # studio projects' background generation
    keys: KeyStore | None = None
    limits: KeyLimits | None = None
    writes: WriteGuard = field(default_factory=lambda: WriteGuard(10.0))
    drain_deadline_s: float | None = None  # time.monotonic() when running requests are cancelled
    sessions: set[Connection] = field(default_factory=set)  # open WebSocket sessions, for the drain (server.py)
    memory: IdleTrim | None = None  # returns freed heap memory when idle (gateway/memory.py)
    first_audio: FirstAudio = field(default_factory=FirstAudio)  # streamed requests' submit -> first audio
    speech_rate: SpeechRate = field(default_factory=SpeechRate)  # audio ms per character, for estimated timings
