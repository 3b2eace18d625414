"""Voice activity detection on real audio through real sherpa-onnx (Silero VAD and tiny-en).

The audio is the bundled model's own recordings placed at known times between silences, so
where speech is, and where it is not, is known without a detector.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.backends.base import EngineOptions
from streamasr.backends.sherpa.engine import SherpaRecognizer
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.errors import ModelError, UsageError
from streamasr.session.events import Endpoint, Final, FirstToken, StreamSummary
from streamasr.session.stream import StreamOptions, StreamSession
from streamasr.vad import VadFrontEnd, VadOptions, vad_options

REPO = Path(__file__).resolve().parent.parent
WAVS = REPO / "models" / "tiny-en" / "test_wavs"
RATE = 16000
LEAD_S, GAP_S, TAIL_S = 1.5, 2.5, 1.5


def clip(index: int) -> np.ndarray:
    samples, rate = sf.read(str(WAVS / f"{index}.wav"), dtype="float32")
    assert rate == RATE
    return samples


@pytest.fixture(scope="module")
def gappy() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Two clips with silence before, between and after; and where each clip lies (s)."""
    silence = [np.zeros(int(s * RATE), np.float32) for s in (LEAD_S, GAP_S, TAIL_S)]
    first, second = clip(2), clip(3)
    audio = np.concatenate([silence[0], first, silence[1], second, silence[2]])
    a = LEAD_S
    b = LEAD_S + len(first) / RATE + GAP_S
    return audio, [(a, a + len(first) / RATE), (b, b + len(second) / RATE)]


@pytest.fixture(scope="module")
def tiny_en() -> SherpaRecognizer:
    return SherpaRecognizer(resolve_model(str(REPO / "models" / "tiny-en"), None), EngineOptions())


def blocks(audio: np.ndarray, block_s: float) -> list[np.ndarray]:
    size = max(1, int(block_s * RATE))
    return [audio[i : i + size] for i in range(0, len(audio), size)]


_RUNS: dict[tuple[str, VadOptions, float], tuple[list, StreamSummary]] = {}


def run(rec: SherpaRecognizer, audio: np.ndarray, vad: VadOptions, block_s: float = 0.32):
    """Events and summary of one stream (the same audio and options are decoded once)."""
    key = (hashlib.sha256(audio.tobytes()).hexdigest(), vad, block_s)
    if key not in _RUNS:
        session = StreamSession(rec, RATE, "gappy", StreamOptions(block_s=block_s, vad=vad))
        events = list(session.run(blocks(audio, block_s)))
        _RUNS[key] = (events, session.summary())
    return _RUNS[key]


def finals(events: list) -> list[tuple[str, float, float]]:
    return [(e.text, e.start_s, e.end_s) for e in events if isinstance(e, Final)]


def rules(events: list) -> list[str]:
    return [e.rule_hint for e in events if isinstance(e, Endpoint)]


@pytest.mark.parametrize("detector", ["silero", "energy"])
def test_detector_and_gate_do_not_depend_on_feed_block(gappy, detector: str) -> None:
    audio, spans = gappy
    seen = []
    for block_s in (0.01, 0.1, 0.32, 100.0):
        front = VadFrontEnd(VadOptions(detector=detector, gate=True), RATE)
        pieces = [p for b in blocks(audio, block_s) for p in front.accept(b)] + front.finish()
        kept = [(p.start_sample, len(p.samples)) for p in pieces if p.keep]
        merged: list[list[int]] = []
        for start, length in kept:
            if merged and merged[-1][1] == start:
                merged[-1][1] += length
            else:
                merged.append([start, start + length])
        track = front.detector.track
        seen.append((track.starts, track.ends, merged))
        # every input sample comes out once, in order
        assert sum(len(p.samples) for p in pieces) == len(audio)
        assert [p.start_sample for p in pieces] == sorted(p.start_sample for p in pieces)
    assert all(s == seen[0] for s in seen)
    starts, ends, merged = seen[0]
    assert len(starts) == len(ends) == 2
    for start, end, (clip_start, clip_end) in zip(starts, ends, spans, strict=True):
        assert clip_start <= start < clip_start + 0.5
        assert clip_end - 0.6 < end.end_s <= clip_end
        assert end.decided_s >= end.end_s
    assert len(merged) == 2  # the gap between the clips is skipped


def test_stream_with_vad_does_not_depend_on_feed_block(tiny_en, gappy) -> None:
    audio, _ = gappy
    vad = VadOptions(detector="silero", end_rule=True, gate=True)
    results = []
    for block_s in (0.01, 0.32, 100.0):
        events, _ = run(tiny_en, audio, vad, block_s)
        results.append((finals(events), rules(events)))
    assert results[0][0], "no final at all"
    assert all(r == results[0] for r in results)


def test_gate_skips_silence_and_keeps_true_audio_times(tiny_en, gappy) -> None:
    audio, spans = gappy
    plain_events, plain = run(tiny_en, audio, VadOptions(detector="silero"))
    gated_events, gated = run(tiny_en, audio, VadOptions(detector="silero", gate=True))
    silence_s = LEAD_S + GAP_S + TAIL_S
    # most of the placed silence is skipped, and little more (the clips' own quiet edges)
    assert 0.6 * silence_s < gated.skipped_s < silence_s + 0.5
    assert plain.skipped_s == 0
    assert gated.audio_s == plain.audio_s == pytest.approx(len(audio) / RATE)
    gated_finals = finals(gated_events)
    assert len(gated_finals) == 2
    assert "vad_gate" in rules(gated_events)
    for (_, start, end), (clip_start, clip_end) in zip(gated_finals, spans, strict=True):
        # input time: inside the clip, not the time in the shortened stream
        assert clip_start - 0.1 <= start < end <= clip_end + 0.1
    # the same words are placed at the same input times with or without the gate
    plain_by_text = {text: (start, end) for text, start, end in finals(plain_events)}
    for text, start, end in gated_finals:
        if text in plain_by_text:
            assert abs(start - plain_by_text[text][0]) <= 0.2
            assert abs(end - plain_by_text[text][1]) <= 0.2


def test_vad_end_rule_fires_sooner_than_rule2_and_is_named(tiny_en, gappy) -> None:
    audio, _ = gappy
    rule2_events, _ = run(tiny_en, audio, VadOptions(detector="silero"))
    vad_events, _ = run(tiny_en, audio, VadOptions(detector="silero", end_rule=True))
    assert rules(rule2_events) and set(rules(rule2_events)) == {"rule2"}
    assert rules(vad_events) and set(rules(vad_events)) == {"vad"}
    first_rule2 = next(e for e in rule2_events if isinstance(e, Final))
    first_vad = next(e for e in vad_events if isinstance(e, Final))
    assert first_vad.text == first_rule2.text
    assert first_vad.audio_s < first_rule2.audio_s  # the final came with less audio heard


def test_first_token_is_timed_from_the_vad_onset(tiny_en, gappy) -> None:
    audio, spans = gappy
    events, _ = run(tiny_en, audio, VadOptions(detector="silero"))
    firsts = [e for e in events if isinstance(e, FirstToken)]
    assert [e.onset_source for e in firsts] == ["silero_vad", "silero_vad"]
    for event, (clip_start, clip_end) in zip(firsts, spans, strict=True):
        assert clip_start <= event.onset_s < clip_end
        assert event.latency_s == pytest.approx(event.audio_s - event.onset_s, abs=1e-3)
    off_events, _ = run(tiny_en, audio, VadOptions(detector="off"))
    assert {e.onset_source for e in off_events if isinstance(e, FirstToken)} <= {
        "segment_start", "text_before_onset"
    }


def test_silence_only_gives_no_speech_and_no_text(tiny_en) -> None:
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(4 * RATE) * 1e-3).astype(np.float32)  # -60 dBFS hiss
    for audio in (np.zeros(4 * RATE, np.float32), quiet):
        events, summary = run(tiny_en, audio, VadOptions(detector="silero", gate=True))
        assert finals(events) == [] and summary.text == ""
        assert summary.skipped_s == pytest.approx(len(audio) / RATE)


def test_speech_only_is_fed_whole(tiny_en) -> None:
    audio = clip(0)
    front = VadFrontEnd(VadOptions(detector="silero", gate=True), RATE)
    pieces = front.accept(audio) + front.finish()
    assert front.detector.track.starts and front.detector.track.starts[0] < 0.5
    events, summary = run(tiny_en, audio, VadOptions(detector="silero", gate=True))
    assert summary.skipped_s < 0.5  # at most the clip's own leading breath of silence
    assert "vad_gate" not in rules(events)
    assert summary.text
    assert sum(len(p.samples) for p in pieces if p.keep) > 0.8 * len(audio)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(WAVS / "0.wav"), *args],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )


@pytest.mark.parametrize("kind", ["missing", "corrupt"])
def test_bad_vad_model_is_one_line_in_a_fresh_process(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "vad.onnx"
    if kind == "corrupt":
        path.write_bytes(np.random.default_rng(1).bytes(4096))
    result = cli("--vad", "silero", "--vad-model", str(path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: VAD model"), result.stderr
    assert "--vad-model" in lines[0] and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_an_onnx_file_that_is_not_silero_is_refused_before_loading() -> None:
    # sherpa-onnx would end the process on it; the graph's inputs are read first
    model = REPO / "models" / "tiny-random-transducer"
    path = model / "joiner-epoch-0-avg-1-chunk-16-left-64.onnx"
    with pytest.raises(ModelError, match="not Silero's .input, state, sr.; pass --vad-model"):
        vad_options("silero", False, False, str(path))


def test_vad_options_misuse_is_a_usage_error() -> None:
    result = cli("--vad", "off", "--vad-gate")  # in a fresh process: one line, exit 2
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--vad silero" in lines[0]
    for args in (("webrtc", False, False, None), ("off", True, False, None),
                 ("energy", False, False, "x.onnx")):
        with pytest.raises(UsageError, match="--vad"):
            vad_options(*args)
