"""Events from a `streamasr serve` are the event objects a local model yields, finished by the
same chain: the wire version, words read back, the server's own punctuation and casing
(`serve --punctuate/--sentence-case`, the session keys), a URL without a path, and the finals
kept when a server dies in the middle of a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf
from serve_fixture import CLOCK_FIELDS, ServerProcess, serve

import streamasr
from streamasr.errors import InputError
from streamasr.server.client import ServerError, event_from_record, with_ws_path
from streamasr.session.events import WIRE_VERSION, Final
from streamasr.text.captions import Word

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "4.wav"  # THE RIGHT TIME TO ACT
PUNCT = str(REPO / "models" / "tiny-punct-en")


def run(*args: str, stdin: Any = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamasr", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=120, stdin=stdin,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def local_finals(*options: str) -> list[dict[str, Any]]:
    """The finals local `file` writes for CLIP, without the clocks."""
    done = run("file", str(CLIP), "--model", "tiny-en", "-f", "jsonl", *options)
    assert done.returncode == 0, done.stderr
    finals = [json.loads(line) for line in done.stdout.splitlines()]
    return [{k: v for k, v in r.items() if k not in (*CLOCK_FIELDS, "source")}
            for r in finals if r["type"] == "final"]


def remote_finals(url: str, **keys: Any) -> list[dict[str, Any]]:
    """The finals a library client gets for CLIP, with these session config keys."""
    audio, rate = sf.read(CLIP, dtype="float32")
    with streamasr.connect(url) as model:
        model.settings = {**model.settings, **keys}
        summary = model.transcribe(audio, rate, str(CLIP))
    return [{k: v for k, v in final.to_dict().items() if k not in CLOCK_FIELDS}
            for final in summary.finals]


@pytest.fixture(scope="module")
def punctuating() -> Iterator[ServerProcess]:
    """A server whose sessions are punctuated unless they ask otherwise."""
    with serve("--punctuate", PUNCT) as process:
        yield process


def test_records_carry_the_wire_version_and_read_back_as_event_objects() -> None:
    record = {"v": WIRE_VERSION, "type": "final", "source": "a.wav", "seq": 3, "audio_s": 1.0,
              "wall_s": 0.1, "segment": 0, "text": "HI THERE", "start_s": 0.2, "end_s": 0.9,
              "tokens": ["▁HI", "▁THERE"], "token_times_s": [0.2, 0.5],
              "words": [{"text": "Hi", "start_s": 0.2, "end_s": 0.5},
                        {"text": "there.", "start_s": 0.5, "end_s": 0.9}]}
    event = event_from_record(record)
    assert isinstance(event, Final) and event.tokens == ("▁HI", "▁THERE")
    assert event.words == (Word("Hi", 0.2, 0.5), Word("there.", 0.5, 0.9))
    with pytest.raises(ServerError, match="wire version 2.*upgrade streamasr"):
        event_from_record({**record, "v": 2})
    with pytest.raises(ServerError, match="cannot read"):
        event_from_record({**record, "start_s": None, "words": [{"text": "x"}]})


def test_a_url_without_a_path_goes_to_ws() -> None:
    assert with_ws_path("ws://127.0.0.1:6006") == "ws://127.0.0.1:6006/ws"
    assert with_ws_path("wss://h:1/") == "wss://h:1/ws"
    assert with_ws_path("ws://h:1/other?x=1") == "ws://h:1/other?x=1"
    assert with_ws_path("http://h:1") == "http://h:1"  # the client says it is no ws:// URL


def test_server_finishing_is_the_local_chain_and_sessions_choose(
    punctuating: ServerProcess,
) -> None:
    url = f"ws://127.0.0.1:{punctuating.port}"  # no path: it goes to /ws
    punctuated = local_finals("--punctuate", PUNCT)
    assert remote_finals(url) == punctuated  # the server's default
    assert remote_finals(url, punctuate=False) == local_finals()
    cased = local_finals("--sentence-case")
    assert remote_finals(url, punctuate=False, sentence_case=True) == cased
    assert cased != punctuated != local_finals()  # three different texts: the test can fail
    # what `file --server` shows: its own chain, the server asked for none
    text = run("file", str(CLIP), "--server", url, "-f", "text", "--sentence-case")
    assert text.returncode == 0 and text.stdout.strip() == cased[0]["text"]
    # every record on the wire says its version
    with streamasr.connect(url) as model:
        session = model.session(16000, "x")
        ws = session._open()
        ws.send(json.dumps({"type": "end"}))
        assert json.loads(ws.recv())["v"] == WIRE_VERSION


def test_asking_a_server_without_a_model_to_punctuate_is_refused() -> None:
    with serve() as plain:
        with pytest.raises(InputError, match="no punctuation model"):
            remote_finals(plain.url, punctuate=True)
        assert remote_finals(plain.url, sentence_case=True) == local_finals("--sentence-case")


def test_finals_received_before_the_server_dies_are_in_the_output_files(
    tmp_path: Path,
) -> None:
    audio, rate = sf.read(CLIP, dtype="int16")
    speech_then_silence = audio.tobytes() + bytes(2 * rate * 2)  # 2 s: an endpoint
    with serve() as server:
        client = subprocess.Popen(
            [sys.executable, "-m", "streamasr", "file", "-", "--raw", "s16le", "--rate",
             str(rate), "--server", server.url, "-o", str(tmp_path), "--format", "txt,srt",
             "--sentence-case", "--rule2", "0.5"],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=False, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert client.stdin is not None
        client.stdin.write(speech_then_silence)
        client.stdin.flush()
        part = tmp_path / "stdin.txt.part"
        deadline = time.monotonic() + 60
        while not (part.exists() and part.read_text().strip()):  # the first final arrived
            assert time.monotonic() < deadline and client.poll() is None, client.stderr
            client.stdin.write(bytes(rate // 5))  # keep the audio coming, as a live source
            client.stdin.flush()
            time.sleep(0.1)
        server.stop(signal.SIGKILL)
        try:
            while client.poll() is None:
                client.stdin.write(bytes(rate // 5))
                client.stdin.flush()
                time.sleep(0.05)
        except BrokenPipeError:
            pass
        _, err = client.communicate(timeout=60)
    stderr = err.decode()
    assert client.returncode == 1 and "Traceback" not in stderr, stderr
    assert "error:" in stderr and "server" in stderr
    (final,) = local_finals("--sentence-case", "--rule2", "0.5")
    assert (tmp_path / "stdin.txt").read_text().strip() == final["text"]
    assert "-->" in (tmp_path / "stdin.srt").read_text()
    assert not list(tmp_path.glob("*.part"))
