"""Choose the GPU lanes' SM split (engine/lanes.py): decode and codec alone and side by side.

    python bench/orpheus_serve.py ... --lanes-out bench/results/lanes_h200.json   # same runner

For each split (LM SMs / background-codec SMs; 0/0: no partition, plain streams with
priorities), with CUDA events: a decode step at batch 64, context 512 (the LM lane's
graph); a background codec batch of 32 windows of 14 frames (its lane's graph); both alone,
then both at once from two threads (each lane has its launching thread), `iters` each. The
split to choose keeps the decode step near its time alone while the codec still keeps up:
the notes beside the results say which was chosen and why.
"""

from __future__ import annotations

import json
import statistics
import threading
from pathlib import Path

import torch

from bench.timing import times_ms
from engine.lanes import GpuLanes
from models.lm_runner import ModelRunner

SPLITS = ((0, 0), (116, 16), (100, 32), (84, 48))


@torch.inference_mode()
def profile(runner: ModelRunner, iters: int = 30, batch: int = 64, codec_batch: int = 32) -> list[dict]:
    runner.positions.fill_(512 - 64)
    runner.host_active.zero_()
    runner.host_active[:batch] = True
    runner.forced.fill_(True)
    runner.max_tokens.fill_(1 << 30)
    bucket = next(b for b in runner._batch_buckets if b >= batch)
    length = next(n for n in runner._length_buckets if n >= 512)
    graphs = runner.codec_graphs["background"]
    codes = torch.randint(0, 4096, (codec_batch, 14, runner.codec.codes_per_frame))
    starts = torch.randint(0, 500, (codec_batch,))
    decode = lambda: runner._launch_decode(bucket, length)  # noqa: E731
    codec = lambda: graphs.decode(codes, starts)  # noqa: E731
    rows = []
    for lm_sms, codec_sms in SPLITS:
        try:
            lanes = GpuLanes(runner.torch_device, lm_sms, codec_sms)
        except Exception as error:  # noqa: BLE001 - report and go on
            rows.append({"lm_sms": lm_sms, "codec_sms": codec_sms, "error": repr(error)[:200]})
            continue
        lm, bg = lanes.streams["lm"], lanes.streams["background"]
        alone = (statistics.median(times_ms(decode, iters, stream=lm)),
                 statistics.median(times_ms(codec, iters, stream=bg)))
        together: dict[str, list[float]] = {}
        threads = [threading.Thread(target=lambda: together.setdefault("decode", times_ms(decode, iters, stream=lm))),
                   threading.Thread(target=lambda: together.setdefault("codec", times_ms(codec, iters // 3, stream=bg)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rows.append({"lm_sms": lanes.sms["lm"], "codec_sms": lanes.sms["background"], "partitioned": lm_sms > 0,
                     "decode_ms_alone": round(alone[0], 3), "codec_ms_alone": round(alone[1], 3),
                     "decode_ms_with_codec": round(statistics.median(together["decode"]), 3),
                     "codec_ms_with_decode": round(statistics.median(together["codec"]), 3)})
    return rows


def save(rows: list[dict], path: str, device: str, command: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"gpu": device, "command": command, "rows": rows}, indent=1))
    print(f"{'lm SMs':>6} {'codec SMs':>9} {'decode':>7} {'w/ codec':>8} {'codec':>7} {'w/ decode':>9}")
    for r in rows:
        if "error" in r:
            print(r)
            continue
        print(f"{r['lm_sms']:6d} {r['codec_sms']:9d} {r['decode_ms_alone']:7.3f} {r['decode_ms_with_codec']:8.3f} "
              f"{r['codec_ms_alone']:7.3f} {r['codec_ms_with_decode']:9.3f}")
