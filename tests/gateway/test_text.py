"""Text frontend units: cleaning, rejection, sentences per language, the incremental stream."""

from __future__ import annotations

import random

import pytest

from engine.types import InputTooLong, InvalidInput
from gateway.text import (
    Pause, TextOptions, TextStream, check_input, check_spoken, clean, prepare, split_segments,
)

EN = TextOptions()


def test_clean_collapses_whitespace_and_drops_control_characters() -> None:
    assert clean("  Hello\t\tworld\r\n\x00again\u200b  ") == "Hello world again"
    assert clean("a  b\n\nc\x00", keep_lines=True) == "a b\n\nc"


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "?!...", "\x00\x01"])
def test_unspeakable_input_is_rejected(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        check_input(text, 100)
    assert info.value.field == "input"
    # only what a user sent nothing of is "empty"; control characters are "nothing speakable"
    assert ("is empty" in info.value.message) == (not text.strip())


@pytest.mark.parametrize(("text", "options", "message"), [
    ("😀", EN, "input has nothing that can be spoken (no letters or digits; "
               'emoji are dropped unless emoji is "name")'),
    ("😀", TextOptions(normalize=False, emoji="name"), "input has nothing that can be spoken (no letters or digits)"),
    ("** --", EN, "input has nothing that can be spoken (no letters or digits)"),
    ("```\nls\n```", EN, "input has nothing to speak once markup, code and emoji are left out"),
    ('<break time="1s"/>', EN, "input has nothing to speak once markup, code and emoji are left out"),
])
def test_what_the_options_make_of_the_text_is_checked(text: str, options: TextOptions, message: str) -> None:
    check_input(text, 100, speakable=False)  # (the raw text is not judged: the options may speak it)
    with pytest.raises(InvalidInput) as info:
        check_spoken(prepare(text, options), text, options)
    assert info.value.message == message and info.value.field == "input"


def test_an_emoji_alone_is_words_when_emoji_are_named() -> None:
    named = TextOptions(emoji="name")
    items = prepare("😀", named)
    assert items == ["grinning face"]
    check_spoken(items, "😀", named)


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


def test_cjk_thai_and_mixed_scripts_split_at_their_own_punctuation() -> None:
    assert split_segments("你好世界。今天天气很好！Hello there. How are you?", "zh") == [
        "你好世界。", "今天天气很好！", "Hello there.", "How are you?"]
    assert split_segments("Hello there. 你好世界。How are you?", "en") == ["Hello there.", "你好世界。", "How are you?"]
    assert split_segments("สวัสดีครับ วันนี้อากาศดี", "th") == ["สวัสดีครับ", "วันนี้อากาศดี"]
    assert split_segments("Guten Tag. Wie geht es Ihnen? Gut, danke.", "de_DE") == [
        "Guten Tag.", "Wie geht es Ihnen?", "Gut, danke."]


def test_the_first_segment_is_cut_at_a_clause_for_a_fast_first_chunk() -> None:
    items = prepare("It was a bright cold day in April, and the clocks were striking thirteen. Then.", EN, 60)
    assert items == ["It was a bright cold day in April,", "and the clocks were striking thirteen.", "Then."]
    no_clause = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen."
    cut = prepare(no_clause, EN, 40)
    assert isinstance(cut[0], str) and len(cut[0]) <= 40 and " ".join(map(str, cut)).split() == no_clause.split()
    assert prepare("Short one.", EN, 60) == ["Short one."]
    whole = "It was a bright cold day in April, and the clocks were striking thirteen. Then."
    assert prepare(whole, EN, 0) == ["It was a bright cold day in April, and the clocks were striking thirteen.",
                                     "Then."]


def test_a_tiny_first_sentence_is_joined_with_what_follows() -> None:
    items = prepare("Hello! I am reading this text as it arrives, one piece at a time. Goodbye.", EN, 60)
    assert items[0] == "Hello! I am reading this text as it arrives,"


def test_the_stream_releases_sentences_as_they_complete() -> None:
    stream = TextStream(EN, first_chars=0)
    assert stream.append("Dr. Smith arrived") == []
    assert stream.append(" at noon.") == []  # what follows decides: "noon. He" or "noon.com"
    assert stream.append(" He") == ["Doctor Smith arrived at noon."]  # (its title spelled out)
    assert stream.append(" sat down") == []
    assert stream.pending == "He sat down"
    assert stream.flush() == ["He sat down"]
    assert stream.flush() == []


def test_the_stream_speaks_the_first_clause_at_once() -> None:
    stream = TextStream(EN, first_chars=40)
    out: list[object] = []
    for word in "Well, the weather today is lovely, so we could".split():
        out += stream.append(word + " ")
    assert out == ["Well, the weather today is lovely,"]  # "Well," alone is too short to start with


def test_a_markdown_marker_split_across_appends_reads_as_whole_text() -> None:
    stream = TextStream(EN)
    out = stream.append("**Impor") + stream.append("tant:** read [the do") + stream.append("cs](https://x.org).")
    out += stream.flush()
    assert out == prepare("**Important:** read [the docs](https://x.org).", EN)
    assert " ".join(map(str, out)) == "Important: read the docs."


def test_spaces_after_a_cut_inside_a_line_indent_nothing() -> None:
    """Spaces that come after a sentence was cut inside a line (ElevenLabs' keep-alives " " while the
    client waits for its LLM) made the next sentence an indented code block, skipped unread (found
    by the helper that built the inactivity timeout). Indentation at a line's start still counts."""
    stream = TextStream(EN, first_chars=0)
    out = stream.append("Fine, thanks for asking. ")
    for piece in [" "] * 6 + ["The weather is lovely. ", "Bye"]:
        out += stream.append(piece)
    assert out + stream.flush() == ["Fine, thanks for asking.", "The weather is lovely.", "Bye"]
    assert " ".join(map(str, prepare("Fine, thanks.      The weather is lovely.", EN))) == \
        "Fine, thanks. The weather is lovely."
    assert prepare("Intro.\n\n    print('skipped')\n\nAfter.", EN) == ["Intro. After."]


LLM_TEXT = (
    "# Results\n\nHere is what I found:\n\n- **Revenue** grew 12% to $3.5M in Q3 2024.\n"
    "- Costs fell by 5,000 USD. Dr. Lee said so on 2024-03-15 at 10:30 am.\n\n"
    "| Region | Sales |\n|---|---|\n| EU | 1,200 |\n| US | 3,400 |\n\n"
    "```python\nprint('skipped')\n```\n"
    "See https://www.example.com/docs/start for *more*. Mail me at jane.doe@example.com 😀! "
    "Wait <break time=\"300ms\"/> then go. 你好世界。今天很好！Thanks, that's all")


@pytest.mark.parametrize("seed", range(20))
def test_any_split_of_the_input_reads_as_the_whole(seed: int) -> None:
    whole = prepare(LLM_TEXT, EN)
    rng = random.Random(seed)
    stream = TextStream(EN)
    out: list[object] = []
    at = 0
    while at < len(LLM_TEXT):
        size = rng.choice([1, 1, 2, 3, 5, 8, 13, 40])
        out += stream.append(LLM_TEXT[at:at + size])
        at += size
    out += stream.flush()
    assert out == whole
    assert Pause(300.0) in whole


def test_a_bad_ssml_break_is_refused_and_leaves_the_stream_as_it_was() -> None:
    stream = TextStream(EN, field="text")
    stream.append("Wait <break ")
    with pytest.raises(InvalidInput) as info:
        stream.append('time="forever"/> now.')
    assert info.value.field == "text" and "forever" in info.value.message
    assert stream.pending == "Wait <break"
    with pytest.raises(InvalidInput):
        prepare('a <break time="20s"/> b', EN)


@pytest.mark.parametrize("pieces", [1, 7, 10_000], ids=["whole", "in sevens", "by character"])
def test_a_run_of_breaks_longer_than_a_unit_keeps_its_tags_whole_and_is_one_pause(pieces: int) -> None:
    """Past MAX_UNIT_CHARS with no space the stream cuts by length: at a tag's edge, not inside it
    (a tag cut in two was read as words, "break time ten s"); the run is one pause of at most 10 s."""
    text = "Hold on. " + '<break time="10s"/>' * 300 + " There, " + '<break time="1s"/>' * 3 + "done."
    stream = TextStream(TextOptions())
    items = [item for k in range(0, len(text), pieces) for item in stream.append(text[k:k + pieces])]
    items += stream.flush()
    assert [item for item in items if isinstance(item, str)] == ["Hold", "on.", "There,", "done."]
    assert prepare(text, TextOptions()) == ["Hold", "on.", Pause(10_000.0), "There,", Pause(3000.0), "done."]


def test_appends_cost_what_they_add_not_what_is_buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    # Work per append must not grow with the buffer: the unreleased text stays bounded
    # (MAX_UNIT_CHARS, plus a word, outside code fences and tables), and pysbd only ever sees a window of
    # bounded size around a candidate boundary, however the text is fed.
    import gateway.text.stream as module

    windows: list[int] = []
    real = module._spans

    class Recording:
        def __init__(self, lang: str) -> None:
            self.inner = real(lang)

        def segment(self, text: str) -> list[object]:
            windows.append(len(text))
            return list(self.inner.segment(text))

    monkeypatch.setattr(module, "_spans", Recording)
    hostile = ["word " * 3000, "a. " * 3000, "Dr. e.g. U.S. " * 500, "[open link " * 800, "`tick. " * 800]
    for text in hostile:
        stream = TextStream(EN)
        largest = 0
        for ch in text:
            stream.append(ch)
            largest = max(largest, stream.pending_chars)
        stream.flush()
        assert largest <= module.MAX_UNIT_CHARS + module.WORD_SLACK + 1, text[:20]
    assert windows and max(windows) <= module.WINDOW_CHARS + 40


FUZZ_PIECES = list("abc XYZ 0123456789 .,;:!?-–*_`#|~[]()<>/\\@$€£¥%°&+=\n\n\t\"'") + [
    "Dr. ", "e.g. ", "Hello there. ", "😀", "世", "。", "ก ", "```", "| a |", "<break time='1s'/>", "<speak>",
    "$1,000,000.00", "2024-13-45", "2024-03-01", "99/99/2024", "25:99", "1e400", "9" * 40, "1.2.3.4.5",
    "**", "[x](", "](y)", "- ", "1. ", "# ", "> ", "https://example.com/a ", "@x.com", "−5", "\u200b", "\x00",
    "word word word, word word word word, "]


@pytest.mark.parametrize("lang", ["en_US", "de_DE", "fr_FR", "ja", "zh", "th", "ru", "pt_BR", "xx"])
def test_any_text_is_read_or_refused_cleanly_and_pieces_read_as_whole(lang: str) -> None:
    rng = random.Random(lang)
    for _ in range(120):
        text = "".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(1, 60)))
        options = TextOptions(language=lang, emoji=rng.choice(["drop", "name"]),
                              code=rng.choice(["inline", "speak", "skip"]))
        try:
            whole = prepare(text, options)
        except InvalidInput:
            continue  # only an unreadable <break> may refuse; nothing else may raise
        stream = TextStream(options)
        out: list[object] = []
        at = 0
        while at < len(text):
            size = rng.randint(1, 7)
            out += stream.append(text[at:at + size])
            at += size
        out += stream.flush()
        assert out == whole, text
        assert all(isinstance(item, Pause) or item.strip() for item in whole)


def test_sentences_are_split_right_from_many_threads_at_once() -> None:
    """Concurrent requests segment on several threads: pysbd's Segmenter keeps the text it is
    working on in the object, so each thread has its own (gateway/text/segments.py)."""
    import sys
    import threading

    from gateway.text.segments import sentences

    texts = [f"Speaker {i} said hello. Then speaker {i} left the room at {i} o'clock. The end of {i}." for i in range(8)]
    expected = [sentences(t) for t in texts]
    wrong: list[int] = []
    start = threading.Barrier(len(texts))

    def work(i: int) -> None:
        start.wait()
        for _ in range(40):
            if sentences(texts[i]) != expected[i]:
                wrong.append(i)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over often, as a busy server does
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong


@pytest.mark.parametrize(("text", "expected"), [  # found by a new-user trial: "... a lot of money. | these days"
    ("- The Widget Pro costs a lot of money these days my friend and more words.",
     ["The Widget Pro costs a lot of money", "these days my friend and more words."]),
    ("## A heading that is quite long and goes on for a while here\nText.",
     ["A heading that is quite long and", "goes on for a while here.", "Text."]),
    ("1. **Widget Pro** costs a lot of money these days my friend and more words\n2. Next",
     ["Widget Pro costs a lot of money", "these days my friend and more words.", "Next."]),
])
def test_a_list_item_or_heading_cut_inside_its_line_ends_only_where_the_line_does(text: str,
                                                                                   expected: list[str]) -> None:
    assert prepare(text, EN) == expected


@pytest.mark.parametrize(("text", "spoken"), [  # found by a realtime trial: nested items were dropped as code
    ("1. First step.\n    - Nested detail with four spaces.\n2. Second step.", "Nested detail"),
    ("- Top item.\n    - Nested with four spaces.\n- Next.", "Nested with four"),
    ("- Item one.\n\n    Continued paragraph inside the item.\n- Item two.", "Continued paragraph"),
])
def test_an_indented_line_after_a_list_item_is_read_with_its_item_not_skipped_as_code(text: str,
                                                                                       spoken: str) -> None:
    out = " ".join(map(str, prepare(text, EN)))
    assert spoken in out
    stream = TextStream(EN)  # streamed in pieces, the same
    pieces: list[object] = []
    for i in range(0, len(text), 3):
        pieces += stream.append(text[i:i + 3])
    assert " ".join(map(str, pieces + stream.flush())) == out
