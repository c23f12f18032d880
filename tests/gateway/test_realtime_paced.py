"""LLM-paced text on /v1/realtime: the rest of a sentence is spoken before its end when the
listener would otherwise run dry (gateway/text_feed.py `pace`, TextStream.release_early),
and waits for its natural boundary when there is slack."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.workload import Listener
from engine.types import SpeechRequest
from gateway.settings import load_settings
from gateway.text import Item, Pause, TextOptions, TextStream, prepare
from gateway.text_feed import TextFeed
from tests.conftest import LiveServer, run_server
from tests.gateway.test_realtime import collect_utterance, open_session
from tests.gateway.test_text import EN, LLM_TEXT

# 25 words; its first clause ("Then Margaret,") plays out long before the last word comes.
SENTENCE = ("Then Margaret, who was tired of waiting for the others to come back from the market, "
            "walked slowly down the long road to her home.")
WORD_S = 0.05  # an LLM's pace: a word every 50 ms


# -- TextStream.release_early ---------------------------------------------------------------


def early(text: str) -> tuple[list[Item], str]:
    """What an early release of `text`, appended after a first unit, speaks, and what waits."""
    stream = TextStream(TextOptions(), 24, 12)
    assert stream.append("Here we are now, friends. ") + stream.release() == ["Here we are now,", "friends."]
    assert stream.append(text) == []
    return stream.release_early(), stream.pending


def test_an_early_release_cuts_at_the_last_clause_mark() -> None:
    assert early("and if Jasper had not come just in time, she would have fallen over") == (
        ["and if Jasper had not come just in time,"], "she would have fallen over")
    assert early("who was standing at the door, ") == (["who was standing at the door,"], "")


def test_without_a_clause_mark_an_early_release_keeps_the_last_word() -> None:
    # The last word may not be complete yet ("fall" of "falling").
    assert early("she would have tumbled over") == (["she would have tumbled"], "over")
    assert early("walking") == ([], "walking")  # a single word waits
    assert early("and then, she would have") == (["and then, she would"], "have")  # a clause under 12 characters
    assert early("and then, she") == (["and then,"], "she")  # (at words, when they release more)


def test_an_early_release_cuts_nowhere_that_changes_the_reading() -> None:
    assert early("it weighs 5 km of") == (["it weighs five kilometers"], "of")  # "5 km" is read whole
    assert early("it weighs 5 km") == (["it"], "weighs 5 km")
    assert early("see `a b c` and more") == (["see a b c and"], "more")  # not in a code span
    assert early("see `a b c") == ([], "see `a b c")
    assert early("see [the long guide](https://example.com/a) or") == (["see the long guide"], "or")  # nor a link
    assert early("see [the long") == ([], "see [the long")
    assert early("\n| one two | three four ") == ([], "| one two | three four")  # nor a table row


def words(items: list[Item]) -> list[str]:
    return [w.strip(".,;:!?") for w in " ".join(item for item in items if isinstance(item, str)).split()]


@pytest.mark.parametrize("seed", range(10))
def test_early_releases_anywhere_speak_the_same_words(seed: int) -> None:
    """Any split of an LLM-style answer, with early releases between any appends, speaks the
    words the whole text does (only punctuation may differ: a list item cut early ends as
    a sentence, as list items do), its pauses included."""
    whole = prepare(LLM_TEXT, EN)
    rng = random.Random(seed)
    stream = TextStream(EN)
    out: list[Item] = []
    at = num_early = 0
    while at < len(LLM_TEXT):
        size = rng.choice([1, 1, 2, 3, 5, 8, 13, 40])
        out += stream.append(LLM_TEXT[at:at + size])
        at += size
        if rng.random() < 0.3:
            early_items = stream.release_early()
            num_early += bool(early_items)
            out += early_items
    out += stream.flush()
    assert num_early > 0
    assert words(out) == words(whole)
    assert [item for item in out if isinstance(item, Pause)] == [item for item in whole if isinstance(item, Pause)]


# -- TextFeed.pace ----------------------------------------------------------------------------


def paced_feed(deadline_in_s: float | None) -> tuple[TextFeed, list[list[Item]]]:
    released: list[list[Item]] = []

    async def sink(items: list[Item], since_s: float | None, ready_s: float) -> None:
        if items:
            released.append(items)

    async def on_error(error: Exception) -> None:
        raise AssertionError(error)

    at_s = None if deadline_in_s is None else time.monotonic() + deadline_in_s

    def deadline(chars: int) -> float | None:
        assert chars > 0
        return at_s

    settings = load_settings(env={}, text_buffer_ms=10_000.0)
    return TextFeed(settings, sink, on_error, deadline=deadline), released


def test_text_with_slack_waits_for_its_sentence_end() -> None:
    async def scenario() -> list[list[Item]]:
        feed, released = paced_feed(deadline_in_s=5.0)
        for word in SENTENCE.split():
            await feed.append(word + " ")
        assert feed.pace_timer is not None  # armed for the moment the listener would need it
        await feed.append("And")
        feed.cancel_timer()
        return released

    assert asyncio.run(scenario()) == [["Then Margaret,"], [SENTENCE.removeprefix("Then Margaret, ")]]


def test_text_past_its_deadline_is_released_at_once_at_a_clause() -> None:
    async def scenario() -> list[list[Item]]:
        feed, released = paced_feed(deadline_in_s=-0.01)
        for word in SENTENCE.split()[:20]:  # "... from the market, walked slowly down the"
            await feed.append(word + " ")
        feed.cancel_timer()
        return released

    released = asyncio.run(scenario())
    assert released[0] == ["Then Margaret,"]
    assert any(unit[-1].endswith("market,") for unit in released)  # a clause mark and a space: whole
    # All of it but the last word, which may not be complete yet.
    assert " ".join(u for unit in released for u in unit) == " ".join(SENTENCE.split()[:19])


def test_the_pace_timer_releases_text_when_its_moment_comes() -> None:
    async def scenario() -> list[list[Item]]:
        feed, released = paced_feed(deadline_in_s=0.05)
        await feed.append("Then Margaret, who was tired of waiting ")
        assert released == [["Then Margaret,"]]
        await asyncio.sleep(0.2)  # no new text: the timer speaks what the listener needs
        return released

    assert asyncio.run(scenario()) == [["Then Margaret,"], ["who was tired of"]]


def test_without_a_deadline_nothing_is_released_early() -> None:
    async def scenario() -> list[list[Item]]:
        feed, released = paced_feed(deadline_in_s=None)
        for word in SENTENCE.split()[:20]:
            await feed.append(word + " ")
        assert feed.pace_timer is None
        feed.cancel_timer()
        return released

    assert asyncio.run(scenario()) == [["Then Margaret,"]]


def test_released_text_is_dated_by_the_append_that_began_it() -> None:
    """`ready_s` (TextFeed module docstring): a release is dated by when its text began to
    come, so the playback clock excuses the wait for text that had not come, and not the
    wait for a sentence's end."""
    async def scenario() -> list[tuple[list[Item], float, float, float]]:
        got: list[tuple[list[Item], float]] = []

        async def sink(items: list[Item], since_s: float | None, ready_s: float) -> None:
            if items:
                got.append((items, ready_s))

        async def on_error(error: Exception) -> None:
            raise AssertionError(error)

        feed = TextFeed(load_settings(env={}, text_buffer_ms=10_000.0), sink, on_error)
        times = []
        for piece in ("Then Margaret, who ", "was tired. And ", "then "):
            before = time.monotonic()
            await feed.append(piece)
            times.append((before, time.monotonic()))
            await asyncio.sleep(0.02)
        items, _, ready_s = feed.flush()
        got.append((items, ready_s))
        feed.cancel_timer()
        spans = [times[0], times[0], times[1]]  # the appends each release's text began in
        return [(items, ready_s, *span) for (items, ready_s), span in zip(got, spans, strict=True)]

    releases = asyncio.run(scenario())
    assert [items for items, *_ in releases] == [["Then Margaret,"], ["who was tired."], ["And then"]]
    for _, ready_s, before, after in releases:
        assert before <= ready_s <= after


# -- a live server, a word every 50 ms, played back in real time -------------------------------


@pytest.fixture(scope="module")
def unpaced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server whose sentences wait for their end, as before pacing (`realtime_pace_ms` 0)."""
    yield from run_server(tmp_path_factory.mktemp("data"), realtime_pace_ms=0.0)


def speak_paced(server: LiveServer, text: str = SENTENCE, pause: bool = False
                ) -> tuple[Listener, dict[str, object], list[tuple[str, ...]]]:
    """`text` a word per append every WORD_S, then a flush, played at 1x from its first frame
    (`pause`: the client reports a pause at its first audio); the client's listener, the
    server's `utterance.done` and the segments of each engine request after the first."""
    engine = server.app_state.engine
    requests: list[tuple[str, ...]] = []
    submit = engine.submit

    def spy(spec: SpeechRequest):  # type: ignore[no-untyped-def]
        requests.append(spec.segments)
        return submit(spec)

    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "Ready."}))  # the model loads on first use
        ws.send(json.dumps({"type": "text.flush"}))
        assert collect_utterance(ws)[0][-1]["type"] == "utterance.done"
        engine.submit = spy  # type: ignore[method-assign]
        try:
            listener = Listener(time.monotonic())
            words = text.split()
            next_s = time.monotonic()
            for i, word in enumerate(words):
                ws.send(json.dumps({"type": "text.append", "text": word + (" " if i < len(words) - 1 else "")}))
                next_s += WORD_S
                while (wait_s := next_s - time.monotonic()) > 0:  # read audio as it comes meanwhile
                    try:
                        message = ws.recv(timeout=wait_s)
                    except TimeoutError:
                        break
                    assert isinstance(message, bytes) or json.loads(message)["type"] == "audio.start", message
                    if isinstance(message, bytes):
                        if pause and listener.first_s is None:
                            ws.send(json.dumps({"type": "playback.position", "played_ms": 0, "playing": False}))
                        listener.receive(time.monotonic(), 1000.0 * len(message) / 2 / 24000)
            ws.send(json.dumps({"type": "text.flush"}))
            while True:
                message = ws.recv(timeout=30)
                if isinstance(message, bytes):
                    listener.receive(time.monotonic(), 1000.0 * len(message) / 2 / 24000)
                    continue
                done = json.loads(message)
                if done["type"] == "utterance.done":
                    break
        finally:
            del engine.submit
    return listener, done, requests[1:]


def test_llm_paced_text_plays_without_a_stall(server: LiveServer) -> None:
    listener, done, requests = speak_paced(server)
    assert done["text"] == SENTENCE and listener.ttfa_ms is not None
    assert listener.stalls == 0, (listener.stall_ms, requests)  # as the client heard it
    assert done["stalls"] == 0, done  # and as the server's playback clock counted it
    assert len(requests) >= 2, requests  # (the rest of the sentence went out in parts, before its end)
    assert server.wait_idle() == 0


def test_the_same_text_waiting_for_its_sentence_end_stalls(unpaced: LiveServer) -> None:
    """What the test above would see without pacing: the rest of the sentence comes after
    its last word, and the first clause's audio has run out by then."""
    listener, done, requests = speak_paced(unpaced)
    assert listener.stalls >= 1 and listener.stall_ms > 50.0, requests
    assert done["stalls"] >= 1
    assert requests == [(SENTENCE.removeprefix("Then Margaret, "),)]


def test_a_paused_listener_leaves_the_sentence_whole(server: LiveServer) -> None:
    """A paused listener has no deadline: the rest of the sentence waits for its end (one
    request), however long that takes."""
    _, done, requests = speak_paced(server, pause=True)
    assert done["text"] == SENTENCE and done["stalls"] == 0
    assert requests == [(SENTENCE.removeprefix("Then Margaret, "),)]


def test_pacing_is_a_setting(tmp_path: Path) -> None:
    assert load_settings(env={}, data_dir=tmp_path).realtime_pace_ms > 0
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="realtime_pace_ms"):
            load_settings(env={}, data_dir=tmp_path, realtime_pace_ms=bad)


@pytest.mark.parametrize("pieces, first", [
    (["It costs $4", ".99 today."], ["It"]),
    (["The weather is nice. Temperature is 2", "5 degrees today."], ["The weather is nice.", "Temperature"]),
    (["This is **bo", "ld** text."], ["This"]),
    (["Go to https://www.exa", "mple.com/docs now."], ["Go to"]),
])
def test_a_pause_in_the_text_does_not_cut_a_word_or_number(pieces: list[str], first: list[str]) -> None:
    """A pause past text_buffer_ms between "$4" and ".99" spoke "four dollars 99" (found by a new-user
    trial): the tail timer speaks what is whole and holds a last word or number the pause may have
    cut, which its next piece completes, so the words are those of the text sent whole."""
    async def scenario(parts: list[str], pause_s: float) -> list[list[Item]]:
        got: list[list[Item]] = []

        async def sink(items: list[Item], since_s: float | None, ready_s: float) -> None:
            if items:
                got.append(list(items))

        async def on_error(error: Exception) -> None:
            raise AssertionError(error)

        feed = TextFeed(load_settings(env={}, text_buffer_ms=50.0), sink, on_error)
        for i, part in enumerate(parts):
            await feed.append(part)
            await asyncio.sleep(pause_s)  # past text_buffer_ms, well short of PART_WAIT_S
            if i == 0 and pause_s:
                assert [item for items in got for item in items] == first
        got.append(feed.flush()[0])
        feed.cancel_timer()
        return got

    def words(releases: list[list[Item]]) -> list[str]:
        return " ".join(str(item) for items in releases for item in items).split()

    assert words(asyncio.run(scenario(pieces, 0.2))) == words(asyncio.run(scenario(["".join(pieces)], 0.0)))


def test_a_tail_that_ends_whole_is_spoken_at_once_and_a_cut_one_after_part_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway import text_feed

    monkeypatch.setattr(text_feed, "PART_WAIT_S", 0.2)

    async def scenario() -> list[tuple[float, list[Item]]]:
        got: list[tuple[float, list[Item]]] = []
        start = time.monotonic()

        async def sink(items: list[Item], since_s: float | None, ready_s: float) -> None:
            if items:
                got.append((time.monotonic() - start, list(items)))

        async def on_error(error: Exception) -> None:
            raise AssertionError(error)

        feed = TextFeed(load_settings(env={}, text_buffer_ms=50.0), sink, on_error)
        for piece in ("Thank you ", "Hello there", "See you!"):
            await feed.append(piece)
            await asyncio.sleep(0.5)
            feed.flush()
        feed.cancel_timer()
        return got

    got = asyncio.run(scenario())
    assert [items for _, items in got] == [["Thank you"], ["Hello"], ["there"], ["See you!"]]
    times = [at for at, _ in got]
    assert times[0] < 0.2 and times[1] - 0.5 < 0.2 and times[2] - 0.5 >= 0.2 and times[3] - 1.0 < 0.2, times
