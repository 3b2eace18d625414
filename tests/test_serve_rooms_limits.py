"""The rooms' limits an attacker meets on a real server: --max-rooms and --max-readers are
options that hold (while /readyz and sessions keep answering), and the start warns when
other machines may make rooms with no publish token."""

from __future__ import annotations

import asyncio
import json

from room_clients import ws_refusal
from serve_fixture import ServerProcess, clip, http_get, serve, stream_clip
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from streamasr.server.reach import Exposure, exposure_warning

FILE_SETTINGS = {"block_ms": "chunk", "tail_padding_s": 0.66}


async def _refused_room(server: ServerProcess, room: str) -> tuple[int, str]:
    async with connect(server.url) as ws:
        await ws.send(json.dumps({"sample_rate": 16000, "room": room}))
        try:
            await ws.recv()
        except ConnectionClosed as exc:
            assert exc.rcvd is not None
            return exc.rcvd.code, exc.rcvd.reason
    return 0, ""


def test_room_and_reader_limits_hold_and_the_server_keeps_answering() -> None:
    with serve("--max-rooms", "1", "--max-readers", "2", "--max-batch", "1") as server:

        async def run() -> tuple[tuple[int, str], tuple[int | None, str], int, list[dict]]:
            async with connect(server.url) as ws:
                await stream_clip(ws, clip(1), room="one", **FILE_SETTINGS)
            refused_room = await _refused_room(server, "two")
            url = f"ws://127.0.0.1:{server.port}/rooms/one/ws"
            holders = [await connect(url) for _ in range(2)]
            for holder in holders:
                while json.loads(await holder.recv())["type"] != "status":
                    pass
            refused_reader = await ws_refusal(url)
            ready = (await asyncio.to_thread(http_get, server.http + "/readyz"))[0]
            async with connect(server.url) as ws:  # a session still gets its text
                events = await stream_clip(ws, clip(1), **FILE_SETTINGS)
            for holder in holders:
                await holder.close()
            return refused_room, refused_reader, ready, events

        refused_room, refused_reader, ready, events = asyncio.run(run())
    assert refused_room[0] == 1013 and "--max-rooms" in refused_room[1]
    assert refused_reader[0] == 4429 and "--max-readers" in refused_reader[1]
    assert ready == 200
    assert [e for e in events if e["type"] == "final" and e["text"]]


def test_a_reachable_server_without_a_publish_token_warns() -> None:
    reachable, loopback = [("0.0.0.0", 6006)], [("127.0.0.1", 6006)]
    for tls in (False, True):
        warning = exposure_warning(reachable, Exposure(token=False, tls=tls, open_rooms=True))
        assert warning is not None and "publish to them" in warning
        assert "--publish-token-file" in warning
        guarded = exposure_warning(reachable, Exposure(token=False, tls=tls))
        assert guarded is not None and "--publish-token-file" not in guarded
    # a server token guards publishing too (a publisher must present it)
    with_token = exposure_warning(reachable, Exposure(token=True, tls=False, open_rooms=True))
    assert with_token is not None and "publish" not in with_token
    assert exposure_warning(loopback, Exposure(token=False, tls=False, open_rooms=True)) is None
