"""Clients of `streamasr serve`: `streamasr file --server URL` and `streamasr.connect(url)`
give what the local model gives (the clocks aside)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import soundfile as sf
from serve_fixture import REPO, ServerProcess, clip, comparable, file_events, serve

import streamasr

CLIPS = [clip(0), clip(1)]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve() as running:
        yield running


def run_file(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "file", *args],
        cwd=REPO, capture_output=True, text=True,
    )


def test_file_with_server_prints_what_file_prints(server: ServerProcess) -> None:
    done = run_file(*CLIPS, "--server", server.url, "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    remote: dict[str, list[dict]] = {path: [] for path in CLIPS}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        remote[record["source"]].append(record)
    local = file_events(*CLIPS)
    for path in CLIPS:
        assert comparable(remote[path]) == comparable(local[path])
    text = run_file(CLIPS[0], "--server", server.url, "--format", "text")
    local_text = run_file(CLIPS[0], "--model", "tiny-en", "--format", "text")
    assert text.stdout == local_text.stdout and text.stdout.strip()


def test_file_with_server_refuses_model_options_and_says_unreachable(
    server: ServerProcess,
) -> None:
    refused = run_file(CLIPS[0], "--server", server.url, "--chunk", "32")
    assert refused.returncode == 2 and "--chunk is the server's setting" in refused.stderr
    unreachable = run_file(CLIPS[0], "--server", "ws://127.0.0.1:1/ws")
    assert unreachable.returncode == 1 and "cannot connect" in unreachable.stderr


def test_connect_streams_like_open_model(server: ServerProcess) -> None:
    audio, rate = sf.read(REPO / CLIPS[1], dtype="float32")
    local_model = streamasr.open_model("tiny-en")
    chunk = round(local_model.session(rate).block_s * rate)  # the server's feed block
    local_blocks = [audio[start : start + chunk] for start in range(0, len(audio), chunk)]
    local = [event.to_dict() for event in local_model.stream(local_blocks, rate, CLIPS[1])]
    # any block size: the server cuts the audio into feed blocks of one chunk itself
    blocks = [audio[start : start + 1234] for start in range(0, len(audio), 1234)]
    with streamasr.connect(server.url) as remote_model:
        remote = [event.to_dict() for event in remote_model.stream(blocks, rate, CLIPS[1])]
        summary = remote_model.transcribe(audio, rate, CLIPS[1])  # same connection, again
    assert comparable(remote) == comparable(local)
    assert summary.text == local_model.transcribe(audio, rate).text and summary.text
    assert [final.text for final in summary.finals] == [
        event["text"] for event in local if event["type"] == "final"
    ]
