"""`voxgate checkpoint random`: a random checkpoint in a family's on-disk format (models/checkpoint.py), for
tests and benchmarks; a folder it made is removed again when the write fails or is interrupted."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def checkpoint(args: argparse.Namespace) -> int:
    try:
        from models.checkpoint import write_random
    except ImportError as error:
        print(f"error: random checkpoints need the package {error.name!r}; install it with: "
              "pip install '.[lm]' in Voxgate's source folder (on a CPU-only machine, torch's CPU build first)",
              file=sys.stderr)
        return 2
    target = Path(args.dir)
    if target.exists() and not target.is_dir():
        print(f"error: {target} is a file, not a folder; give a folder to write the checkpoint in", file=sys.stderr)
        return 2
    if target.is_dir() and any(target.iterdir()) and not args.force:
        print(f"error: {target} exists and is not empty (a model may live there); pass --force to write over it",
              file=sys.stderr)
        return 2
    if not 0 <= args.seed < 2 ** 63:  # (torch's own refusal, "Overflow when unpacking long long", names nothing)
        print(f"error: --seed must be 0 to {2 ** 63 - 1}, got {args.seed}", file=sys.stderr)
        return 2
    created = not target.exists()
    try:
        out = write_random(args.family, args.size, target, seed=args.seed, model_type=args.type)
    except (ValueError, RuntimeError) as error:  # a size the family does not have; a seed torch refuses
        if created:  # (raised once the folders were made)
            shutil.rmtree(target, ignore_errors=True)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a folder that cannot be made or written, a full disk
        if created:  # nothing half-written is left behind
            shutil.rmtree(target, ignore_errors=True)
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: cannot write the checkpoint to {target}: {error.strerror or error}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, and no half-written folder (a full one takes minutes)
        if created:
            shutil.rmtree(target, ignore_errors=True)
            print(f"interrupted; removed the partial checkpoint {target}", file=sys.stderr)
        else:  # (--force: what was there stays)
            print(f"interrupted; {target} holds an incomplete checkpoint now: run the same command again to "
                  "finish it", file=sys.stderr)
        return 130
    kind = f" {args.type}" if args.type else ""
    print(f"wrote a random {args.size}{kind} {args.family} checkpoint to {out}")
    return 0
