"""Mandarin and mixed speech end to end on the random character, mixed and byte-level models.

The clips are espeak-ng Mandarin (tests/data/zh, text in trans.txt). Random weights make the
text meaningless, so these tests check the plumbing exactly: whole characters everywhere
(partials, finals, JSONL, SRT, bench), the spacing rule, the same text whatever the feed
block, bench's hypothesis equal to `file`'s text, and the metric chosen from the model.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
ZH = ROOT / "tests" / "data" / "zh"
CLIPS = (ZH / "zh-weather.wav", ZH / "zh-en-mixed.wav")
CJK_SPACE_CJK = re.compile(r"[\u3400-\u9fff] [\u3400-\u9fff]")
CHARACTER_MODELS = ("tiny-random-cjkchar", "tiny-random-cjkchar-bpe", "tiny-random-byte")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        cwd=ROOT,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _jsonl(clip: Path, model: str, *extra: str) -> tuple[list[dict], str]:
    result = _cli("file", str(clip), "--model", str(MODELS / model), "--format", "jsonl", *extra)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def _assert_whole_characters(text: str) -> None:
    assert "\ufffd" not in text
    text.encode("utf-8")  # raises on a lone surrogate
    assert all(c.isprintable() for c in text), repr(text)
    assert not CJK_SPACE_CJK.search(text), text
    assert text == text.strip() and "  " not in text


@pytest.mark.parametrize("model", CHARACTER_MODELS)
def test_every_output_format_shows_whole_characters(model: str, tmp_path: Path) -> None:
    # one process writes every format of both clips (--output-dir: the renderers of stdout);
    # stdout's own encoding is what the other tests here read
    out = tmp_path / "out"
    result = _cli("file", *map(str, CLIPS), "--model", str(MODELS / model), "--output-dir",
                  str(out), "--format", "jsonl,srt,txt")
    assert result.returncode == 0, result.stderr
    for clip in CLIPS:
        written = out / clip.stem
        lines = written.with_suffix(".jsonl").read_text("utf-8").splitlines()
        events = [json.loads(line) for line in lines]
        texts = [e["text"] for e in events if e["type"] in ("partial", "final", "summary")]
        assert texts, "the random model always emits text"
        for text in texts:
            _assert_whole_characters(text)
        finals = [e["text"] for e in events if e["type"] == "final"]
        srt = written.with_suffix(".srt").read_text("utf-8")
        cues = [b.splitlines()[2:] for b in srt.strip().split("\n\n")]
        # cues split finals at words (each CJK character is one), lines of 42 at most: the
        # characters, in order, are the finals' characters
        # (a single "word" longer than a line, as a random model makes, gets a line alone)
        assert all(len(line) <= 42 or " " not in line for lines in cues for line in lines)
        assert "".join("".join(lines) for lines in cues).replace(" ", "") == "".join(
            finals
        ).replace(" ", "")
        plain = written.with_suffix(".txt").read_text("utf-8")
        assert plain.strip() == " ".join(finals)


def test_random_character_model_writes_chinese_without_spaces() -> None:
    events, _ = _jsonl(CLIPS[0], "tiny-random-cjkchar")
    final = next(e for e in events if e["type"] == "final")
    assert re.fullmatch(r"[\u4e00-\u9fff]+", final["text"]), final["text"]
    assert len(final["text"]) == len(final["tokens"])  # one character per token, none lost


def test_mixed_model_puts_one_space_at_each_chinese_english_boundary() -> None:
    events, _ = _jsonl(CLIPS[1], "tiny-random-cjkchar-bpe")
    text = next(e for e in events if e["type"] == "final")["text"]
    assert re.search(r"[A-Z]", text) and re.search(r"[\u4e00-\u9fff]", text), text
    assert not re.search(r"[\u4e00-\u9fff][A-Z]|[A-Z][\u4e00-\u9fff]", text), text


@pytest.fixture(scope="module")
def noise_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("noise") / "noise.wav"
    rng = np.random.default_rng(7)
    sf.write(path, (rng.standard_normal(16000 * 3) * 0.1).astype(np.float32), 16000)
    return path


@pytest.mark.parametrize("which", ["speech", "noise"])
def test_byte_model_text_is_the_same_for_every_feed_block(which: str, noise_clip: Path) -> None:
    clip = CLIPS[0] if which == "speech" else noise_clip
    seen = {}
    for block_ms in ("10", "100", "320", "1000"):
        events, stderr = _jsonl(clip, "tiny-random-byte", "--block-ms", block_ms)
        for event in events:
            if "text" in event:
                _assert_whole_characters(event["text"])
        seen[block_ms] = [e["text"] for e in events if e["type"] == "final"]
        # the random byte model emits lead bytes that never complete: they are counted
        dropped = [int(n) for n in re.findall(r"dropped (\d+) byte", stderr)]
        assert dropped and all(n > 0 for n in dropped), stderr
    assert len({json.dumps(v) for v in seen.values()}) == 1, seen
    if which == "speech":
        assert any(ord(c) > 0x3400 for c in "".join(seen["10"])), "a whole CJK character is kept"


def _manifest(tmp_path: Path) -> Path:
    refs = dict(line.split(" ", 1) for line in (ZH / "trans.txt").read_text("utf-8").splitlines())
    path = tmp_path / "zh.jsonl"
    path.write_text(
        "".join(
            json.dumps({"audio_filepath": str(c), "text": refs[c.stem]}, ensure_ascii=False) + "\n"
            for c in CLIPS
        ),
        encoding="utf-8",
    )
    return path


def _bench(tmp_path: Path, model: str, *extra: str) -> tuple[str, dict[str, str]]:
    out = tmp_path / f"out-{model}-{len(extra)}"
    result = _cli("bench", str(_manifest(tmp_path)), "--model", str(MODELS / model),
                  "--out", str(out), *extra)  # fmt: skip
    assert result.returncode == 0, result.stderr
    metric = json.loads((out / "results.json").read_text("utf-8"))["run"]["metric"]
    records = [
        json.loads(line) for line in (out / "utterances.jsonl").read_text("utf-8").splitlines()
    ]
    return metric, {Path(r["audio"]).name: r["hypothesis"] for r in records}


@pytest.mark.parametrize(
    ("model", "metric"),
    [
        ("tiny-random-cjkchar", "cer"),
        ("tiny-random-cjkchar-bpe", "mer"),
        # a byte-level model declares no language: the references decide, and this set
        # mixes Chinese characters and English words
        ("tiny-random-byte", "mer"),
    ],
)
def test_bench_scores_chinese_with_the_models_metric_and_file_s_text(
    tmp_path: Path, model: str, metric: str
) -> None:
    chosen, hypotheses = _bench(tmp_path, model)
    assert chosen == metric
    for clip in CLIPS:
        events, _ = _jsonl(clip, model)
        file_text = " ".join(e["text"] for e in events if e["type"] == "final")
        assert hypotheses[clip.name] == file_text
        _assert_whole_characters(hypotheses[clip.name])
    _, batched = _bench(tmp_path, model, "--streams", "2")
    assert batched == hypotheses


def test_bench_metric_can_be_overridden(tmp_path: Path) -> None:
    chosen, _ = _bench(tmp_path, "tiny-random-cjkchar-bpe", "--metric", "cer")
    assert chosen == "cer"
    bad = _cli("bench", str(_manifest(tmp_path)), "--metric", "ter", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2
    assert "wer, cer, mer or auto" in bad.stderr


@pytest.mark.parametrize("model", ["tiny-random-cjkchar-bpe", "tiny-random-byte"])
def test_mic_session_on_mandarin_matches_the_file_run(model: str, tmp_path: Path) -> None:
    """`mic`'s live loop with an injected PortAudio stream (48 kHz stereo, as a headset)."""
    import io

    from test_mic import HEADSET, factory

    from streamasr.backends.base import EngineOptions
    from streamasr.backends.sherpa.engine import SherpaRecognizer
    from streamasr.backends.sherpa.modeldir import resolve_model
    from streamasr.devices.live import SessionOutput, run_capture
    from streamasr.devices.mic import MicSource
    from streamasr.devices.wav_writer import AudioWriter
    from streamasr.output.render import JsonlRenderer
    from streamasr.session.stream import StreamOptions

    wav48 = tmp_path / "zh-48k.wav"
    subprocess.run(["sox", str(CLIPS[1]), "-r", "48000", "-c", "2", str(wav48)], check=True)
    audio, _ = sf.read(wav48, dtype="float32", always_2d=True)
    recognizer = SherpaRecognizer(resolve_model(str(MODELS / model), None), EngineOptions())
    source = MicSource(HEADSET, recognizer.chunk_s, stream_factory=factory(audio))
    shown = io.StringIO()
    output = SessionOutput(JsonlRenderer(shown), None)
    writer = AudioWriter(str(tmp_path / "saved.wav"), source.sample_rate)
    summary = run_capture(source, recognizer, StreamOptions(), output, writer, 3.0)
    assert summary is not None
    events = [json.loads(line) for line in shown.getvalue().splitlines()]
    for event in events:
        if "text" in event:
            _assert_whole_characters(event["text"])
    file_events, _ = _jsonl(tmp_path / "saved.wav", model)
    file_text = " ".join(e["text"] for e in file_events if e["type"] == "final")
    assert summary.text == file_text
