"""Summarise py-spy's collapsed stacks (`py-spy record --format raw --threads`) by thread.

    python bench/profile_summary.py FILE [--top 12]

Each input line is `thread (TID): NAME;frame (file:line);...;frame (file:line) COUNT`
(py-spy's raw format, https://github.com/benfred/py-spy). Per thread name: its samples and share of
all samples; its `self` frames (the innermost frame of each sample: where the time is spent) and
its `ours` frames (the innermost frame of each sample that is in this repository's gateway/,
engine/, models/ or bench/: which of our functions led there), function and file without the line,
each with samples and share of the thread's. Frames of the load (torch.compile, graph capture)
count like the rest: profile a wave of a warm server.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")
_OURS = ("gateway/", "engine/", "models/", "bench/")


def _name(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame.strip())
    return (match["func"], match["file"]) if match else (frame.strip(), "")


def summarize_raw(path: Path, top: int = 12) -> dict:
    """{"samples": N, "threads": {name: {"samples", "share", "self": [[frame, n, share]], "ours": [...]}}}
    from one py-spy raw file; shares are fractions (0-1) of all samples / of the thread's."""
    threads: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    ours: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        head, *frames = stack.split(";")
        thread = head.split(": ", 1)[-1]
        thread = re.sub(r"_\d+$", "_N", thread)  # pool threads by pool
        names = [_name(f) for f in frames]
        leaf = names[-1] if names else ("(no Python frame)", "")
        threads[thread][f"{leaf[0]} ({Path(leaf[1]).name})"] += n
        mine = next((f for f in reversed(names) if any(p in f[1] for p in _OURS)), None)
        ours[thread][f"{mine[0]} ({mine[1].split('/')[-2]}/{Path(mine[1]).name})" if mine else "(none)"] += n
        total += n
    out: dict = {"file": path.name, "samples": total, "threads": {}}
    for thread, counter in sorted(threads.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(counter.values())
        out["threads"][thread] = {
            "samples": n, "share": round(n / max(total, 1), 3),
            "self": [[k, v, round(v / n, 3)] for k, v in counter.most_common(top)],
            "ours": [[k, v, round(v / n, 3)] for k, v in ours[thread].most_common(top)]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=12)
    opts = parser.parse_args()
    summary = summarize_raw(Path(opts.file), opts.top)
    print(f"{summary['samples']} samples in {summary['file']}")
    for thread, entry in summary["threads"].items():
        print(f"\n{thread}: {entry['samples']} ({100 * entry['share']:.1f} %)")
        for label in ("self", "ours"):
            for frame, n, share in entry[label][:opts.top]:
                print(f"  {label:4} {100 * share:5.1f} %  {frame}")


if __name__ == "__main__":
    main()
