"""`--partials delta`: each JSONL partial carries only what changed since the previous one of
its segment, and rebuilding the partials from the deltas gives exactly the full ones."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.output.render import JsonlRenderer
from streamasr.session.events import Final, Partial

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
VOLATILE = ("wall_s", "compute_s", "rtf", "first_token_wall_latency_s")


def rebuild(records: list[dict]) -> list[dict]:
    """Full partials from delta ones, as a consumer of `--partials delta` would."""
    previous: dict[tuple[str, int], dict] = {}
    out = []
    for record in records:
        if record["type"] != "partial" or "text" in record:
            out.append(record)
            continue
        key = (record["source"], record["segment"])
        before = previous.get(key, {"text": "", "tokens": [], "token_times_s": []})
        stable, kept = record["stable_chars"], record["stable_tokens"]
        full = {k: v for k, v in record.items() if not k.startswith("stable_")
                and not k.endswith("_tail")}  # fmt: skip
        full["text"] = before["text"][:stable] + record["text_tail"]
        full["tokens"] = before["tokens"][:kept] + record["tokens_tail"]
        full["token_times_s"] = before["token_times_s"][:kept] + record["token_times_s_tail"]
        previous[key] = full
        out.append(full)
    return out


def _partial(seq: int, segment: int, text: str, tokens: tuple[str, ...]) -> Partial:
    times = tuple(0.04 * i for i in range(len(tokens)))
    return Partial(seq=seq, audio_s=0.32 * seq, wall_s=0.0, segment=segment, text=text,
                   tokens=tokens, token_times_s=times)


def test_deltas_rebuild_the_full_partials_through_revisions_and_segments() -> None:
    events = [
        _partial(1, 0, "HE", ("▁HE",)),
        _partial(2, 0, "HELLO", ("▁HE", "LLO")),
        _partial(3, 0, "HELP", ("▁HE", "LP")),  # beam search took a piece back
        _partial(4, 0, "HELP ME", ("▁HE", "LP", "▁ME")),
        Final(seq=5, audio_s=2.0, wall_s=0.0, segment=0, text="HELP ME", start_s=0.0, end_s=1.0),
        _partial(6, 1, "你", ("你",)),
        _partial(7, 1, "你好", ("你", "好")),
    ]
    full, delta = io.StringIO(), io.StringIO()
    for out, mode in ((full, "full"), (delta, "delta")):
        renderer = JsonlRenderer(out, mode)
        renderer.begin("a.wav")
        for event in events:
            renderer.event(event)
    full_records = [json.loads(line) for line in full.getvalue().splitlines()]
    delta_records = [json.loads(line) for line in delta.getvalue().splitlines()]
    assert rebuild(delta_records) == full_records
    assert [r.get("stable_chars") for r in delta_records] == [0, 2, 3, 4, None, 0, 1]
    assert delta_records[2]["text_tail"] == "P" and delta_records[2]["tokens_tail"] == ["LP"]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "streamasr.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled clips three times over, about 35 s, for one long utterance."""
    wavs = sorted((MODELS / "tiny-en" / "test_wavs").glob("*.wav"))
    clips = [sf.read(p, dtype="float32")[0] for p in wavs]
    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, np.concatenate(clips * 3), 16000, subtype="PCM_16")
    return path


def _records(stdout: str) -> list[dict]:
    records = [json.loads(line) for line in stdout.splitlines()]
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("tiny-en", ()),
        ("tiny-random-cjkchar-bpe", ("--decoding-method", "modified_beam_search")),
    ],
)
def test_cli_delta_partials_rebuild_the_full_ones_and_are_smaller(
    long_wav: Path, model: str, extra: tuple[str, ...]
) -> None:
    common = ("file", str(long_wav), "--model", str(MODELS / model), "-f", "jsonl",
              "--no-endpoint", *extra)  # fmt: skip
    full = cli(*common)
    delta = cli(*common, "--partials", "delta")
    assert full.returncode == 0 and delta.returncode == 0, full.stderr + delta.stderr
    full_records = _records(full.stdout)
    assert sum(r["type"] == "partial" for r in full_records) > 20
    assert rebuild(_records(delta.stdout)) == full_records
    assert len(delta.stdout) < len(full.stdout) / 2


def test_delta_partials_need_jsonl() -> None:
    done = cli("file", "x.wav", "--model", "tiny-en", "-f", "text", "--partials", "delta")
    assert done.returncode == 2 and "--format jsonl" in done.stderr
    done = cli("file", "x.wav", "--model", "tiny-en", "-f", "jsonl", "--partials", "half")
    assert done.returncode == 2 and "full, delta" in done.stderr
