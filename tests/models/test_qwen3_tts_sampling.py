"""models/qwen3_tts_sampling.py: top-k, top-p, penalty and masks per row, reproducible per seed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from models.qwen3_tts_sampling import sample_codes  # noqa: E402


def _draw(logits: torch.Tensor, seeds: range, temperature: float = 1.0, top_k: int = 2048,
          top_p: float = 1.0) -> list[int]:
    """One draw per seed for a single row of `logits` `[V]`."""
    n = len(seeds)
    picked = sample_codes(logits.expand(n, -1), torch.full((n,), temperature), torch.full((n,), top_k),
                          torch.full((n,), top_p), torch.tensor(list(seeds)), torch.zeros(n, dtype=torch.int64), top_k)
    result: list[int] = picked.tolist()
    return result


def test_top_k_keeps_the_k_most_likely_and_samples_among_them() -> None:
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    top3 = set(logits.topk(3).indices.tolist())
    drawn = _draw(logits, range(300), top_k=3)
    assert set(drawn) == top3  # each of the three, nothing else
    assert set(_draw(logits, range(50), top_k=1)) == {int(logits.argmax())}
    assert len(set(_draw(logits, range(300)))) > 10  # no top-k: the whole vocabulary
    assert _draw(logits, range(20), top_k=3) == drawn[:20]  # a pure function of the seed


def test_each_row_has_its_own_settings_penalty_and_mask() -> None:
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0]])
    seen = torch.tensor([[True, False, False, False], [False] * 4, [False] * 4])
    allowed = torch.tensor([[True] * 4, [True] * 4, [False, False, True, True]])
    greedy = sample_codes(logits, torch.zeros(3), torch.full((3,), 4), torch.ones(3), torch.zeros(3, dtype=torch.int64),
                          torch.zeros(3, dtype=torch.int64), 4, penalty=torch.full((3,), 2.0), seen=seen,
                          allowed=allowed)
    assert greedy.tolist() == [1, 0, 2]  # 3 / 2 < 2: the seen id loses; the mask wins over the logits
    # top-p 0.5 keeps only the first id of a peaked row
    peaked = torch.tensor([10.0, 0.0, 0.0, 0.0])
    assert set(_draw(peaked, range(100), top_p=0.5)) == {0}
