"""`file --server` against a hostile server on 127.0.0.1 (one that `streamasr serve` cannot be
made to be): records of the wrong shape, a flood of partials without a summary, an
oversized message, a summary before the end, a later wire version. Each is one clear error
(exit 1), what came before it is written, and no `.part` file is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import serve

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "4.wav"
FINAL = {"type": "final", "seq": 1, "audio_s": 0.5, "wall_s": 0.1, "segment": 0,
         "text": "KEPT", "start_s": 0.0, "end_s": 0.5}  # fmt: skip
PARTIAL = {"type": "partial", "seq": 2, "audio_s": 0.6, "wall_s": 0.1, "segment": 1,
           "text": "MORE"}  # fmt: skip
SUMMARY = {"type": "summary", "source": "x", "audio_s": 1.0, "compute_s": 0.1, "wall_s": 0.1,
           "text": "KEPT"}  # fmt: skip


def until_end(ws: Any) -> None:
    for message in ws:
        if isinstance(message, str) and json.loads(message).get("type") == "end":
            return


def malformed(record: Any) -> Callable[[Any], None]:
    """Sends a final, then `record` (as is, when it is a string), after the end."""

    def handler(ws: Any) -> None:
        until_end(ws)
        ws.send(json.dumps(FINAL))
        ws.send(record if isinstance(record, str) else json.dumps(record))
        time.sleep(5)

    return handler


def flood(ws: Any) -> None:
    until_end(ws)
    ws.send(json.dumps(FINAL))
    while True:
        ws.send(json.dumps(PARTIAL))
        time.sleep(0.01)


def oversized(ws: Any) -> None:
    until_end(ws)
    ws.send(json.dumps(FINAL))
    ws.send("x" * (17 * 1024 * 1024))
    time.sleep(5)


def early_summary(ws: Any) -> None:
    ws.recv()  # the config
    ws.recv()  # the first block
    ws.send(json.dumps(FINAL))
    ws.send(json.dumps(SUMMARY))
    for _ in ws:
        pass


def later_version(ws: Any) -> None:
    ws.recv()
    ws.recv()
    ws.send(json.dumps(FINAL))
    ws.send(json.dumps({**PARTIAL, "v": 2}))
    for _ in ws:
        pass


@contextmanager
def hostile(handler: Callable[[Any], None]) -> Iterator[str]:
    def guarded(ws: Any) -> None:
        try:
            handler(ws)
        except ConnectionClosed:
            pass

    with serve(guarded, "127.0.0.1", 0, max_size=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/ws"
        server.shutdown()


CASES = {
    "not json": (malformed("{nope"), "not JSON"),
    "a list": (malformed([1, 2]), "a JSON list"),
    "no type": (malformed({"text": "x"}), "without a string 'type'"),
    "unknown type": (malformed({"type": "zzz"}), "unknown event type"),
    "missing fields": (malformed({"type": "final"}), "does not fit"),
    "text a number": (malformed({**FINAL, "text": 5}), "'text' is not of type str"),
    "time a string": (malformed({**FINAL, "audio_s": "1"}), "'audio_s' is not of type float"),
    "words not objects": (malformed({**FINAL, "words": ["a"]}), "'words'"),
    "tokens not a list": (malformed({**PARTIAL, "tokens": 3}), "'tokens'"),
    "summary without text": (malformed({**SUMMARY, "text": None}), "'text' is not a string"),
    "summary time a bool": (malformed({**SUMMARY, "audio_s": True}), "'audio_s' is not a num"),
    "flood of partials": (flood, "no summary within 3 s"),
    "oversized message": (oversized, "over 16 MiB"),
    "summary before the end": (early_summary, "before the end of the input"),
    "later wire version": (later_version, "wire version 2"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_server_is_one_error_with_what_came_written(tmp_path: Path, case: str) -> None:
    handler, says = CASES[case]
    # paced, so that what the server says during the input comes before the input's end
    paced = ["--realtime"] if handler in (early_summary, later_version) else []
    with hostile(handler) as url:
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "streamasr", "file", str(CLIP), "--server", url,
             "-o", str(tmp_path), "--format", "txt,jsonl", *paced],
            cwd=REPO, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO), "STREAMASR_FINISH_TIMEOUT_S": "1"},
        )  # fmt: skip
    assert time.monotonic() - start < 60
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert (tmp_path / "4.txt").read_text().split() == ["KEPT"]
    assert not list(tmp_path.glob("*.part"))
