"""Speech-LM runners' warm-up (engine/runner.py `Runner.warm_up`): their own work run once at load and timed
as their serving paths time it, into their timings, so that a model's first admission decisions use measured
estimates and not the cost model's defaults (engine/cost.py: 10 ms a step, 20 ms a prefill or codec window;
with those an operator trial saw a burst arriving while the embedded voice loaded all admitted, first audio
~44 s later).

Timed: decode steps at the smallest and the largest batch bucket, each at the shortest and the longest
attention length ("step", batch, length); prefills of `PREFILL_TOKENS` padding tokens ("prefill", tokens, 1);
codec windows of zero codes, a first chunk's and the longest a stream decodes ("codec", 1, frames).

Nothing here changes a slot's state, as the CUDA graphs' captures do not: decode steps run with every row
outside the step (the spare KV position, no state advanced), prefills are padding only (the spare KV position
of slot 0; Orpheus: the spare state row), Orpheus' codec is stateless and Qwen3-TTS' decodes through its spare
codec slot. On a GPU the captured graphs replay; a shape that runs eagerly (a CPU, no graph) runs once untimed
first, so its timing leaves out one-off costs (lazy initialisation, compilation). No counter of graph hits
or paths moves.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from engine.chunk_plan import ChunkShape
from engine.plan import Timing
from models.timing import call_ms

if TYPE_CHECKING:
    from models.lm_runner import ModelRunner
    from models.qwen3_tts_runner import Qwen3TTSRunner

log = logging.getLogger(__name__)
PREFILL_TOKENS = (32, 256)  # prompt tokens of the timed prefills: one short prompt; a few packed (PREFILL_BUCKETS)


def guarded(runner: Any, work: Callable[[Any], None]) -> None:
    """`work(runner)` under inference mode, its time logged; a failure is logged (the timings taken before
    it stay, the rest start from defaults) and the model serves as before."""
    t0, before = time.perf_counter(), len(runner._timings)
    try:
        with torch.inference_mode():
            work(runner)
    except Exception:
        log.warning("model %s: its warm-up failed; the estimates it did not time start from defaults",
                    runner.model_id, exc_info=True)
        return
    log.info("model %s: warmed up in %.0f ms (%d timings)", runner.model_id, 1000.0 * (time.perf_counter() - t0),
             len(runner._timings) - before)


def timed_ms(run: Callable[[], object], prime: bool, events: bool = False) -> float:
    """ms of one `run()`: by CUDA events on the current stream (`events`), else the host clock; `prime`:
    run once untimed first (an eager shape's one-off costs)."""
    if prime:
        run()
    return call_ms(run, events)


def step_shapes(smallest: int, largest: int, lengths: Sequence[int]) -> list[tuple[int, int]]:
    """(batch, attention length) of the timed steps: both batches at the shortest and the longest length."""
    return list(dict.fromkeys((b, n) for n in (min(lengths), max(lengths)) for b in (smallest, largest)))


def codec_windows(shape: ChunkShape) -> list[int]:
    """Frames of the timed codec windows: a first chunk's (its frames and right context) and the longest
    window a stream decodes."""
    return sorted({sum(shape.chunk(0)), max(shape.window_lengths())})


def prefill_sizes(max_tokens: int) -> list[int]:
    return [t for t in PREFILL_TOKENS if t <= max_tokens] or [max_tokens]


def warm_up_lm(runner: ModelRunner) -> None:
    """models/lm_runner.py ModelRunner's: steps timed as `_decode` times them (CUDA events on the LM lane on a
    GPU, the host clock around the step on a CPU), prefills as `prefill` (host clock to the first tokens on the
    host), codec windows on the urgent lane (a CPU's: its codec lane) as `decode_windows` (host clock to the PCM
    on the host). Raises RuntimeError if a decode step is in flight (it is for a runner that has not served)."""
    if runner._pending is not None:
        raise RuntimeError("a decode step is in flight: warm-up is for a runner that has not served")
    cuda = runner.torch_device.type == "cuda"
    buckets = runner._batch_buckets + [runner.max_running]
    largest = next(b for b in buckets if b >= runner.max_running)  # a step with the highest slot
    timings = runner._timings
    with runner._on("lm"):
        runner.host_active.zero_()  # every row outside the step: writes the spare position, advances nothing
        for batch, length in step_shapes(min(buckets), largest, runner._length_buckets):
            graph = runner._graphs.get((batch, length))

            def step(graph: Any = graph, batch: int = batch, length: int = length) -> None:
                if graph is not None:
                    graph.replay()
                else:
                    runner._decode_step(batch, length)
            timings.append(Timing("step", batch, length, timed_ms(step, graph is None, cuda)))
        for tokens in prefill_sizes(runner.max_seq_len):
            def prefill(tokens: int = tokens) -> None:
                runner._prefill.run_padding(runner, tokens)
            timings.append(Timing("prefill", tokens, 1, timed_ms(prefill, tokens not in runner._prefill.graphs)))
    lane = "urgent" if "urgent" in runner.codec_graphs else next(iter(runner.codec_graphs))
    graphs, codes_per_frame = runner.codec_graphs[lane], int(runner.codec.codes_per_frame)
    with runner._on(lane):
        for frames in codec_windows(runner.spec.shape):
            def codec(frames: int = frames) -> None:
                codes = torch.zeros(1, frames, codes_per_frame, dtype=torch.int64)
                graphs.decode(codes, torch.zeros(1, dtype=torch.int64)).cpu().numpy()
            timings.append(Timing("codec", 1, frames, timed_ms(codec, not graphs.is_graphed(frames))))


def warm_up_qwen(runner: Qwen3TTSRunner) -> None:
    """models/qwen3_tts_runner.py Qwen3TTSRunner's, each on the host clock as its serving path: frames as
    `decode` (to the codes on the host; through the frame's buffers, else the eager path at top-k
    `frame_graphs.TOP_K`), prefills as `prefill` (to the launch's end, no wait for the device: a GPU's time
    is the next frame's), codec windows as `decode_windows` (to the PCM on the host) through the spare codec
    slot."""
    from models.qwen3_tts_frame_graphs import TOP_K
    from models.qwen3_tts_prefill_graphs import packed_forward

    frame, timings, dev = runner.frame_graphs, runner._timings, runner.torch_device
    for batch, length in step_shapes(1, runner.batch_buckets[-1], runner.length_buckets):
        graphed = frame is not None and (batch, length) in frame.talker_graphs and batch in frame.sample_graphs

        def step(batch: int = batch, length: int = length) -> None:
            if frame is not None:  # no slot in the step: every row writes the spare position
                frame.decode(batch, length, [], [], [])
            else:
                runner._decode_eager([], batch, length, [], [], TOP_K, TOP_K)
        timings.append(Timing("step", batch, length, timed_ms(step, not graphed)))
    graphs, hidden = runner.prefill_graphs, runner.talker.args.hidden_size
    for tokens in prefill_sizes(runner.max_seq_len):
        def prefill(tokens: int = tokens) -> None:
            if graphs is not None and tokens in graphs.buckets:
                graphs.run_padding(tokens)
                return
            zeros = torch.zeros(tokens, dtype=torch.int64, device=dev)  # padding: slot 0's spare position, alone
            packed_forward(runner.talker, torch.zeros(tokens, hidden, dtype=runner.dtype, device=dev), zeros,
                           zeros + runner.max_seq_len, zeros, torch.arange(tokens, device=dev))
        graphed = graphs is not None and tokens in graphs.graphs
        timings.append(Timing("prefill", tokens, 1, timed_ms(prefill, not graphed)))
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)  # (the prefills' device time, not the codec's)
    slots, counts = runner.codec_slots, dict(runner.codec_slots.counts)
    try:
        for frames in codec_windows(runner.spec.shape):
            def codec(frames: int = frames) -> None:
                codes = torch.zeros(1, frames, slots.codes_per_frame, dtype=torch.int64)
                slots.decode(codes, [slots.spare]).cpu().numpy()
            timings.append(Timing("codec", 1, frames, timed_ms(codec, (1, frames) not in slots.graphs)))
    finally:
        slots.counts.update(counts)
