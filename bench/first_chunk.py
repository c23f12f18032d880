"""First chunk sooner: how much right context the ramp's chunks need (Orpheus + SNAC).

    python bench/first_chunk.py --out bench/results/first_chunk.json

The ramp's chunks are 1, 2 and 4 frames; with `k` frames of right context (ChunkShape
`ramp_context`) the first can be decoded once 1 + k frames (7 (1 + k) tokens = decode
steps) exist. For each k it streams the ramp's chunks through the real chunk plan
(engine/chunk_plan.py: windows, crops) and compares their 7 frames with the same samples
of a whole-sequence decode (k = 3, SNAC's measured receptive field, is exact): max and
mean absolute deviation, relative to the whole decode's RMS over those frames, and the
signal-to-error ratio in dB, for the first chunk and for all three; chunks after the ramp
keep 3 frames and stay exact (tests/models/test_lm_runner.py). SNAC 24 kHz with random
weights (full size, models/checkpoint.py SNAC_CONFIGS), CPU, float32; --trials random
code sequences of --frames frames.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.chunk_plan import ChunkPlan, ChunkShape  # noqa: E402
from models.checkpoint import SNAC_CONFIGS  # noqa: E402
from models.snac import SAMPLES_PER_FRAME, SnacCodec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--flavor", default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/first_chunk.json")
    opts = parser.parse_args()
    for name in ("trials", "frames"):  # (0 ended in a traceback: found by an operator trial)
        if getattr(opts, name) < 1:
            parser.error(f"--{name} must be at least 1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from snac import SNAC
    torch.manual_seed(opts.seed)
    codec = SnacCodec(SNAC(**SNAC_CONFIGS[opts.flavor]), "cpu", torch.float32)
    generator = torch.Generator().manual_seed(opts.seed)
    results: dict[int, list[tuple[float, ...]]] = {k: [] for k in range(4)}
    start = torch.zeros(1, dtype=torch.int64)
    ramp = 7 * SAMPLES_PER_FRAME  # the ramp's 1 + 2 + 4 frames
    for _ in range(opts.trials):
        codes = torch.randint(0, 4096, (1, opts.frames, 7), generator=generator)
        whole = codec.decode(codes, start)[0, :ramp]
        for k in results:
            plan = ChunkPlan(ChunkShape(ramp=(1, 2, 4, 8), context_frames=3, ramp_context=k), opts.frames, True)
            pieces = []
            while plan.num_emitted < 7:
                window = plan.next_window()
                assert window is not None
                chunk = codec.decode(codes[:, window.start:window.stop], torch.tensor([window.start]))[0]
                pieces.append(chunk[window.crop(SAMPLES_PER_FRAME)])
                plan.advance(window)
            streamed = torch.cat(pieces)[:ramp]
            row = []
            for part in (slice(0, SAMPLES_PER_FRAME), slice(0, ramp)):
                ref, error = whole[part], (streamed[part] - whole[part]).abs()
                rms = float(ref.pow(2).mean().sqrt())
                snr = 10 * torch.log10(ref.pow(2).sum() / error.pow(2).sum().clamp_min(1e-30))
                row += [float(error.max()) / rms, float(error.mean()) / rms, float(snr)]
            results[k].append(tuple(row))
    rows = []
    for k, trials in results.items():
        rows.append({"right_context_frames": k, "decode_steps_before_first_audio": 7 * (1 + k),
                     "first_max_dev_rel_rms": round(max(t[0] for t in trials), 4),
                     "first_mean_dev_rel_rms": round(statistics.mean(t[1] for t in trials), 4),
                     "first_snr_db_median": round(statistics.median(t[2] for t in trials), 1),
                     "ramp_max_dev_rel_rms": round(max(t[3] for t in trials), 4),
                     "ramp_mean_dev_rel_rms": round(statistics.mean(t[4] for t in trials), 4),
                     "ramp_snr_db_median": round(statistics.median(t[5] for t in trials), 1),
                     "ramp_snr_db_min": round(min(t[5] for t in trials), 1)})
    record = {"command": " ".join(["python", *sys.argv]), "device": "cpu", "codec": f"SNAC 24 kHz, random {opts.flavor}",
              "trials": opts.trials, "rows": rows}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"{'ctx':>3} {'steps':>5} | first chunk: {'max dev':>7} {'mean dev':>8} {'SNR dB':>6} | ramp (7 frames): "
          f"{'max dev':>7} {'mean dev':>8} {'SNR med':>7} {'min':>5}")
    for r in rows:
        print(f"{r['right_context_frames']:3d} {r['decode_steps_before_first_audio']:5d} | {r['first_max_dev_rel_rms']:20.4f} "
              f"{r['first_mean_dev_rel_rms']:8.4f} {r['first_snr_db_median']:6.1f} | {r['ramp_max_dev_rel_rms']:23.4f} "
              f"{r['ramp_mean_dev_rel_rms']:8.4f} {r['ramp_snr_db_median']:7.1f} {r['ramp_snr_db_min']:5.1f}")


if __name__ == "__main__":
    main()
