"""models/cuda_graphs.py on a GPU: bodies are warmed up and captured into one pool, a replay
recomputes the static outputs from the static inputs, and a body that cannot be captured
leaves no graph (eager fallback, logged) or raises (without the fallback)."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

from models.cuda_graphs import capture  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_graphs_replay_their_bodies_on_new_inputs() -> None:
    x = torch.zeros(4, 8, device="cuda")
    warmed = []

    def body(scale: float) -> torch.Tensor:
        warmed.append(scale)
        return x * scale + 1

    done = capture([(2, lambda: body(2.0)), (1, lambda: body(1.0))], "cuda", "test graphs")
    assert warmed == [2.0, 1.0, 2.0, 1.0]  # every body once outside capture, then captured, in order
    assert set(done.graphs) == {1, 2} and done.seconds > 0 and done.bytes >= 0
    x.copy_(torch.arange(32, dtype=torch.float32, device="cuda").view(4, 8))
    done.graphs[2].replay()
    done.graphs[1].replay()
    torch.testing.assert_close(done.outputs[2], x * 2 + 1)
    torch.testing.assert_close(done.outputs[1], x + 1)


def test_a_body_that_cannot_be_captured_falls_back_or_raises(caplog: pytest.LogCaptureFixture) -> None:
    x = torch.ones(4, device="cuda")

    def syncs() -> torch.Tensor:
        return x * float(x.sum().item())  # a device-to-host read: illegal while capturing

    stream = torch.cuda.current_stream()
    with caplog.at_level(logging.ERROR, logger="models.cuda_graphs"):
        done = capture([("ok", lambda: x + 1), ("bad", syncs)], "cuda", "test graphs")
    assert done.graphs == {} and done.outputs == {}
    assert torch.cuda.current_stream() == stream  # not the failed capture's side stream
    assert "test graphs could not be captured" in caplog.text
    with pytest.raises(RuntimeError):
        capture([("bad", syncs)], "cuda", "test graphs", eager_fallback=False)
    assert torch.cuda.current_stream() == stream
    torch.cuda.synchronize()  # the device is still usable after a failed capture
    assert float((x + 1).sum()) == 8.0
    # and so is its random generator: a failed capture left it "capturing", and the next draw raised
    # "Offset increment outside graph capture encountered unexpectedly" (a later test file's, here)
    assert torch.rand(4, device="cuda").shape == (4,)
    torch.manual_seed(0)
    first = torch.rand(4, device="cuda")
    torch.manual_seed(0)
    assert torch.equal(torch.rand(4, device="cuda"), first)
