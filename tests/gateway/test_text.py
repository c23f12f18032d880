"""Text frontend: normalisation, rejection, sentence segments, incremental buffer."""

from __future__ import annotations

import pytest

from engine.types import InputTooLong, InvalidInput
from gateway.text import SentenceBuffer, check_input, normalize, split_first, split_segments


def test_normalize_collapses_whitespace_and_drops_control_characters() -> None:
    assert normalize("  Hello\t\tworld\r\n\x00again\u200b  ") == "Hello world again"


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "?!...", "\x00\x01"])
def test_unspeakable_input_is_rejected(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        check_input(text, 100)
    assert info.value.field == "input"


def test_input_over_the_limit_is_rejected() -> None:
    with pytest.raises(InputTooLong):
        check_input("a" * 11, 10)


def test_sentences_keep_abbreviations_decimals_times_and_urls() -> None:
    text = ("Dr. Smith paid $3.50 at 10:30 a.m. and read https://example.com/a.b today. "
            "Then he left! Did he? Yes.")
    assert split_segments(text) == [
        "Dr. Smith paid $3.50 at 10:30 a.m. and read https://example.com/a.b today.",
        "Then he left!", "Did he?", "Yes."]


def test_long_sentences_are_cut_at_clauses_then_spaces() -> None:
    sentence = ", ".join(["word " * 10] * 12).strip() + "."
    segments = split_segments(sentence, max_chars=120)
    assert all(len(s) <= 120 for s in segments)
    assert " ".join(segments).split() == sentence.split()


def test_sentence_buffer_releases_sentences_as_they_complete() -> None:
    buffer = SentenceBuffer()
    assert buffer.append("Dr. Smith arrived") == []
    assert buffer.append(" at noon. He sat") == ["Dr. Smith arrived at noon."]
    assert buffer.append(" down.") == []  # might go on ("down. Then"): wait
    assert buffer.pending == "He sat down."
    assert buffer.flush() == ["He sat down."]
    assert buffer.flush() == []


def test_the_first_segment_is_cut_short_for_a_fast_first_chunk() -> None:
    segments = split_segments("It was a bright cold day in April, and the clocks were striking thirteen. Then.")
    assert split_first(segments, 60) == ["It was a bright cold day in April,",
                                         "and the clocks were striking thirteen.", "Then."]
    no_clause = ["one two three four five six seven eight nine ten eleven twelve thirteen fourteen."]
    cut = split_first(no_clause, 40)
    assert len(cut[0]) <= 40 and " ".join(cut).split() == no_clause[0].split()
    assert split_first(["Short one."], 60) == ["Short one."]
    assert split_first(segments, 0) == segments


def test_a_tiny_first_sentence_is_joined_with_the_next() -> None:
    segments = split_segments("Hello! I am reading this text as it arrives, one piece at a time. Goodbye.")
    assert split_first(segments, 60) == ["Hello! I am reading this text as it arrives,",
                                         "one piece at a time.", "Goodbye."]
