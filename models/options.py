"""A speech-LM request's sampling options, validated before it is queued (no torch).

Family modules call `parse_options` in their `prepare`; the engine only reads the
resulting `engine.request.Sampling`.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Sequence

from engine.lm_spec import LMSpec
from engine.request import Sampling
from engine.types import InputTooLong, InvalidInput, SpeechRequest, UnknownVoice

_CHECKS: dict[str, tuple[type, Callable[[Any], bool], str]] = {
    "temperature": (float, lambda v: 0 <= v <= 5, "between 0 and 5"),
    "top_p": (float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "repetition_penalty": (float, lambda v: 0 < v <= 5, "in (0, 5]"),
    "max_tokens": (int, lambda v: v >= 1, ">= 1"),
    "force_tokens": (int, lambda v: v >= 1, ">= 1"),
    "seed": (int, lambda v: 0 <= v < 2**62, "in [0, 2**62)"),
}


def parse_options(spec: LMSpec, options: Mapping[str, Any]) -> Sampling:
    """Sampling settings from a request's `options` over the family defaults; raises InvalidInput.

    Keys: temperature, top_p, repetition_penalty, max_tokens, seed (default: random),
    force_tokens (see `Sampling`). Unknown keys are ignored.
    """
    out: dict[str, Any] = {"temperature": spec.temperature, "top_p": spec.top_p,
                           "repetition_penalty": spec.repetition_penalty, "max_tokens": spec.max_tokens,
                           "force_tokens": 0, "seed": None}
    for name, (kind, ok, rule) in _CHECKS.items():
        if options.get(name) is None:
            continue
        try:
            if isinstance(options[name], bool):
                raise TypeError
            value = kind(options[name])
        except (TypeError, ValueError):
            raise InvalidInput(f"options.{name} must be a number {rule}", field=f"options.{name}") from None
        if not ok(value):
            raise InvalidInput(f"options.{name} must be {rule}, got {value}", field=f"options.{name}")
        out[name] = value
    if out["seed"] is None:
        out["seed"] = random.randrange(2**62)
    return Sampling(**out)


def check_request(request: SpeechRequest, voices: Sequence[str], max_chars: int) -> None:
    """What every speech-LM family's `prepare` checks first: a known voice (UnknownVoice, field
    `voice`), something to speak and at most `max_chars` characters (InvalidInput, InputTooLong,
    field `input`)."""
    if request.voice not in voices:
        raise UnknownVoice(f"model {request.model_id!r} has no voice {request.voice!r}; "
                           f"voices: {', '.join(voices)}", field="voice")
    if not request.text.strip():
        raise InvalidInput("nothing to speak", field="input")
    if len(request.text) > max_chars:
        raise InputTooLong(f"input has {len(request.text)} characters; the limit is {max_chars}", field="input")
