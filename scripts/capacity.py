#!/usr/bin/env python3
"""The full-size capacity figure of docs/performance.md and the README, in one command:

    python scripts/capacity.py

Builds what is missing (the full-size random-weight export with make_test_models.py --size
full, a 16-utterance espeak-ng set with make_dataset.py), then runs streamasr's own capacity
mode on the int8 chunk-16 export, one single-thread engine per core:

    streamasr bench build/capacity-ds/manifest.jsonl --model build/full/full-random-en \\
        --chunk 16 --threads 1 --workers $(nproc) --capacity --out build/capacity

and prints its table, with the CPU model and the load average in build/capacity/results.json.
Run it on an idle machine: other work takes cores from the streams. Extra arguments go to
`streamasr bench` (e.g. `--streams 32,48,56` to probe given counts, `--probe-seconds 30`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "build" / "full" / "full-random-en"
DATASET = ROOT / "build" / "capacity-ds"
OUT = ROOT / "build" / "capacity"


def main(extra: list[str]) -> int:
    if not (MODEL / "tokens.txt").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_test_models.py"),
                        "--size", "full"], check=True)
    if not (DATASET / "manifest.jsonl").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_dataset.py"), "--out",
                        str(DATASET), "--n", "16", "--seed", "1"], check=True)
    print(f"1-minute load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    command = [
        sys.executable, "-m", "streamasr", "bench", str(DATASET / "manifest.jsonl"),
        "--model", str(MODEL), "--chunk", "16", "--threads", "1",
        "--workers", str(len(os.sched_getaffinity(0))), "--capacity", "--out", str(OUT),
        *extra,
    ]
    return subprocess.run(command, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
