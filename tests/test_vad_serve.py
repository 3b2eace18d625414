"""`streamasr serve --vad silero --vad-end`: a real server's sessions get the VAD's onsets and
its end rule, the same events as the library with the same options (the clocks aside)."""

from __future__ import annotations

import numpy as np
import soundfile as sf
from serve_fixture import REPO, clip, comparable, serve

import streamasr
from streamasr.session.stream import StreamOptions
from streamasr.vad import VadOptions


def test_served_sessions_use_the_vad_like_the_library() -> None:
    audio, rate = sf.read(REPO / clip(3), dtype="float32")
    silence = np.zeros(rate, np.float32)
    audio = np.concatenate([silence, audio, silence, silence])
    vad = VadOptions(detector="silero", end_rule=True)
    local_model = streamasr.open_model("tiny-en", stream_options=StreamOptions(vad=vad))
    chunk = round(local_model.session(rate).block_s * rate)
    blocks = [audio[start : start + chunk] for start in range(0, len(audio), chunk)]
    local = [event.to_dict() for event in local_model.stream(blocks, rate, "vad")]
    with serve("--vad", "silero", "--vad-end") as server, streamasr.connect(server.url) as remote:
        events = [event.to_dict() for event in remote.stream(blocks, rate, "vad")]
    firsts = [e for e in events if e["type"] == "first_token"]
    assert firsts and {e["onset_source"] for e in firsts} == {"silero_vad"}
    assert 1.0 <= firsts[0]["onset_s"] < 1.5  # the clip starts after 1 s of silence
    assert "vad" in [e["rule_hint"] for e in events if e["type"] == "endpoint"]
    assert comparable(events) == comparable(local)
