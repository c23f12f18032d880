"""gateway/pages.py: the pages' prefilled text within the server's limits (no browser: the HTML as served)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, run_server


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), max_input_chars=40)


def test_studio_sample_text_fits_a_small_max_input_chars(small_server: LiveServer) -> None:
    page = httpx.get(small_server.url + "/", timeout=30).text
    text = html.unescape(re.search(r'<textarea id="text"[^>]*>(.*?)</textarea>', page, re.S).group(1))
    assert 0 < len(text) <= 40, text
    assert text.startswith("Hello! This is Voxgate")
    assert not text.endswith(" ")  # cut at a word, so Speak works as it stands
    assert 'maxlength="40"' in page and "/ 40 characters" in page


def test_studio_sample_text_is_whole_at_the_default_limit(server: LiveServer) -> None:
    page = httpx.get(server.url + "/", timeout=30).text
    assert "so the voice never stalls.</textarea>" in page
