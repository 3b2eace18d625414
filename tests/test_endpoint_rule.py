"""The endpoint event names the rule that fired, in JSONL and in the library's event.

Real engines on the bundled models: `streamasr file` in a fresh process (sherpa-onnx,
tiny-en) and the library face on NeMo (tiny-nemo-streaming). The rules are set so that one
of them must fire, and the figures of each utterance are checked against its rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import streamasr
from streamasr.audio import FileSource
from streamasr.backends.base import EndpointOptions
from streamasr.session.events import Endpoint, Final
from streamasr.session.stream import StreamOptions

ROOT = Path(__file__).resolve().parents[1]
WAV = ROOT / "models" / "tiny-en" / "test_wavs" / "0.wav"
NEMO = ROOT / "models" / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"


def _jsonl(*rules: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(WAV), "-m", str(WAV.parents[1]),
         "-f", "jsonl", *rules],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _endpoints_before_finals(records: list[dict]) -> list[dict]:
    """Every endpoint, each checked to be followed at once by its final."""
    endpoints = []
    for index, record in enumerate(records):
        if record["type"] == "endpoint":
            assert records[index + 1]["type"] == "final" and records[index + 1]["text"]
            endpoints.append(record)
    return endpoints


def test_jsonl_endpoint_says_rule2_after_a_short_trailing_silence() -> None:
    endpoints = _endpoints_before_finals(_jsonl("--rule2", "0.2"))
    assert len(endpoints) >= 2
    assert {e["rule_hint"] for e in endpoints} == {"rule2"}


def test_jsonl_endpoint_says_rule3_when_utterances_reach_the_length_limit() -> None:
    records = _jsonl("--rule2", "30", "--rule3", "1.0")
    endpoints = _endpoints_before_finals(records)
    assert endpoints and {e["rule_hint"] for e in endpoints} == {"rule3"}
    starts = [0.0] + [e["audio_s"] for e in endpoints[:-1]]
    for start, endpoint in zip(starts, endpoints, strict=True):
        assert endpoint["audio_s"] - start >= 1.0 - 1e-6  # at least --rule3 s of audio in it


def test_library_endpoint_event_names_the_rule_on_nemo() -> None:
    rules = EndpointOptions(rule2_s=30.0, rule3_s=1.0)
    model = streamasr.open_model(
        str(NEMO), att_context_size="70,1", stream_options=StreamOptions(endpoint=rules)
    )
    source = FileSource(str(WAV))
    try:
        events = list(model.stream(source.blocks(0.1), source.sample_rate))
    finally:
        source.close()
    endpoints = [e for e in events if isinstance(e, Endpoint)]
    assert endpoints and {e.rule_hint for e in endpoints} == {"rule3"}
    for endpoint in endpoints:
        after = events[events.index(endpoint) + 1]
        assert isinstance(after, Final) and after.text
