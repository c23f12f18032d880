"""Word timings for Piper: each text word's start and end, from the phoneme durations the
patched voice outputs (models/piper.py `_with_alignments`), aligned to the text's words."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from engine.types import WordTiming

_NOT_SPOKEN = frozenset("^$_ ")  # piper's BOS, EOS, PAD and the word separator
_PUNCTUATION = frozenset(".,;:!?¡¿—…\"«»“”()-")
# Alignment moves (text words, espeak words) and what a move other than 1:1 costs.
_MOVES = ((1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 6), (2, 1), (3, 1))
_MOVE_COST = 0.35


def _align(letters: Sequence[int], sizes: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """Blocks (w0, w1, g0, g1): text words [w0, w1) are espeak words [g0, g1).

    Dynamic programming over monotonic alignments where one text word takes 1-6 espeak
    words ("$3.50") or 2-3 text words share one ("of the"); the cost of a block is how
    far its phoneme count is from its letters' share, |log(phonemes / (rate x letters))|,
    plus a fixed cost per word joined or split. A row of the table at a time, in numpy
    (every move takes at least one text word, so row i is final once rows < i are done):
    a long sentence costs milliseconds, not a Python loop per cell holding the GIL while
    another worker wants to step.
    """
    num_w, num_g = len(letters), len(sizes)
    lsum = np.concatenate([[0.0], np.cumsum(letters, dtype=np.float64)])
    gsum = np.concatenate([[0.0], np.cumsum(sizes, dtype=np.float64)])
    log_rate = math.log(max(gsum[-1], 1.0) / max(lsum[-1], 1.0))
    cost = np.full((num_w + 1, num_g + 1), np.inf)
    back = np.zeros((num_w + 1, num_g + 1, 2), np.int64)
    cost[0, 0] = 0.0
    # log phonemes of espeak words [j, j + dg), for each j
    log_size = {dg: np.log(np.maximum(gsum[dg:] - gsum[:-dg], 1e-6)) for dg in {m[1] for m in _MOVES} if dg <= num_g}
    for i in range(num_w):
        row = cost[i]
        for dw, dg in _MOVES:
            if i + dw > num_w or dg > num_g:
                continue
            share = log_rate + math.log(lsum[i + dw] - lsum[i])
            step = np.abs(log_size[dg] - share) + _MOVE_COST * (dw + dg - 2)
            candidate = row[:num_g + 1 - dg] + step
            target = cost[i + dw, dg:]
            better = candidate < target
            target[better] = candidate[better]
            back[i + dw, dg:][better] = (dw, dg)
    if not np.isfinite(cost[num_w, num_g]):
        return [(0, num_w, 0, num_g)]
    blocks, i, j = [], num_w, num_g
    while i or j:
        dw, dg = (int(v) for v in back[i, j])
        blocks.append((i - dw, i, j - dg, j))
        i, j = i - dw, j - dg
    return blocks[::-1]


def _spoken_letters(word: str) -> int:
    """Roughly how many letters `word` takes to say: a digit reads as a word (~4)."""
    return sum(4 if ch.isdigit() else 1 for ch in word if ch.isalnum()) or 1


def word_timings(text: str, spoken: Sequence[Any], sample_rate: int) -> tuple[WordTiming, ...]:
    """Each word of `text` (one synthesis unit) with its start and end in ms from the first sample of its audio.

    `spoken`: piper AudioChunks (one per espeak sentence, in order) with
    `phoneme_alignments` (phoneme, num_samples). espeak's words are the runs of phonemes
    between its word separators, without the pauses of punctuation; text words are
    matched to them by `_align`, and words sharing one espeak word split its time by
    letters. Empty when piper gave no alignments (a model without the duration output).
    """
    words = text.split()
    groups: list[list[float]] = []  # [start, end, phonemes] in samples, one per espeak word
    position, in_word = 0, False
    for chunk in spoken:
        if not chunk.phoneme_alignments:
            return ()
        for alignment in chunk.phoneme_alignments:
            start, position = position, position + int(alignment.num_samples)
            if alignment.phoneme in _NOT_SPOKEN:
                in_word = False
            elif alignment.phoneme not in _PUNCTUATION:
                if not in_word:
                    groups.append([start, position, 0])
                    in_word = True
                groups[-1][1:] = [position, groups[-1][2] + 1]
        in_word = False
    if not words or not groups:
        return ()
    letters = [_spoken_letters(w) for w in words]
    ms = 1000.0 / sample_rate
    out = []
    for w0, w1, g0, g1 in _align(letters, [int(g[2]) for g in groups]):
        start, end = groups[g0][0], groups[g1 - 1][1]
        share = (end - start) / sum(letters[w0:w1])
        for k in range(w0, w1):
            out.append(WordTiming(words[k], start * ms, (start + share * letters[k]) * ms))
            start += share * letters[k]
    return tuple(out)
