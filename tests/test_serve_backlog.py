"""A client that sends more audio at once than one scheduler job takes (one chunk's blocks).

The scheduler hands such an utterance's blocks out over several jobs. Each batched engine
step must see its stream once: the same utterance taken twice into one job had its stream
stepped twice in one step, and the engine (sherpa-onnx) aborted the whole server process,
ending every session on it. Here: 11.7 s in one message, against `streamasr file`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import soundfile as sf
from serve_fixture import WAVS, clip, comparable, file_events, serve, stream_clip
from websockets.asyncio.client import connect


def test_audio_sent_all_at_once_is_decoded_as_file_decodes_it(tmp_path: Path) -> None:
    clips = [sf.read(WAVS / f"{index}.wav", dtype="int16") for index in range(5)]
    audio = np.concatenate([data for data, _ in clips])
    path = tmp_path / "long.wav"
    sf.write(path, audio, 16000, subtype="PCM_16")
    blocks = len(audio) / (0.32 * 16000)
    assert blocks > 2 * 16  # feed blocks of one chunk: many jobs' worth
    expected = file_events(str(path))[str(path)]

    with serve() as server:

        async def run() -> tuple[list[dict], list[dict]]:
            async with connect(server.url, max_size=None) as ws:
                first = await stream_clip(ws, str(path), frame_bytes=audio.nbytes)
            async with connect(server.url, max_size=None) as ws:  # the server goes on
                second = await stream_clip(ws, clip(1))
            return first, second

        first, second = asyncio.run(run())
        assert server.process.poll() is None, "".join(server.stderr_lines)
    assert expected[-1]["type"] == "summary" and expected[-1]["text"]
    assert comparable(first) == comparable(expected)
    assert second[-1]["type"] == "summary" and second[-1]["text"]
