"""Piper's synthesis units: a sentence cut at its clauses, and the pause only at a sentence's end."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from engine.plan import CodecItem
from engine.request import Request
from engine.runner import SynthParts, SynthRunner
from engine.types import SpeechRequest, WordTiming
from models.piper import make_spec
from models.piper_units import MAX_MARKED_WORD, MAX_WORD, MIN_CLAUSE_CHARS, espeak_safe, split_unit


def test_a_sentence_is_cut_after_each_clause() -> None:
    text = "When the sun rose over the hills, the farmers went out; nobody stayed at home: not even the dog."
    assert split_unit(text) == ["When the sun rose over the hills,", "the farmers went out;",
                                "nobody stayed at home:", "not even the dog."]


def test_a_short_clause_joins_the_next_and_the_last_the_one_before() -> None:
    assert split_unit("Yes, sir, the carriage is waiting at the door, ready.") == [
        "Yes, sir, the carriage is waiting at the door, ready."]
    assert split_unit("The carriage is waiting at the door, ready to go at last, sir.") == [
        "The carriage is waiting at the door,", "ready to go at last, sir."]
    assert all(len(unit) >= MIN_CLAUSE_CHARS for unit in split_unit("Oh, and then, well, we went home to bed."))


def test_a_long_clause_is_cut_between_words_and_nothing_is_lost() -> None:
    text = " ".join(f"word{i}" for i in range(80)) + ", and the end of it."
    units = split_unit(text, max_chars=60)
    assert all(len(unit) <= 60 for unit in units)
    assert " ".join(units) == text
    assert split_unit("x" * 90, max_chars=60) == ["x" * 90]  # one word stays whole
    assert split_unit("A short one.") == ["A short one."]


# Each of these crashed the whole server (SIGSEGV in espeak-ng, piper's phonemizer) from one request
# of a few hundred characters, on every route (REST, /v1/realtime, the vendor routes).
CRASHERS = ["a." * 150, "é." * 60, "a.a.a.a.a. " * 20, "x.y. " * 60, "'s" * 90, "ness" * 75,
            "http://" + "a." * 1500 + "com"]


def test_no_unit_crashes_the_phonemizer() -> None:
    units = [unit for text in CRASHERS for unit in make_spec(["default"]).prepare(
        SpeechRequest("r", "m", (text,), "default")).units]
    # In a process of its own: a crash there is a failed test, not a dead test run.
    code = ("import sys\nfrom piper.phonemize_espeak import EspeakPhonemizer\np = EspeakPhonemizer()\n"
            "for unit in sys.stdin.read().split('\\n'):\n    p.phonemize('en-us', unit)\n")
    done = subprocess.run([sys.executable, "-c", code], input="\n".join(units), text=True, capture_output=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_espeak_safe_rewrites_only_what_would_crash() -> None:
    for text in ("U.S.A. and e.g. i.e. at 3 p.m.", "Hello, world.", "x" * MAX_WORD,
                 "3.14159265358979323846264338327950", "don't", "a. b. c."):
        assert espeak_safe(text) == text
    assert espeak_safe("a." * 20 + " then") == " ".join(["a."] * 20) + " then"
    cut = espeak_safe("'s" * 40)
    assert cut.replace(" ", "") == "'s" * 40 and max(map(len, cut.split())) <= MAX_MARKED_WORD
    assert espeak_safe("x" * (MAX_WORD + 1)) == "x" * MAX_WORD + " x"


def test_prepare_marks_the_units_that_end_a_segment() -> None:
    spec = make_spec(["default"])
    request = SpeechRequest("r", "m", ("Before the storm came in, we ran for the barn.", "Then we hid under the old bridge."),
                            "default")
    prepared = spec.prepare(request)
    assert prepared.units == ("Before the storm came in,", "we ran for the barn.", "Then we hid under the old bridge.")
    assert prepared.sentence_ends == (False, True, True)


class Recorder:
    """A synthesiser that speaks 10 ms per unit and records whether it was asked for a pause."""

    sample_rate = 1000

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, bool]] = []

    def synthesize(self, text: str, request: SpeechRequest, pause: bool, first: bool = False,
                   head: object = None) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
        self.calls.append((text, pause, first))
        return np.zeros(10 + (5 if pause else 0), np.float32), ()

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass


@pytest.mark.parametrize("segments, pauses", [
    (("Before the storm came in, we ran for the barn.", "Then we hid under the old bridge."), [False, True, False]),
    (("Before the storm came in, we ran for the barn.",), [False, False]),
])
def test_a_pause_follows_a_sentence_not_a_clause(segments: tuple[str, ...], pauses: list[bool]) -> None:
    spec, recorder = make_spec(["default"]), Recorder()
    runner = SynthRunner("m", SynthParts(spec, [recorder]), max_running=4)
    request_spec = SpeechRequest("r", "m", segments, "default")
    request = Request.create(request_spec, spec.prepare(request_spec), spec.shape)
    while (window := request.plan.next_window()) is not None:
        (out,) = runner.decode_codec([CodecItem(request, window)])
        assert out.error is None
        request.plan.advance(window)
    assert [pause for _, pause, _ in recorder.calls] == pauses
    assert " ".join(text for text, _, _ in recorder.calls) == " ".join(segments)
    assert [first for _, _, first in recorder.calls] == [True] + [False] * (len(pauses) - 1)


def test_only_a_first_chunk_with_nothing_ahead_of_it_is_first() -> None:
    spec, recorder = make_spec(["default"]), Recorder()
    runner = SynthRunner("m", SynthParts(spec, [recorder]), max_running=4)
    request_spec = SpeechRequest("r", "m", ("The rest of a sentence, after its first clause.",), "default",
                                 ahead_ms=900.0)  # the listener is still playing the first clause
    request = Request.create(request_spec, spec.prepare(request_spec), spec.shape)
    while (window := request.plan.next_window()) is not None:
        runner.decode_codec([CodecItem(request, window)])
        request.plan.advance(window)
    assert [first for _, _, first in recorder.calls] == [False, False]
