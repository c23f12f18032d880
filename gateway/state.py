"""Everything a request handler needs, built by the lifespan in gateway/app.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.engine import Engine
from gateway.catalog import Catalog
from gateway.downloads import DownloadManager
from gateway.library import Library
from gateway.metrics import Metrics
from gateway.residency import Residency
from gateway.settings import Settings

if TYPE_CHECKING:  # projects_jobs imports this module
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
