"""axe-core (Deque's accessibility engine, MPL-2.0) run in a page, for tests/webui.

axe.min.js comes from the `axe-playwright-python` wheel (the test extra in pyproject.toml pins
it, so the engine's version and rules only change when that pin does): the suite installs
everything through pip, with no npm step. Only the script file is used, injected with
Playwright's own `evaluate`. Without the package the tests that need it are skipped, as the
browser tests are without Playwright.
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from typing import Any

import pytest

BLOCKING = ("serious", "critical")  # moderate and minor ones are reported, not failed on


@cache
def axe_source() -> str:
    pytest.importorskip("axe_playwright_python", reason="needs axe-playwright-python (the test extra)")
    return (importlib.resources.files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")


def audit(page: Any, context: str | None = None) -> list[dict[str, Any]]:
    """axe's violations in the page as it is now (WCAG 2.x A and AA and best practices), each
    {id, impact, help, nodes: [target, ...]}."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(axe_source())
    results = page.evaluate("(ctx) => axe.run(ctx || document, { resultTypes: ['violations'] })", context)
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"],
             "nodes": [n["target"] for n in v["nodes"]][:5]} for v in results["violations"]]


def assert_accessible(page: Any, where: str, context: str | None = None) -> None:
    """No serious or critical axe violation (the others are printed, for the log)."""
    found = audit(page, context)
    for v in found:
        if v["impact"] not in BLOCKING:
            print(f"axe ({where}): {v['impact']} {v['id']}: {v['help']} {v['nodes']}")
    blocking = [v for v in found if v["impact"] in BLOCKING]
    assert not blocking, f"axe found on {where}: {blocking}"


def overflow_x(page: Any) -> int:
    """How far the page is wider than its viewport (WCAG 1.4.10 reflow: 0 at 320-400 px)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))
