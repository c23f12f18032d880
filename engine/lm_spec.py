"""What a speech-LM family tells the runner, and per-request sampling options.

No torch here: `LMSpec` is plain data and callables from the family module
(models/orpheus.py builds one in `load`), `parse_options` validates
`SpeechRequest.options` before a request is queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from engine.types import InvalidInput


@dataclass(frozen=True, slots=True)
class LMSpec:
    """What a family tells the runner about its prompt, tokens and defaults."""

    family: str
    voices: tuple[str, ...]  # default first
    encode: Callable[[str, str], list[int]]  # (voice, text) -> prompt token ids
    frame_codes: Callable[[Sequence[int]], list[int]]  # one frame of tokens -> codes; ValueError if bad
    stop_token_ids: tuple[int, ...]
    tokens_per_frame: int
    audio_token_base: int  # id of code 0 at frame position 0
    codebook_size: int  # id offset between frame positions
    temperature: float
    top_p: float
    repetition_penalty: float
    max_tokens: int
    max_text_chars: int


def parse_options(spec: LMSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """Sampling settings from a request's `options` over the family defaults; raises InvalidInput.

    Keys: temperature, top_p, repetition_penalty, max_tokens, seed, force_tokens (generate
    exactly this many audio tokens, stop token ignored and each token drawn from its frame
    position's 4096 audio ids: for benchmarks on random weights). Unknown keys are ignored.
    """
    out: dict[str, Any] = {"temperature": spec.temperature, "top_p": spec.top_p,
                           "repetition_penalty": spec.repetition_penalty, "max_tokens": spec.max_tokens,
                           "force_tokens": 0, "seed": None}
    checks: dict[str, tuple[type, Callable[[Any], bool], str]] = {
        "temperature": (float, lambda v: 0 <= v <= 5, "between 0 and 5"),
        "top_p": (float, lambda v: 0 < v <= 1, "in (0, 1]"),
        "repetition_penalty": (float, lambda v: 0 < v <= 5, "in (0, 5]"),
        "max_tokens": (int, lambda v: v >= 1, ">= 1"),
        "force_tokens": (int, lambda v: v >= 1, ">= 1"),
        "seed": (int, lambda v: 0 <= v < 2**62, "in [0, 2**62)"),
    }
    for name, (kind, ok, rule) in checks.items():
        if options.get(name) is None:
            continue
        try:
            value = kind(options[name])
        except (TypeError, ValueError):
            raise InvalidInput(f"options.{name} must be a number {rule}", field=f"options.{name}") from None
        if not ok(value):
            raise InvalidInput(f"options.{name} must be {rule}, got {value}", field=f"options.{name}")
        out[name] = value
    return out
