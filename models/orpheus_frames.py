"""Orpheus' audio-token layout (no torch: the simulator and the codec both read it).

A frame is 7 tokens, one per position k (SNAC 24 kHz: 1 + 2 + 4 codes of its three
codebooks); position k's code c is token `AUDIO_TOKEN_BASE + CODEBOOK_SIZE * k + c`. Layout from
the authors' repo canopyai/Orpheus-TTS (its package's token decoder, read for the format), as
models/orpheus.py's module docstring says.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

AUDIO_TOKEN_BASE = 128266  # <custom_token_10> after Llama-3's 128,256 ids: code 0 of position 0
CODEBOOK_SIZE = 4096  # codes per SNAC codebook = id offset between frame positions
TOKENS_PER_FRAME = 7
# Frame position k -> index in SNAC's canonical row [c0, c1a, c1b, c2a, c2b, c2c, c2d].
SNAC_ORDER = (0, 1, 3, 4, 2, 5, 6)
_OFFSETS = np.array([AUDIO_TOKEN_BASE + CODEBOOK_SIZE * k for k in range(TOKENS_PER_FRAME)], dtype=np.int64)
_CANONICAL = np.argsort(SNAC_ORDER)  # output code j comes from frame position _CANONICAL[j]


def audio_token(position: int, code: int) -> int:
    """Token id of SNAC `code` (0..4095) at frame position `position` (0..6)."""
    assert 0 <= position < TOKENS_PER_FRAME and 0 <= code < CODEBOOK_SIZE
    return AUDIO_TOKEN_BASE + CODEBOOK_SIZE * position + code


def frame_codes(tokens: Sequence[int]) -> list[list[int]]:
    """Audio tokens of whole frames (7 each) -> each frame's seven SNAC codes in canonical order.

    Raises ValueError naming the first token outside its position's 4096-id range
    (never wraps it into range: a wrong-slot token means the generation went astray).
    """
    assert len(tokens) % TOKENS_PER_FRAME == 0
    codes = np.asarray(tokens, dtype=np.int64).reshape(-1, TOKENS_PER_FRAME) - _OFFSETS
    bad = np.flatnonzero((codes < 0) | (codes >= CODEBOOK_SIZE))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"token {int(tokens[i])} at frame position {i % TOKENS_PER_FRAME} is not an audio token "
                         "of that position")
    return codes[:, _CANONICAL].tolist()
