"""Piper word timings from the model's own phoneme durations; `validate` reading the voice file."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.types import SpeechRequest
from models import InvalidModel
from models.piper import PiperSynthesizer, embedded_model_path, load, validate
from models.piper_words import _align


@pytest.fixture(scope="module")
def runner() -> Iterator[PiperSynthesizer]:
    parts = load("piper-joe", None, {"workers": 1})
    synthesizer = parts.synthesizers[0]
    assert isinstance(synthesizer, PiperSynthesizer)
    yield synthesizer
    synthesizer.close()


def synthesize(runner: PiperSynthesizer, text: str) -> tuple[float, list[tuple[str, float, float]]]:
    request = SpeechRequest("r", "piper-joe", (text,), "default", options={"noise_w_scale": 0.0})
    pcm, words = runner.synthesize(text, request, pause=False)
    return 1000.0 * len(pcm) / runner.sample_rate, [(w.word, w.start_ms, w.end_ms) for w in words]


def test_every_word_gets_ordered_times_inside_the_audio(runner: PiperSynthesizer) -> None:
    text = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April."
    duration_ms, words = synthesize(runner, text)
    assert [w for w, _, _ in words] == text.split()
    for (_, start, end), (_, next_start, _) in zip(words, words[1:]):
        assert start < end <= next_start
    assert 0 <= words[0][1] < 200 and duration_ms - 400 < words[-1][2] <= duration_ms


def test_a_long_word_takes_longer_than_a_short_one(runner: PiperSynthesizer) -> None:
    _, words = synthesize(runner, "I saw extraordinarily big hats.")
    spans = {w: end - start for w, start, end in words}
    assert spans["extraordinarily"] > 3 * spans["I"]


def test_the_pause_at_a_comma_lies_between_words(runner: PiperSynthesizer) -> None:
    _, words = synthesize(runner, "Wait, then go.")
    (_, _, wait_end), (_, then_start, _) = words[0], words[1]
    assert then_start - wait_end > 100  # the comma's pause is not counted as speech


def test_words_espeak_reads_differently_still_line_up(runner: PiperSynthesizer) -> None:
    # espeak reads "$3.50" as four words and joins "of the"; the text words keep their order.
    duration_ms, words = synthesize(runner, "He paid $3.50 for one of the books.")
    assert [w for w, _, _ in words] == "He paid $3.50 for one of the books.".split()
    price = next(end - start for w, start, end in words if w == "$3.50")
    assert price > 600  # "three dollars fifty" is long
    assert words[-1][2] <= duration_ms


def test_align_matches_one_to_one_joins_and_splits() -> None:
    assert _align([3, 5, 4], [3, 5, 4]) == [(0, 1, 0, 1), (1, 2, 1, 2), (2, 3, 2, 3)]
    assert _align([2, 3, 6], [5, 6]) == [(0, 2, 0, 1), (2, 3, 1, 2)]  # two words in one
    assert _align([4, 12, 4], [4, 5, 4, 4, 4]) == [(0, 1, 0, 1), (1, 2, 1, 4), (2, 3, 4, 5)]


def test_validate_reads_the_voice_file(tmp_path: Path) -> None:
    """A truncated .onnx was taken at install and failed only at the first load (503, retried)."""
    onnx = embedded_model_path()
    assert validate(onnx)["voices"] == ["default"]
    for name, data in (("cut", onnx.read_bytes()[:-1000]), ("half", onnx.read_bytes()[: onnx.stat().st_size // 2]),
                       ("page", b"<html>Not found</html>")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.onnx").write_bytes(data)
        shutil.copy(onnx.with_name(onnx.name + ".json"), folder / f"{name}.onnx.json")
        with pytest.raises(InvalidModel, match=f"{name}.onnx is not a readable ONNX model"):
            validate(folder)
