"""What a backend returns is checked at the seam: a bad value is one error naming the backend.

The faulty backends (faulty_backend.py beside this file) are the energy test backend with one
fault each, from the second token of a segment on. Each runs in a fresh `streamasr file`
process: exit 1, one line on stderr naming the backend, and stdout stays valid JSONL (no NaN).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.backends.base import Hypothesis
from streamasr.errors import BackendError
from streamasr.output.render import JsonlRenderer
from streamasr.session.stream import check_hypothesis

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


@pytest.fixture(scope="module")
def burst_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three 440 Hz bursts at 16 kHz: three tokens from the energy backend."""
    rate = 16000
    audio = np.zeros(3 * rate, np.float32)
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(0.15 * rate)) / rate)).astype(np.float32)
    for start_s in (0.5, 1.0, 1.5):
        audio[int(start_s * rate) : int(start_s * rate) + len(tone)] = tone
    path = tmp_path_factory.mktemp("faults") / "bursts.wav"
    sf.write(path, audio, rate, subtype="PCM_16")
    return path


def _strict_json(line: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in JSON")

    return json.loads(line, parse_constant=refuse)


def _run_faulty(wav: Path, entry: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", str(wav),
         "--backend", f"faulty_backend:{entry}", "--model", "energy-bursts", "-f", "jsonl"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "name", "says"),
    [
        ("NAN_TIME", "faulty-nan-time", "nan"),
        ("DECREASING_TIMES", "faulty-decreasing-times", "must not decrease"),
        ("BYTES_TOKEN", "faulty-bytes-token", "bytes, not str"),
        ("BYTES_TEXT", "faulty-bytes-text", "bytes, not str"),
        ("NONE_HYPOTHESIS", "faulty-none-hypothesis", "NoneType from hypothesis()"),
    ],
)
def test_a_bad_value_from_a_backend_is_one_line_naming_it(
    burst_wav: Path, entry: str, name: str, says: str
) -> None:
    done = _run_faulty(burst_wav, entry)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert name in lines[0] and says in lines[0] and "Traceback" not in done.stderr
    records = [_strict_json(line) for line in done.stdout.splitlines()]
    # the good first partial got out before the bad one was refused
    assert [r["text"] for r in records if r["type"] == "partial"] == ["B1"]


@pytest.mark.parametrize(
    ("entry", "name", "says"),
    [
        ("NAN_CHUNK", "faulty-nan-chunk", "chunk_s = nan"),
        ("NAN_FRAME", "faulty-nan-frame", "output_frame_s = nan"),
        ("ZERO_RATE", "faulty-zero-rate", "sample_rate_hz = 0"),
    ],
)
def test_sizes_no_engine_can_have_are_refused_when_it_loads(
    burst_wav: Path, entry: str, name: str, says: str
) -> None:
    done = _run_faulty(burst_wav, entry)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert name in lines[0] and says in lines[0]
    assert done.stdout == ""


def test_only_the_new_part_is_checked_but_order_across_it_is() -> None:
    good = Hypothesis(text="a b", tokens=("a", "b"), token_times_s=(0.1, 0.2))
    check_hypothesis(good, "x")
    # the backend vouches for the first token: a bad value there is not looked at again
    check_hypothesis(Hypothesis(text="a b", tokens=(b"a", "b"), token_times_s=(0.1, 0.2),  # type: ignore[arg-type]
                                unchanged_tokens=1), "x")
    with pytest.raises(BackendError, match="'x'.*must not decrease"):
        check_hypothesis(Hypothesis(text="a b", tokens=("a", "b"), token_times_s=(0.3, 0.2),
                                    unchanged_tokens=1), "x")
    for times in ((-0.1,), (math.inf,), (math.nan,)):
        with pytest.raises(BackendError, match="finite and >= 0"):
            check_hypothesis(Hypothesis(text="a", tokens=("a",), token_times_s=times), "x")
    with pytest.raises(BackendError, match="unchanged_tokens"):
        check_hypothesis(Hypothesis(text="a", tokens=("a",), unchanged_tokens=2), "x")
    with pytest.raises(BackendError, match="segment start"):
        check_hypothesis(Hypothesis(text="", segment_start_s=math.nan), "x")


def test_jsonl_renderer_never_writes_nan() -> None:
    import io

    from streamasr.errors import StreamAsrError
    from streamasr.session.events import StreamSummary

    out = io.StringIO()
    renderer = JsonlRenderer(out)
    with pytest.raises(StreamAsrError, match="not a finite number"):
        renderer.end(StreamSummary(source="s", audio_s=1.0, compute_s=math.nan, wall_s=1.0,
                                   text=""))
    assert out.getvalue() == ""


# --- terminal escapes in recognised text --------------------------------------------------

# what no human-facing output may hold: C0 controls but the newline that ends a line, DEL,
# C1 controls, the Unicode line and paragraph separators
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture(scope="module")
def escape_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Five bursts (five hostile pieces from ESCAPES) in a file whose name holds an OSC."""
    folder = tmp_path_factory.mktemp("escapes")
    rate = 16000
    audio = np.zeros(4 * rate, np.float32)
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(0.15 * rate)) / rate)).astype(np.float32)
    for start_s in (0.5, 1.0, 1.5, 2.0, 2.5):
        audio[int(start_s * rate) : int(start_s * rate) + len(tone)] = tone
    wav = folder / "talk\x1b]0;named\x07.wav"
    sf.write(wav, audio, rate, subtype="PCM_16")
    return wav, folder


def _escapes(wav: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", str(wav),
         "--backend", "faulty_backend:ESCAPES", "--model", "energy-bursts", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["text", "live", "srt", "vtt"])
def test_escape_sequences_from_an_engine_never_reach_the_terminal(
    escape_run: tuple[Path, Path], fmt: str
) -> None:
    from faulty_backend import HOSTILE_PIECES

    done = _escapes(escape_run[0], "-f", fmt)
    assert done.returncode == 0, done.stderr
    for stream in (done.stdout, done.stderr):
        assert not RAW_CONTROL.search(stream), repr(stream)
    # what is left of each sequence is shown as plain characters; the words are all there
    for word in ("red", "title", "nul", "forged", "sep", "named"):
        assert word in done.stdout + done.stderr
    if fmt in ("srt", "vtt"):
        # the forged cue stays inside the real one: one cue per timing line, no forged times
        assert " --> 00:09:00" not in done.stdout
        assert done.stdout.count(" --> ") == 2, done.stdout
    if fmt == "text":
        assert len(done.stdout.splitlines()) == 1, done.stdout
    assert HOSTILE_PIECES[0] not in done.stdout


def test_jsonl_keeps_the_engine_text_escaped_as_json(escape_run: tuple[Path, Path]) -> None:
    from faulty_backend import HOSTILE_PIECES

    done = _escapes(escape_run[0], "-f", "jsonl")
    assert done.returncode == 0, done.stderr
    assert not RAW_CONTROL.search(done.stdout), repr(done.stdout)
    finals = [r for r in map(_strict_json, done.stdout.splitlines()) if r["type"] == "final"]
    assert [f["text"] for f in finals] == ["".join(HOSTILE_PIECES)]
    assert finals[0]["source"] == str(escape_run[0])


def test_files_written_by_output_dir_hold_no_control_characters(
    escape_run: tuple[Path, Path],
) -> None:
    out = escape_run[1] / "out"
    done = _escapes(escape_run[0], "--output-dir", str(out), "-f", "txt,srt,vtt")
    assert done.returncode == 0, done.stderr
    written = sorted(out.iterdir())
    assert [p.suffix for p in written] == [".srt", ".txt", ".vtt"]
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert "forged" in text and not RAW_CONTROL.search(text), (path.name, text)
    assert not RAW_CONTROL.search(done.stderr), repr(done.stderr)


def test_every_control_character_is_kept_from_people_and_kept_for_programs() -> None:
    from streamasr.text.printable import json_escaped, printable

    controls = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]))
    text = f"a{controls}b \u00e9\u4e2d [x]"
    shown = printable(text)
    assert not RAW_CONTROL.search(shown.replace("\n", "")) and "\n" not in shown
    assert shown.split() == ["a", "b", "\u00e9\u4e2d", "[x]"]  # spaces kept, the rest dropped
    line = json_escaped(json.dumps({"text": text}, ensure_ascii=False))
    assert not RAW_CONTROL.search(line) and json.loads(line) == {"text": text}
    assert printable("plain words") == "plain words"
