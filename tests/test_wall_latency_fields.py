"""Which latency fields `streamasr file --format jsonl` carries, paced and unpaced.

Why: decoded as fast as possible, audio reaches the engine long before a live user could
have spoken it, so a wall-clock "latency" is meaningless (it used to be negative). It must
be null unless the run is paced (`--realtime`); the algorithmic figures are always there
and never negative. Each run is a fresh `python -m streamasr.cli` process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "models" / "tiny-en" / "test_wavs" / "4.wav"


def jsonl(*extra: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", str(SAMPLE), "-f", "jsonl", *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("paced", [False, True])
def test_wall_latency_only_under_real_time_pacing(paced: bool) -> None:
    records = jsonl(*(["--realtime"] if paced else []))
    firsts = [r for r in records if r["type"] == "first_token"]
    (summary,) = [r for r in records if r["type"] == "summary"]
    assert firsts and summary["text"]
    for first in firsts:
        assert first["onset_source"] in ("detected", "segment_start", "text_before_onset")
        assert first["latency_s"] >= 0 and first["onset_s"] <= first["audio_s"]
        assert first["latency_s"] == pytest.approx(first["audio_s"] - first["onset_s"], abs=1e-3)
        if paced:
            # a paced block arrives no earlier than its audio: the wait includes the audio
            assert first["wall_latency_s"] >= first["latency_s"] - 1e-3
        else:
            assert first["wall_latency_s"] is None
    assert summary["first_token_latency_s"] == firsts[0]["latency_s"]
    if paced:
        assert summary["first_token_wall_latency_s"] == firsts[0]["wall_latency_s"]
    else:
        assert summary["first_token_wall_latency_s"] is None
