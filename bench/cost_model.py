"""Measure an LM runner's cost model (engine/cost.py) on its device, for the simulator.

    python bench/orpheus_serve.py --sessions 16,64 --arrival poisson \
        --cost-out bench/results/cost_orpheus_h200.json      # measures first, with the same runner

`measure(runner)` times, with CUDA events (host clock + sync on a CPU), the three things a
plan executes: a decode step by (batch bucket, attention length bucket) replaying the
runner's own CUDA graphs from a state where every row is mid-utterance; a packed prefill by
prompt tokens (one prompt, and four of a quarter each); a codec call by (batch, window
frames) through the runner's codec graphs, PCM copied to the host as `decode_codec` does.
Each figure is the median of `iters` runs after warm-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.timing import median_ms
from engine.cost import CostModel
from models.lm_runner import ModelRunner
from engine.request import Prepared, Request, Sampling
from engine.types import SpeechRequest

BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
LENGTHS = (256, 512, 1024, 2048)
PROMPT_TOKENS = (16, 32, 64, 128, 256, 512, 1024)
CODEC_BATCHES = (1, 2, 4, 8, 16, 32)


def _request(rid: str, slot: int, prompt: int, runner: ModelRunner) -> Request:
    spec = SpeechRequest(rid, runner.model_id, ("x",), runner.spec.voices[0])
    sampling = Sampling(0.6, 0.8, 1.1, seed=slot, max_tokens=1 << 20, force_tokens=1 << 20)
    request = Request.create(spec, Prepared(tuple(range(1, prompt + 1)), sampling=sampling), runner.spec.shape)
    request.slot, request.max_tokens = slot, 1 << 20
    return request


@torch.inference_mode()
def measure(runner: ModelRunner, iters: int = 20) -> CostModel:
    cuda = runner.torch_device.type == "cuda"
    cost = CostModel()
    cost.source = "bench/cost_model.py"
    for batch in [b for b in BATCHES if b <= runner.max_running]:
        for length in [n for n in runner._length_buckets if n in LENGTHS or n == runner._length_buckets[-1]]:
            runner.positions.fill_(length - 64)
            runner.stopped.zero_()
            runner.host_active.zero_()
            runner.host_active[:batch] = True
            runner.forced.fill_(True)
            runner.max_tokens.fill_(1 << 30)
            bucket = next(b for b in runner._batch_buckets + [runner.max_running] if b >= batch)
            ms = median_ms(lambda: runner._launch_decode(bucket, length), iters, cuda=cuda)
            cost.step_ms.observe(batch, length, ms, average=False)
    for tokens in [t for t in PROMPT_TOKENS if t < runner.max_seq_len]:
        for parts in (1, 4) if tokens >= 64 and runner.max_running >= 4 else (1,):  # a slot a prompt
            group = [_request(f"p{i}", i, tokens // parts, runner) for i in range(parts)]
            ms = median_ms(lambda: runner.prefill(group), max(5, iters // 2), cuda=cuda)
            cost.prefill_ms.observe(tokens, 1, ms, average=False)
    shape = runner.spec.shape
    for frames in sorted(set(shape.window_lengths()) | {max(shape.ramp) + shape.context_frames}):
        for batch in [b for b in CODEC_BATCHES if b <= runner.max_codec_batch]:
            codes = torch.randint(0, 4096, (batch, frames, runner.codec.codes_per_frame))
            starts = torch.randint(0, 500, (batch,))
            graphs = runner.codec_graphs.get("background") or next(iter(runner.codec_graphs.values()))
            ms = median_ms(lambda: graphs.decode(codes, starts).cpu(), iters, cuda=cuda)
            cost.codec_ms.observe(batch, frames, ms, average=False)
    runner.take_timings()  # what prefill() recorded while being measured
    return cost


def save(cost: CostModel, path: str, device: str, command: str) -> None:
    record = {"gpu": device, "command": command, "source": cost.source, "torch": torch.__version__,
              **cost.to_json()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1))
    step = {(a, b): ms for a, b, ms in record["step_ms"]}
    print(f"cost model ({device}) -> {path}")
    print("step ms by batch at context 512:", {int(a): round(ms, 2) for (a, b), ms in step.items() if b == 512})
    print("prefill ms by tokens:", {int(a): round(ms, 1) for a, _, ms in record["prefill_ms"]})
