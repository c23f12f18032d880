"""Everything a request handler needs, built by the lifespan in gateway/app.py."""

from __future__ import annotations

from dataclasses import dataclass

from engine.engine import Engine
from gateway.catalog import Catalog
from gateway.downloads import DownloadManager
from gateway.library import Library
from gateway.metrics import Metrics
from gateway.residency import Residency
from gateway.settings import Settings


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
