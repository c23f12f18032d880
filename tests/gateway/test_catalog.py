"""The packaged model catalog (models/catalog.json): valid, its URLs resolved against a base."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.catalog import load_catalog, parse_catalog, resolve


def test_catalog_file_is_valid_and_resolves_urls(tmp_path: Path) -> None:
    catalog = load_catalog()
    ids = {m.id for m in catalog.models}
    assert {"orpheus-3b-0.1-ft", "snac_24khz", "de_DE-thorsten-medium", "fr_FR-siwis-medium"} <= ids
    assert catalog.get("orpheus-3b-0.1-ft").gated  # type: ignore[union-attr]
    voice = catalog.get("de_DE-thorsten-medium")
    assert voice is not None and voice.family == "piper"
    first = voice.files[0]
    assert resolve("https://huggingface.co", first) == (
        "https://huggingface.co/rhasspy/piper-voices/resolve/v1.0.0/de/de_DE/thorsten/medium/"
        "de_DE-thorsten-medium.onnx")
    assert resolve("https://mirror.local/hf/", first).startswith("https://mirror.local/hf/rhasspy/")
    assert resolve(f"file://{tmp_path}", first) == tmp_path / first.url
    assert resolve(str(tmp_path), first) == tmp_path / first.url
    for bad in ({"version": 2, "models": []},
                {"version": 1, "models": [{"id": "x", "family": "piper", "name": "x",
                                           "files": [{"url": "../etc/passwd", "size_bytes": 1}]}]},
                {"version": 1, "models": [{"id": "x", "family": "piper", "name": "x",
                                           "files": [{"url": "a", "size_bytes": 1, "sha256": "abc"}]}]}):
        with pytest.raises(ValueError):
            parse_catalog(bad)
