"""The cost model (engine/cost.py): learning, interpolation, JSON round trip."""

from __future__ import annotations

from engine.cost import CostModel, snap


def test_an_empty_table_answers_its_default_and_learns_from_observations() -> None:
    cost = CostModel(step_ms=7.0)
    assert cost.step_ms(8, 512) == 7.0
    cost.observe("step", 8, 512, 4.0)
    assert cost.step_ms(8, 512) == 4.0
    cost.observe("step", 8, 512, 9.0)
    assert 4.0 < cost.step_ms(8, 512) < 9.0  # a moving average, not the last value


def test_lookups_interpolate_between_observed_keys_and_grow_past_the_largest() -> None:
    cost = CostModel()
    for batch, ms in ((1, 3.0), (64, 5.0)):
        for context in (512, 1024):
            cost.observe("step", batch, context, ms + (context == 1024))
    assert 3.0 < cost.step_ms(32, 512) < 5.0
    assert cost.step_ms(1, 768) == 3.5  # halfway between the two contexts
    assert cost.step_ms(256, 512) > 5.0  # extrapolated, never below the largest
    cost.observe("prefill", 64, 1, 10.0)
    cost.observe("prefill", 256, 1, 30.0)
    assert cost.prefill_ms(128) == 10.0 + 20.0 * 64 / 192
    assert cost.prefill_ms(16) == 10.0  # below the smallest: the smallest


def test_json_round_trip_and_grid_snapping() -> None:
    cost = CostModel()
    cost.observe("codec", 4, 11, 2.5)
    cost.observe("step", 33, 600, 4.0)
    again = CostModel.from_json({**cost.to_json(), "gpu": "H200", "command": "x"})
    assert again.to_json() == cost.to_json() and again.codec_ms(4, 12) == 2.5
    assert [snap(v) for v in (0.5, 1, 5.2, 7.5, 33, 600)] == [1.0, 1.0, 6.0, 8.0, 32.0, 512.0]
