import pytest

torch = pytest.importorskip("torch")

from models.sampling import sample, uniform  # noqa: E402


def _rows(n: int, vocab: int, **values: float) -> dict[str, torch.Tensor]:
    return {"temperature": torch.full((n,), values.get("temperature", 1.0)),
            "top_p": torch.full((n,), values.get("top_p", 1.0)),
            "penalty": torch.full((n,), values.get("penalty", 1.0)),
            "seen": torch.zeros(n, vocab, dtype=torch.bool),
            "seeds": torch.arange(n, dtype=torch.int64), "steps": torch.zeros(n, dtype=torch.int64)}


def test_uniform_is_strictly_inside_zero_one_and_depends_on_seed() -> None:
    u = uniform(torch.arange(64, dtype=torch.int64), torch.arange(64, dtype=torch.int64), torch.arange(4096))
    assert float(u.min()) > 0 and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.01
    assert not torch.equal(u[0], u[1])
    ids = torch.tensor([[5, 9], [9, 5]])  # noise belongs to the token id, not its column
    v = uniform(torch.tensor([3, 3]), torch.tensor([1, 1]), ids)
    assert v[0, 0] == v[1, 1] and v[0, 1] == v[1, 0]


def test_sampling_follows_the_distribution() -> None:
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    logits = probs.clamp_min(1e-30).log().expand(4000, 4)
    picks = sample(logits, **_rows(4000, 4))
    counts = torch.bincount(picks, minlength=4).float() / 4000
    assert torch.allclose(counts, probs, atol=0.03)


def test_top_p_greedy_and_repetition_penalty() -> None:
    logits = torch.tensor([[2.0, 1.9, -1.0, -5.0]]).expand(500, 4)
    top = sample(logits, **_rows(500, 4, top_p=0.5))
    assert set(top.tolist()) == {0}  # token 0 alone reaches half the mass
    greedy = sample(logits, **_rows(500, 4, temperature=0.0))
    assert set(greedy.tolist()) == {0}
    rows = _rows(1, 4, temperature=0.0, penalty=1.2)
    rows["seen"][0, 0] = True  # 2.0 / 1.2 < 1.9
    assert sample(logits[:1], **rows).tolist() == [1]
    capped = sample(logits[:1], **_rows(1, 4, temperature=0.0), max_candidates=2)
    assert capped.tolist() == [0]
    allowed = torch.tensor([[False, False, True, True]])
    assert sample(logits[:1], **_rows(1, 4, temperature=0.0), allowed=allowed).tolist() == [2]
