"""`streamasr serve` as it is deployed: over TLS with a token from the environment, and as
several worker processes sharing one port."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_fixture import clip, file_events, http_get, serve, stream_clip
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

CLIPS = [clip(index) for index in range(4)]


def test_tls_and_token_from_the_environment(tmp_path: Any) -> None:
    import ssl
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    context = ssl.create_default_context(cafile=str(cert))
    args = ("--certfile", str(cert), "--keyfile", str(key))
    with serve(*args, env={"STREAMASR_TOKEN": "from-env"}) as server:
        url = server.url.replace("ws://", "wss://")

        async def run() -> tuple[int, list[dict]]:
            try:
                async with connect(url, ssl=context):
                    pass
                refused = 0
            except InvalidStatus as exc:
                refused = exc.response.status_code
            headers = {"Authorization": "Bearer from-env"}
            async with connect(url, ssl=context, additional_headers=headers) as ws:
                return refused, await stream_clip(ws, CLIPS[3])

        refused, events = asyncio.run(run())
    assert refused == 401
    assert events[-1]["type"] == "summary" and events[-1]["text"]


def test_workers_share_the_port_and_the_metrics() -> None:
    reference = file_events(*CLIPS)
    # --max-batch 1: the bundled model is int8, whose output depends on the streams batched
    # with it (docs/performance.md#int8-batching); this test compares texts with `file`'s
    with serve("--workers", "2", "--max-connections", "8", "--max-batch", "1") as server:

        async def one(path: str) -> list[dict]:
            async with connect(server.url) as ws:
                return await stream_clip(ws, path, frame_bytes=640)

        async def run() -> list[list[dict]]:
            return await asyncio.gather(*(one(path) for path in CLIPS))

        results = asyncio.run(run())
        metrics = http_get(server.http + "/metrics")[1]
        assert server.stop() == 0
    for path, events in zip(CLIPS, results, strict=True):
        assert [e["text"] for e in events if e["type"] == "final"] == [
            e["text"] for e in reference[path] if e["type"] == "final"
        ]
    # the counters are summed over both workers, whichever one answered the scrape
    assert "streamasr_connections_total 4.0" in metrics
    audio = sum(events[-1]["audio_s"] for events in results)
    line = next(x for x in metrics.splitlines() if x.startswith("streamasr_audio_seconds_total"))
    assert abs(float(line.split()[-1]) - audio) < 1e-3
