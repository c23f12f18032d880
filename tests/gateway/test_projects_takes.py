"""gateway/projects_takes.py: the export's ASCII file name (`filename=` of its Content-Disposition)."""

import pytest

from gateway.projects_takes import ascii_filename


@pytest.mark.parametrize("name, expected", [
    ("Plain_name", "Plain_name"),
    ("Chapter 1", "Chapter-1"),
    ("Émile/Test", "Emile-Test"),  # the letter kept without its accent (it was "mile-Test")
    ("Café crème", "Cafe-creme"),
    ("Ærø", "r"),  # letters with no ASCII decomposition become '-', as before
    ("☃ Schnee", "Schnee"),
    ("a☃b", "a-b"),
    ("☃", ""),  # nothing left: the caller uses the project's id
])
def test_ascii_filename(name: str, expected: str) -> None:
    assert ascii_filename(name) == expected


@pytest.mark.parametrize("rate", [16000, 22050, 24000, 44100])
def test_a_second_trim_finds_nothing_to_cut(rate: int) -> None:
    """The kept silence was 30 ms in samples (661 at 22050 Hz), not whole 10 ms frames (3 x 220), so the trimmed
    audio's frames fell across the original's and a second trim could cut again: the full suite's
    `trim_silence` twice gave 200 twice on a Piper take (22050 Hz). Every onset offset, both ends."""
    import numpy as np

    from gateway.projects_audio import silence_bounds

    rng = np.random.default_rng(rate)
    for lead in range(0, int(rate * 0.05), 7):  # the loud part's first sample, across several frames
        tail = int(rng.integers(0, rate // 20))
        loud = (rng.standard_normal(rate // 4) * 8000).astype(np.int16)
        fade = np.linspace(0, 1, 40)  # (a soft onset, so a frame straddling it can be either side of the level)
        loud[:40] = (loud[:40] * fade).astype(np.int16)
        pcm = np.concatenate([np.zeros(rate // 10 + lead, np.int16), loud, np.zeros(tail, np.int16)])
        start, end = silence_bounds(pcm, rate)
        assert 0 < end - start <= len(pcm)
        assert silence_bounds(pcm[start:end], rate) == (0, end - start), (lead, tail)
